// What timing a graph launch on the GPU costs the host, by method, in
// serve_fused's loop (the same graph: a pinned input copy, K inc kernels, a
// readout copy; one step per tenant in flight; S streams, one thread each).
// serve_fused.cu "timed" is the way lanes times (a timing event as the
// fence, the previous fence as the start); these are the other ways tried:
//
//   ./timing_methods METHOD K SECONDS STREAMS TENANTS   (reads k.ptx and stamp.ptx)
//
//   untimed        the fence alone, an event without timing (serve_fused)
//   event-nodes    timing events captured into the graph at its start and
//                  end (cuEventRecordWithFlags EXTERNAL), an untimed fence;
//                  elapsed time read when the step ended
//   event-nodes-set  the same, each launch first pointing both nodes at the
//                  other of two event pairs (cuGraphExecEventRecordNodeSetEvent),
//                  as launches in flight together would need
//   end-node       one timing event node at the graph's end, no start: what
//                  one timing event in the graph costs
//   stamp-kernels  a one-thread kernel at the graph's start and end writing
//                  %globaltimer into mapped pinned memory, an untimed fence
//
// nvcc -ptx -arch=sm_90 k.cu -o k.ptx; nvcc -ptx -arch=sm_90 stamp.cu -o stamp.ptx
// nvcc -O2 -arch=sm_90 -o timing_methods timing_methods.cu -lcuda
//
// Built with -DWITH_CUPTI (and CUPTI's include and library folders,
// -lcupti), the environment variable CUPTI=graph or CUPTI=kernel turns on
// CUPTI's activity records of every graph launch or kernel (what a
// profiler reads) for the whole run; the count of records is printed.
#include <cuda.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#define CHECK(call) do { CUresult rc_ = (call); if (rc_ != CUDA_SUCCESS) { const char *m_; cuGetErrorString(rc_, &m_); \
  fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, m_); exit(1); } } while (0)
