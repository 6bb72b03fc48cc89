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
