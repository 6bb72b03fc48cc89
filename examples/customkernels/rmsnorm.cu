// A kernel of one's own for examples/customkernels: RMSNorm, one block of
// 256 threads per row. scripts/gen-ptx.sh compiles it to rmsnorm.ptx.
//
//   y[r, c] = x[r, c] * w[c] / sqrt(mean_c(x[r, c]^2) + eps)

extern "C" __global__ void __launch_bounds__(256)
rmsnorm_f32(float *y, const float *x, const float *w, int rows, int cols, float eps) {
    __shared__ float partial[256];
    int r = blockIdx.x;
    float acc = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float v = x[r * cols + c];
        acc += v * v;
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) {
            partial[threadIdx.x] += partial[threadIdx.x + s];
        }
        __syncthreads();
    }
    float inv = 1.0f / sqrtf(partial[0] / (float)cols + eps);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        y[r * cols + c] = x[r * cols + c] * inv * w[c];
    }
}
