// Driver-only floor for lanedemo's fused step (--transfers graph): the same
// closed serving loop as ../shared/anchors/serve_bench.cu, but with each
// tenant's input copy (host-to-device from pinned memory) and readout copy
// (device-to-device) captured into its graph beside the K kernels, so a
// step is one cuGraphLaunch and one cuEventRecord. What it measures is what
// a graph holding memcpy nodes costs the driver and the GPU, without lanes.
//
//   ./serve_fused K SECONDS STREAMS TENANTS [timed]   (reads k.ptx from the current folder)
//
// With "timed", every step is timed on the GPU the way lanedemo --timing
// replay times a one-segment step: its fence is a timing event, and the
// step's start is the stream's previous fence when that was still pending
// at the launch (else a timing event of its own, recorded before the
// launch); the elapsed time is read when the step has ended. Events come
// from a per-stream ring, so none is recorded again before it was read.
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

static bool timed = false;

// timedStep is a step's timing events: its fence and its start (one of the
// ring's, or the previous step's fence).
struct timedStep {
  CUevent start, end;
};

static void serve(CUcontext ctx, CUfunction inc, int K, int first, int stride, int tenants, std::atomic<int> *ready,
                  std::atomic<bool> *start, std::atomic<bool> *halt, long *done, std::vector<double> *lat, double *gpuUs) {
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
  // Timing events: a ring larger than the events a stream's steps in flight
  // hold (two each at most), so none is recorded again before it was read.
  std::vector<CUevent> ring(4 * mine.size() + 4);
  if (timed)
    for (CUevent &e : ring) CHECK(cuEventCreate(&e, 0));
  size_t next = 0;
  CUevent lastFence = NULL;
  std::vector<timedStep> timing(mine.size());
  lat->reserve(1 << 22);
  (*ready)++;
  while (!*start) std::this_thread::yield();
  long steps = 0;
  while (!*halt) {
    for (FusedTenant &f : mine) {
      size_t me = &f - &mine[0];
      if (f.busy) {
        while (cuEventQuery(timed ? timing[me].end : f.fence) == CUDA_ERROR_NOT_READY) {
        }
        if (timed) {
          float ms = 0;
          CHECK(cuEventElapsedTime(&ms, timing[me].start, timing[me].end));
          *gpuUs += ms * 1000;
        }
        lat->push_back(std::chrono::duration<double, std::micro>(Clock::now() - f.sent).count());
        steps++;
      }
      f.pinned[0] = (int)steps; // the step's input, read by the graph's copy node
      f.sent = Clock::now();
      if (timed) {
        timedStep &t = timing[me];
        if (lastFence != NULL && cuEventQuery(lastFence) == CUDA_ERROR_NOT_READY) {
          t.start = lastFence;
        } else {
          t.start = ring[next++ % ring.size()];
          CHECK(cuEventRecord(t.start, stream));
        }
        CHECK(cuGraphLaunch(f.step, stream));
        t.end = ring[next++ % ring.size()];
        CHECK(cuEventRecord(t.end, stream));
        lastFence = t.end;
      } else {
        CHECK(cuGraphLaunch(f.step, stream));
        CHECK(cuEventRecord(f.fence, stream));
      }
      f.busy = true;
    }
  }
  CHECK(cuStreamSynchronize(stream));
  *done = steps;
}

int main(int argc, char **argv) {
  int K = argc > 1 ? atoi(argv[1]) : 16, streams = argc > 3 ? atoi(argv[3]) : 4, tenants = argc > 4 ? atoi(argv[4]) : 16;
  double seconds = argc > 2 ? atof(argv[2]) : 5;
  timed = argc > 5 && strcmp(argv[5], "timed") == 0;
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
  std::vector<double> gpuUs(streams);
  std::vector<std::thread> threads;
  for (int s = 0; s < streams; s++)
    threads.emplace_back(serve, ctx, inc, K, s, streams, tenants, &ready, &start, &halt, &done[s], &lat[s], &gpuUs[s]);
  while (ready < streams) std::this_thread::yield();
  Clock::time_point t0 = Clock::now();
  start = true;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  halt = true;
  double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  for (std::thread &t : threads) t.join();
  long total = 0;
  double gpu = 0;
  std::vector<double> all;
  for (int s = 0; s < streams; s++) {
    total += done[s];
    gpu += gpuUs[s];
    all.insert(all.end(), lat[s].begin(), lat[s].end());
  }
  std::sort(all.begin(), all.end());
  double p50 = all.empty() ? 0 : all[all.size() / 2], p99 = all.empty() ? 0 : all[std::min(all.size() - 1, all.size() * 99 / 100)];
  printf("cpp-fused K=%d streams=%d tenants=%d steps=%ld steps_per_s=%.0f p50_us=%.1f p99_us=%.1f%s", K, streams, tenants, total,
         total / elapsed, p50, p99, timed ? "" : "\n");
  if (timed) printf(" timed gpu_mean_us=%.2f\n", total ? gpu / total : 0);
}
