// A module of "one's own" kernels for the conformance suite: not one of
// lanes' built-in kernels, loaded at run time as a user's module would be.
// scripts/gen-ptx.sh compiles it to usermodule.ptx beside it.

// user_scale_f32 multiplies the first n elements of x by a. Its launch
// bounds make the driver report at most 256 threads per block, which the
// suite checks the device enforces.
extern "C" __global__ void __launch_bounds__(256) user_scale_f32(float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] = x[i] * a;
    }
}

// user_iota_u64 writes base + i into out[i] for i < n: 8-byte scalars
// (size_t, long long) whose bits past 32 must arrive intact.
extern "C" __global__ void user_iota_u64(unsigned long long *out, unsigned long long base, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = base + (unsigned long long)i;
    }
}

// user_axpy_f64 computes y[i] = a * x[i] + y[i] for i < n in double
// precision (a double scalar).
extern "C" __global__ void user_axpy_f64(double *y, const double *x, double a, long long n) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}

#include <cuda_fp16.h>
#include <cuda_bf16.h>

// UserAffine is passed by value: 16 bytes aligned to 8 (a float pair,
// then a 64-bit count).
struct __align__(8) UserAffine {
    float scale;
    float shift;
    long long n;
};

// user_affine_struct computes y[i] = p.scale * x[i] + p.shift for i < p.n:
// a struct parameter between two pointers (at offset 8 of the parameters).
extern "C" __global__ void user_affine_struct(float *y, UserAffine p, const float *x) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < p.n) {
        y[i] = p.scale * x[i] + p.shift;
    }
}

// user_halves_f32 computes y[i] = y[i] * a + b for i < n, with a half and
// a bfloat16 scalar (2-byte parameters) widened to float.
extern "C" __global__ void user_halves_f32(float *y, __half a, __nv_bfloat16 b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = y[i] * __half2float(a) + __bfloat162float(b);
    }
}
