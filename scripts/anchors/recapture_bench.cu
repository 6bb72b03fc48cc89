// Driver-only measurement of recapture, the floor under lanes' in-place
// update (BenchmarkRecapture in cuda/driver does the same through lanes'
// backend): K launches of a tiny kernel captured into a graph, then
//   capture      the capture alone (begin, K launches, end)
//   instantiate  capture + cuGraphInstantiate + cuGraphUpload
//   update       capture + cuGraphExecUpdate of a resident executable
//   exec-update  cuGraphExecUpdate alone (the capture done outside the clock)
//   set-params   no capture: cuGraphExecKernelNodeSetParams on each of the
//                executable's K kernel nodes with the other buffer's pointer
// Every mode alternates between two buffers so that each update changes
// every node's pointer, as a re-bound segment does.
//
//   ./recapture_bench K ITERS      (reads k.ptx from the current folder)
#include <cuda.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#define CK(x) do { CUresult r = (x); if (r != CUDA_SUCCESS) { const char *s; cuGetErrorString(r, &s); fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, s); exit(1);} } while (0)

using clk = std::chrono::steady_clock;

static CUfunction fn;
static CUstream st;
static const int n = 1024;

static CUgraph capture(int K, CUdeviceptr *buf) {
  int nn = n;
  void *args[] = {buf, &nn};
  CUgraph g;
  CK(cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_RELAXED));
  for (int k = 0; k < K; k++) CK(cuLaunchKernel(fn, 4, 1, 1, 256, 1, 1, 0, st, args, nullptr));
  CK(cuStreamEndCapture(st, &g));
  return g;
}

int main(int argc, char **argv) {
  int K = argc > 1 ? atoi(argv[1]) : 256, iters = argc > 2 ? atoi(argv[2]) : 300;
  CK(cuInit(0)); CUdevice dev; CK(cuDeviceGet(&dev, 0)); CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  CUmodule mod; CK(cuModuleLoad(&mod, "k.ptx")); CK(cuModuleGetFunction(&fn, mod, "inc"));
  CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  CUdeviceptr bufs[2];
  for (auto &b : bufs) { CK(cuMemAlloc(&b, n * 4)); CK(cuMemsetD32(b, 0, n)); }
  const char *modes[] = {"capture", "instantiate", "update", "exec-update", "set-params"};
  printf("cpp-recapture K=%d iters=%d", K, iters);
  for (const char *mode : modes) {
    CUgraph g0 = capture(K, &bufs[0]);
    CUgraphExec exec; CK(cuGraphInstantiate(&exec, g0, 0)); CK(cuGraphUpload(exec, st));
    std::vector<CUgraphNode> nodes(K); size_t count = K;
    CK(cuGraphGetNodes(g0, nodes.data(), &count));
    CK(cuStreamSynchronize(st));
    double total = 0;
    for (int i = 0; i < iters; i++) {
      CUdeviceptr *buf = &bufs[(i + 1) % 2];
      auto t0 = clk::now();
      std::string m = mode;
      if (m == "capture") {
        CK(cuGraphDestroy(capture(K, buf)));
      } else if (m == "instantiate") {
        CUgraph g = capture(K, buf); CUgraphExec x;
        CK(cuGraphInstantiate(&x, g, 0)); CK(cuGraphUpload(x, st));
        CK(cuGraphExecDestroy(exec)); exec = x; CK(cuGraphDestroy(g));
      } else if (m == "update") {
        CUgraph g = capture(K, buf); CUgraphExecUpdateResultInfo info;
        CK(cuGraphExecUpdate(exec, g, &info)); CK(cuGraphDestroy(g));
      } else if (m == "exec-update") {
        CUgraph g = capture(K, buf); CUgraphExecUpdateResultInfo info;
        t0 = clk::now();
        CK(cuGraphExecUpdate(exec, g, &info));
        total += std::chrono::duration<double, std::micro>(clk::now() - t0).count();
        CK(cuGraphDestroy(g));
        continue;
      } else {
        int nn = n; void *args[] = {buf, &nn};
        for (size_t k = 0; k < count; k++) {
          CUDA_KERNEL_NODE_PARAMS p = {};
          p.func = fn; p.gridDimX = 4; p.gridDimY = 1; p.gridDimZ = 1;
          p.blockDimX = 256; p.blockDimY = 1; p.blockDimZ = 1; p.kernelParams = args;
          CK(cuGraphExecKernelNodeSetParams(exec, nodes[k], &p));
        }
      }
      total += std::chrono::duration<double, std::micro>(clk::now() - t0).count();
    }
    // The executable must replay the last bound buffer: check the counter moves by K.
    int before, after;
    CUdeviceptr last = bufs[iters % 2];
    CK(cuStreamSynchronize(st));
    CK(cuMemcpyDtoH(&before, last, 4));
    CK(cuGraphLaunch(exec, st)); CK(cuStreamSynchronize(st));
    CK(cuMemcpyDtoH(&after, last, 4));
    if (std::string(mode) != "capture" && after - before != K) { fprintf(stderr, "%s: replay moved the counter by %d, want %d\n", mode, after - before, K); exit(1); }
    printf(" %s_us=%.1f", mode, total / iters);
    CK(cuGraphExecDestroy(exec)); CK(cuGraphDestroy(g0));
  }
  printf("\n");
}
