// Driver-only floor for lanedemo's fused step (--transfers graph): the same
// closed serving loop as ../shared/anchors/serve_bench.cu, but with each
// tenant's input copy (host-to-device from pinned memory) and readout copy
// (device-to-device) captured into its graph beside the K kernels, so a
// step is one cuGraphLaunch and one cuEventRecord. What it measures is what
// a graph holding memcpy nodes costs the driver and the GPU, without lanes.
//
//   ./serve_fused K SECONDS STREAMS TENANTS     (reads k.ptx from the current folder)
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

struct FusedTenant {
  CUdeviceptr in, acc, readout;
  int *pinned;
  CUgraphExec step;
  CUevent fence;
  Clock::time_point sent;
  bool busy;
};

static void serve(CUcontext ctx, CUfunction inc, int K, int first, int stride, int tenants, std::atomic<int> *ready,
                  std::atomic<bool> *start, std::atomic<bool> *halt, long *done, std::vector<double> *lat) {
  const int rows = 256, cols = 128;
  CHECK(cuCtxSetCurrent(ctx));
  CUstream stream;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  std::vector<FusedTenant> mine;
  for (int t = first; t < tenants; t += stride) {
    FusedTenant f = {};
    CHECK(cuMemAlloc(&f.in, cols * 4));
    CHECK(cuMemAlloc(&f.acc, rows * 4));
    CHECK(cuMemAlloc(&f.readout, rows * 4));
    CHECK(cuMemsetD32(f.acc, 0, rows));
    CHECK(cuMemAllocHost((void **)&f.pinned, cols * 4));
    memset(f.pinned, 0, cols * 4);
    int n = rows;
    void *params[] = {&f.acc, &n};
    CUgraph g;
    CHECK(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED));
    CHECK(cuMemcpyHtoDAsync(f.in, f.pinned, cols * 4, stream));
    for (int k = 0; k < K; k++) CHECK(cuLaunchKernel(inc, 1, 1, 1, 256, 1, 1, 0, stream, params, NULL));
    CHECK(cuMemcpyDtoDAsync(f.readout, f.acc, rows * 4, stream));
    CHECK(cuStreamEndCapture(stream, &g));
    CHECK(cuGraphInstantiate(&f.step, g, 0));
    CHECK(cuGraphUpload(f.step, stream));
    CHECK(cuEventCreate(&f.fence, CU_EVENT_DISABLE_TIMING));
    mine.push_back(f);
  }
  CHECK(cuStreamSynchronize(stream));
  lat->reserve(1 << 22);
  (*ready)++;
  while (!*start) std::this_thread::yield();
  long steps = 0;
  while (!*halt) {
    for (FusedTenant &f : mine) {
      if (f.busy) {
        while (cuEventQuery(f.fence) == CUDA_ERROR_NOT_READY) {
        }
        lat->push_back(std::chrono::duration<double, std::micro>(Clock::now() - f.sent).count());
        steps++;
      }
      f.pinned[0] = (int)steps; // the step's input, read by the graph's copy node
      f.sent = Clock::now();
      CHECK(cuGraphLaunch(f.step, stream));
      CHECK(cuEventRecord(f.fence, stream));
      f.busy = true;
    }
  }
  CHECK(cuStreamSynchronize(stream));
  *done = steps;
}

int main(int argc, char **argv) {
  int K = argc > 1 ? atoi(argv[1]) : 16, streams = argc > 3 ? atoi(argv[3]) : 4, tenants = argc > 4 ? atoi(argv[4]) : 16;
  double seconds = argc > 2 ? atof(argv[2]) : 5;
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CUmodule mod;
  CHECK(cuModuleLoad(&mod, "k.ptx"));
  CUfunction inc;
  CHECK(cuModuleGetFunction(&inc, mod, "inc"));
  std::atomic<int> ready(0);
  std::atomic<bool> start(false), halt(false);
  std::vector<long> done(streams);
  std::vector<std::vector<double> > lat(streams);
  std::vector<std::thread> threads;
  for (int s = 0; s < streams; s++)
    threads.emplace_back(serve, ctx, inc, K, s, streams, tenants, &ready, &start, &halt, &done[s], &lat[s]);
  while (ready < streams) std::this_thread::yield();
  Clock::time_point t0 = Clock::now();
  start = true;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  halt = true;
  double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  for (std::thread &t : threads) t.join();
  long total = 0;
  std::vector<double> all;
  for (int s = 0; s < streams; s++) {
    total += done[s];
    all.insert(all.end(), lat[s].begin(), lat[s].end());
  }
  std::sort(all.begin(), all.end());
  double p50 = all.empty() ? 0 : all[all.size() / 2], p99 = all.empty() ? 0 : all[std::min(all.size() - 1, all.size() * 99 / 100)];
  printf("cpp-fused K=%d streams=%d tenants=%d steps=%ld steps_per_s=%.0f p50_us=%.1f p99_us=%.1f\n", K, streams, tenants, total,
         total / elapsed, p50, p99);
}
