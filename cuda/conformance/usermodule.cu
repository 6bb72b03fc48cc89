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
