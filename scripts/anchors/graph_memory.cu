// Driver-only measurement of the device memory an executable takes:
// graphs of K tiny kernels captured, instantiated and uploaded N times,
// cuMemGetInfo read around each instantiate+upload, in a fresh process
// per K (the driver pools this memory in 2 MiB chunks and never returns
// it to the free count, so one process measures one K).
//
//   ./graph_memory K N      (reads k.ptx from the current folder)
#include <cuda.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#define CK(x) do { CUresult r = (x); if (r != CUDA_SUCCESS) { const char *s; cuGetErrorString(r, &s); fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, s); exit(1);} } while (0)
static CUfunction fn; static CUstream st;
static CUgraph capture(int K, CUdeviceptr *buf, int n) {
  void *args[] = {buf, &n}; CUgraph g;
  CK(cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_RELAXED));
  for (int k = 0; k < K; k++) { int gx = 1 + k % 7; CK(cuLaunchKernel(fn, gx, 1, 1, 256, 1, 1, 0, st, args, nullptr)); }
  CK(cuStreamEndCapture(st, &g)); return g;
}
int main(int argc, char **argv) {
  int onlyK = argc > 1 ? atoi(argv[1]) : 0, NN = argc > 2 ? atoi(argv[2]) : 200;
  CK(cuInit(0)); CUdevice dev; CK(cuDeviceGet(&dev, 0)); CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  CUmodule mod; CK(cuModuleLoad(&mod, "k.ptx")); CK(cuModuleGetFunction(&fn, mod, "inc"));
  CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  CUdeviceptr buf; CK(cuMemAlloc(&buf, 1 << 20)); CK(cuMemsetD32(buf, 0, 1 << 18));
  // order check
  { CUgraph g = capture(32, &buf, 1024); size_t c = 0; CK(cuGraphGetNodes(g, NULL, &c));
    std::vector<CUgraphNode> ns(c); CK(cuGraphGetNodes(g, ns.data(), &c));
    int inorder = 1; for (size_t i = 0; i < c; i++) { CUDA_KERNEL_NODE_PARAMS p; CK(cuGraphKernelNodeGetParams(ns[i], &p)); if ((int)p.gridDimX != 1 + (int)i % 7) inorder = 0; }
    size_t roots = 0; CK(cuGraphGetRootNodes(g, NULL, &roots));
    printf("order: getnodes in capture order=%d roots=%zu nodes=%zu\n", inorder, roots, c); CK(cuGraphDestroy(g)); }
  for (int K : {onlyK}) {
    const int N = NN;
    std::vector<CUgraphExec> xs; std::vector<long long> d;
    size_t f0, t; CK(cuCtxSynchronize()); CK(cuMemGetInfo(&f0, &t));
    for (int i = 0; i < N; i++) {
      CUgraph g = capture(K, &buf, 1024);
      size_t a, b; CK(cuMemGetInfo(&a, &t));
      CUgraphExec x; CK(cuGraphInstantiate(&x, g, 0)); CK(cuGraphUpload(x, st)); CK(cuStreamSynchronize(st));
      CK(cuMemGetInfo(&b, &t)); d.push_back((long long)a - (long long)b); xs.push_back(x); CK(cuGraphDestroy(g));
    }
    size_t f1; CK(cuMemGetInfo(&f1, &t));
    std::vector<long long> s = d; std::sort(s.begin(), s.end()); int nz = 0; for (auto v : d) if (v) nz++;
    printf("K=%d N=%d total=%lld per_exec=%.0f min=%lld med=%lld max=%lld nonzero=%d first=%lld\n", K, N, (long long)(f0 - f1), double(f0 - f1) / N, s[0], s[N/2], s[N-1], nz, d[0]);
    for (auto x : xs) CK(cuGraphExecDestroy(x));
    CK(cuCtxSynchronize()); size_t f2; CK(cuMemGetInfo(&f2, &t));
    printf("K=%d after destroy: recovered=%lld of %lld\n", K, (long long)(f2 - f1), (long long)(f0 - f1));
  }
  // the graph mem attribute (graph alloc nodes only)
  cuuint64_t used = 0; CK(cuDeviceGetGraphMemAttribute(dev, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &used));
  printf("graph mem attr used high=%llu\n", (unsigned long long)used);
}
