// Kernels of lanes. Compiled to PTX with -fmad=false so every float result is
// bit-identical to the Go references in kernels.go (no fused multiply-add).
// One thread per element (or per row); every kernel guards its extent.

extern "C" __global__ void fill_f32(float *out, float value, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}

extern "C" __global__ void axpy_f32(float *y, const float *x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

extern "C" __global__ void add_f32(float *out, const float *a, const float *b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

extern "C" __global__ void row_sum_f32(float *out, const float *in, int rows, int cols) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float acc = 0.0f;
  for (int c = 0; c < cols; c++) acc += in[(long)r * cols + c];
  out[r] = acc;
}

extern "C" __global__ void gemv_f32(float *y, const float *a, const float *x, int rows, int cols) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float acc = 0.0f;
  for (int c = 0; c < cols; c++) acc += a[(long)r * cols + c] * x[c];
  y[r] = acc;
}

extern "C" __global__ void inc_i32(int *p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += 1;
}

// poke_i32 writes value at p[index] from thread 0, unchecked: the fault tests
// use it to write outside an allocation on purpose.
extern "C" __global__ void poke_i32(int *p, unsigned index, int value) {
  if (blockIdx.x == 0 && threadIdx.x == 0) p[index] = value;
}