typedef std::chrono::steady_clock Clock;
#ifdef WITH_CUPTI
#include <cupti.h>
static std::atomic<long> cuptiRecords(0);
static void CUPTIAPI bufferRequested(uint8_t **buffer, size_t *size, size_t *maxRecords) {
  *size = 8 << 20;
  *buffer = (uint8_t *)aligned_alloc(8, *size);
  *maxRecords = 0;
}
static void CUPTIAPI bufferCompleted(CUcontext, uint32_t, uint8_t *buffer, size_t, size_t validSize) {
  CUpti_Activity *record = NULL;
  while (cuptiActivityGetNextRecord(buffer, validSize, &record) == CUPTI_SUCCESS) cuptiRecords++;
  free(buffer);
}
static void startCupti() {
  const char *what = getenv("CUPTI");
  if (what == NULL) return;
  if (cuptiActivityRegisterCallbacks(bufferRequested, bufferCompleted) != CUPTI_SUCCESS) exit(3);
  CUpti_ActivityKind kind = strcmp(what, "graph") == 0 ? CUPTI_ACTIVITY_KIND_GRAPH_TRACE : CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  if (cuptiActivityEnable(kind) != CUPTI_SUCCESS) { fprintf(stderr, "cuptiActivityEnable(%s) failed\n", what); exit(3); }
}
static void stopCupti() {
  if (getenv("CUPTI") == NULL) return;
  cuptiActivityFlushAll(1);
  printf("cupti=%s records=%ld\n", getenv("CUPTI"), cuptiRecords.load());
}
#else
static void startCupti() {}
static void stopCupti() {}
#endif
struct T {
  CUdeviceptr in, acc, readout; int *pinned; CUgraphExec step; CUevent fence, tstart[2], tend[2];
  CUgraphNode nstart, nend; int pair; unsigned long long *ring; CUdeviceptr ringDev, counter; unsigned seq; Clock::time_point sent; bool busy;
};
static int MODE; static CUfunction STAMP;
static void serve(CUcontext ctx, CUfunction inc, int K, int first, int stride, int tenants, std::atomic<int> *ready,
                  std::atomic<bool> *start, std::atomic<bool> *halt, long *done, std::vector<double> *lat, double *gpu, long *gpuN, long *errs) {
  const int rows = 256, cols = 128;
  CHECK(cuCtxSetCurrent(ctx));
  CUstream stream; CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  std::vector<T> mine;
  for (int t = first; t < tenants; t += stride) {
    T f = {};
    CHECK(cuMemAlloc(&f.in, cols * 4)); CHECK(cuMemAlloc(&f.acc, rows * 4)); CHECK(cuMemAlloc(&f.readout, rows * 4));
    CHECK(cuMemsetD32(f.acc, 0, rows)); CHECK(cuMemAllocHost((void **)&f.pinned, cols * 4)); memset(f.pinned, 0, cols * 4);
    for (int i = 0; i < 2; i++) { CHECK(cuEventCreate(&f.tstart[i], 0)); CHECK(cuEventCreate(&f.tend[i], 0)); }
    int n = rows; void *params[] = {&f.acc, &n};
    CUgraph g;
    if (MODE != 5) CHECK(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED));
    if (MODE == 2 || MODE == 3) CHECK(cuEventRecordWithFlags(f.tstart[0], stream, CU_EVENT_RECORD_EXTERNAL));
    int zero = 0, one = 1;
    void *sp0[] = {&f.ringDev, &f.counter, &zero}, *sp1[] = {&f.ringDev, &f.counter, &one};
    if (MODE == 5) {
      CHECK(cuMemAllocHost((void **)&f.ring, 64 * 16)); memset(f.ring, 0, 64 * 16);
      CHECK(cuMemHostGetDevicePointer(&f.ringDev, f.ring, 0));
      CHECK(cuMemAlloc(&f.counter, 4)); CHECK(cuMemsetD32(f.counter, 0, 1));
      CHECK(cuStreamSynchronize(stream));
      CHECK(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED));
      CHECK(cuLaunchKernel(STAMP, 1, 1, 1, 1, 1, 1, 0, stream, sp0, NULL));
    }
    CHECK(cuMemcpyHtoDAsync(f.in, f.pinned, cols * 4, stream));
    for (int k = 0; k < K; k++) CHECK(cuLaunchKernel(inc, 1, 1, 1, 256, 1, 1, 0, stream, params, NULL));
    CHECK(cuMemcpyDtoDAsync(f.readout, f.acc, rows * 4, stream));
    if (MODE >= 2 && MODE <= 4) CHECK(cuEventRecordWithFlags(f.tend[0], stream, CU_EVENT_RECORD_EXTERNAL));
    if (MODE == 5) CHECK(cuLaunchKernel(STAMP, 1, 1, 1, 1, 1, 1, 0, stream, sp1, NULL));
    CHECK(cuStreamEndCapture(stream, &g));
    if (MODE >= 2 && MODE <= 4) {
      size_t nn = 0; CHECK(cuGraphGetNodes(g, NULL, &nn)); std::vector<CUgraphNode> nodes(nn); CHECK(cuGraphGetNodes(g, nodes.data(), &nn));
      for (CUgraphNode x : nodes) { CUgraphNodeType ty; CHECK(cuGraphNodeGetType(x, &ty)); if (ty == CU_GRAPH_NODE_TYPE_EVENT_RECORD) {
          CUevent e; CHECK(cuGraphEventRecordNodeGetEvent(x, &e)); if (e == f.tstart[0]) f.nstart = x; else f.nend = x; } }
      if (!f.nend || ((MODE == 2 || MODE == 3) && !f.nstart)) { fprintf(stderr, "event nodes not found\n"); exit(1); }
    }
    CHECK(cuGraphInstantiate(&f.step, g, 0)); CHECK(cuGraphUpload(f.step, stream));
    CHECK(cuEventCreate(&f.fence, CU_EVENT_DISABLE_TIMING));
    mine.push_back(f);
  }
  CHECK(cuStreamSynchronize(stream));
  lat->reserve(1 << 22);
  (*ready)++;
  while (!*start) std::this_thread::yield();
  long steps = 0;
  while (!*halt) {
    for (T &f : mine) {
      if (f.busy) {
        while (cuEventQuery(f.fence) == CUDA_ERROR_NOT_READY) {}
        float ms = 0; CUresult r = CUDA_SUCCESS;
        if (MODE == 2 || MODE == 3) r = cuEventElapsedTime(&ms, f.tstart[f.pair], f.tend[f.pair]);
        if (MODE == 5) { volatile unsigned long long *e = f.ring + (f.seq % 64) * 2; unsigned long long a = e[0], b = e[1];
          if (b < a || a == 0) r = CUDA_ERROR_UNKNOWN; else ms = (b - a) / 1e6f; f.seq++; }
        if (r != CUDA_SUCCESS) (*errs)++; else if (MODE == 2 || MODE == 3 || MODE == 5) { *gpu += ms * 1000; (*gpuN)++; }
        lat->push_back(std::chrono::duration<double, std::micro>(Clock::now() - f.sent).count());
        steps++;
      }
      f.pinned[0] = (int)steps;
      f.sent = Clock::now();
      if (MODE == 3) { f.pair ^= 1; CHECK(cuGraphExecEventRecordNodeSetEvent(f.step, f.nstart, f.tstart[f.pair])); CHECK(cuGraphExecEventRecordNodeSetEvent(f.step, f.nend, f.tend[f.pair])); }
      CHECK(cuGraphLaunch(f.step, stream));
      CHECK(cuEventRecord(f.fence, stream));
      f.busy = true;
    }
  }
  CHECK(cuStreamSynchronize(stream));
  *done = steps;
}
int main(int argc, char **argv) {
  const char *names[] = {"untimed", "", "event-nodes", "event-nodes-set", "end-node", "stamp-kernels"};
  if (argc < 6) { fprintf(stderr, "usage: timing_methods METHOD K SECONDS STREAMS TENANTS\n"); return 2; }
  MODE = -1;
  for (int m = 0; m < 6; m++) if (m != 1 && strcmp(argv[1], names[m]) == 0) MODE = m;
  if (MODE < 0) { fprintf(stderr, "unknown method %s\n", argv[1]); return 2; }
  int K = atoi(argv[2]); double seconds = atof(argv[3]); int streams = atoi(argv[4]), tenants = atoi(argv[5]);
  startCupti();
  CHECK(cuInit(0)); CUdevice dev; CHECK(cuDeviceGet(&dev, 0)); CUcontext ctx; CHECK(cuDevicePrimaryCtxRetain(&ctx, dev)); CHECK(cuCtxSetCurrent(ctx));
  CUmodule mod; CHECK(cuModuleLoad(&mod, "k.ptx")); CUfunction inc; CHECK(cuModuleGetFunction(&inc, mod, "inc"));
  CUmodule smod; CHECK(cuModuleLoad(&smod, "stamp.ptx")); CHECK(cuModuleGetFunction(&STAMP, smod, "stamp"));
  std::atomic<int> ready(0); std::atomic<bool> start(false), halt(false);
  std::vector<long> done(streams), gpuN(streams), errs(streams); std::vector<double> gpu(streams);
  std::vector<std::vector<double> > lat(streams); std::vector<std::thread> th;
  for (int s = 0; s < streams; s++) th.emplace_back(serve, ctx, inc, K, s, streams, tenants, &ready, &start, &halt, &done[s], &lat[s], &gpu[s], &gpuN[s], &errs[s]);
  while (ready < streams) std::this_thread::yield();
  Clock::time_point t0 = Clock::now(); start = true;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds)); halt = true;
  double el = std::chrono::duration<double>(Clock::now() - t0).count();
  for (auto &t : th) t.join();
  long total = 0, gn = 0, er = 0; double gs = 0; std::vector<double> all;
  for (int s = 0; s < streams; s++) { total += done[s]; gn += gpuN[s]; er += errs[s]; gs += gpu[s]; all.insert(all.end(), lat[s].begin(), lat[s].end()); }
  std::sort(all.begin(), all.end());
  printf("method=%s streams=%d steps_per_s=%.0f p50_us=%.1f timed=%ld gpu_mean_us=%.2f elapsed_errors=%ld\n", argv[1], streams, total / el,
         all.empty() ? 0 : all[all.size() / 2], gn, gn ? gs / gn : 0, er);
  stopCupti();
}
