// The kernels of examples/transformer: the non-GEMM half of one GPT-2 style
// block's decode step (the GEMMs are cuBLAS calls), float32, plain CUDA C.
// scripts/gen-ptx.sh compiles it to transformer.ptx with -fmad=false, so
// every float operation is rounded on its own, as the Go references in
// kernels.go compute it; they also sum in the same order (per thread, then
// the block's tree), so only expf and tanhf differ from the simulator's in
// the last bits.
//
// Element-wise kernels run a grid-stride loop over x (any one-dimensional
// launch covers their extent); the two reductions take their row (or
// sequence and head) from blockIdx.x and reduce over a block of a power of
// two up to 256 threads. Counts and strides that grow with the model (the
// elements of an activation, the KV cache's stride between sequences) are
// 64-bit.

#define MAX_BLOCK 256

// block_sum leaves the sum of every thread's v in partial[0], visible to
// the whole block: a tree over blockDim.x (a power of two) slots.
__device__ static float block_sum(float *partial, float v) {
    partial[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    float total = partial[0];
    __syncthreads(); // everyone has read partial[0] before it is written again
    return total;
}

// block_max is block_sum's tree with fmaxf.
__device__ static float block_max(float *partial, float v) {
    partial[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] = fmaxf(partial[threadIdx.x], partial[threadIdx.x + s]);
        __syncthreads();
    }
    float m = partial[0];
    __syncthreads();
    return m;
}

// layernorm_f32: y[r, :] = (x[r, :] - mean) / sqrt(var + eps) * g + b, one
// block per row (rows blocks exactly).
extern "C" __global__ void __launch_bounds__(MAX_BLOCK)
layernorm_f32(float *y, const float *x, const float *g, const float *b, int rows, int cols, float eps) {
    __shared__ float partial[MAX_BLOCK];
    if ((int)blockIdx.x >= rows) return;
    const float *xr = x + (long long)blockIdx.x * cols;
    float *yr = y + (long long)blockIdx.x * cols;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) acc += xr[c];
    float mean = block_sum(partial, acc) / (float)cols;
    acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float d = xr[c] - mean;
        acc += d * d;
    }
    float inv = 1.0f / sqrtf(block_sum(partial, acc) / (float)cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = (xr[c] - mean) * inv * g[c] + b[c];
}

// bias_f32: y[i] += b[i % cols] over n elements.
extern "C" __global__ void bias_f32(float *y, const float *b, long long n, int cols) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) y[i] = y[i] + b[i % cols];
}

// bias_gelu_f32: y[i] = gelu(y[i] + b[i % cols]), GPT-2's tanh form.
extern "C" __global__ void bias_gelu_f32(float *y, const float *b, long long n, int cols) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = y[i] + b[i % cols];
        y[i] = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
    }
}

// bias_residual_f32: out[i] = res[i] + (y[i] + b[i % cols]): a projection's
// bias and the residual connection around it.
extern "C" __global__ void bias_residual_f32(float *out, const float *res, const float *y, const float *b, long long n, int cols) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = res[i] + (y[i] + b[i % cols]);
}

// kv_write_f32 copies each sequence's k and v (the second and third thirds
// of its qkv row) into the caches at position *pos. Sequence s's cache
// begins at s * seq_stride elements; position p of it at p * channels.
extern "C" __global__ void kv_write_f32(float *kcache, float *vcache, const float *qkv, const int *pos, int batch, int ctx, int channels, size_t seq_stride) {
    int p = *pos;
    if (p < 0 || p >= ctx) return;
    long long n = (long long)batch * channels;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        long long s = i / channels;
        int c = (int)(i % channels);
        const float *row = qkv + s * 3 * channels;
        size_t at = (size_t)s * seq_stride + (size_t)p * channels + c;
        kcache[at] = row[channels + c];
        vcache[at] = row[2 * channels + c];
    }
}

// attention_f32: one block per (sequence, head), blockIdx.x = s * heads + h:
// the head's query against the cached keys at positions 0..*pos, a softmax
// over those scores kept in dynamic shared memory (ctx floats), and the
// weighted sum of the cached values.
extern "C" __global__ void __launch_bounds__(MAX_BLOCK)
attention_f32(float *out, const float *qkv, const float *kcache, const float *vcache, const int *pos,
              int batch, int ctx, int heads, int head_dim, size_t seq_stride, float scale) {
    extern __shared__ float scores[];
    __shared__ float partial[MAX_BLOCK];
    int s = blockIdx.x / heads, h = blockIdx.x % heads;
    if (s >= batch) return;
    int channels = heads * head_dim;
    int n = min(max(*pos + 1, 1), ctx);
    const float *q = qkv + (long long)s * 3 * channels + h * head_dim;
    const float *kb = kcache + (size_t)s * seq_stride + h * head_dim;
    const float *vb = vcache + (size_t)s * seq_stride + h * head_dim;
    float m = __int_as_float(0xff800000); // -infinity
    for (int t = threadIdx.x; t < n; t += blockDim.x) {
        const float *k = kb + (size_t)t * channels;
        float dot = 0.0f;
        for (int d = 0; d < head_dim; d++) dot += q[d] * k[d];
        dot = dot * scale;
        scores[t] = dot;
        m = fmaxf(m, dot);
    }
    m = block_max(partial, m);
    float sum = 0.0f;
    for (int t = threadIdx.x; t < n; t += blockDim.x) {
        float e = expf(scores[t] - m);
        scores[t] = e;
        sum += e;
    }
    float total = block_sum(partial, sum); // its barriers publish every score
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float acc = 0.0f;
        for (int t = 0; t < n; t++) acc += scores[t] * vb[(size_t)t * channels + d];
        out[(long long)s * channels + h * head_dim + d] = acc / total;
    }
}

// advance_pos_i32: *pos += 1, from the launch's one thread.
extern "C" __global__ void advance_pos_i32(int *pos) {
    if (blockIdx.x == 0 && threadIdx.x == 0) *pos += 1;
}
