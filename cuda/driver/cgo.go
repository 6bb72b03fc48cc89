//go:build cuda

// The small C layer of ours over the CUDA driver API: calls gorgonia.org/cu
// lacks (events, capture, graphs, async copies) and the error codes they
// return.

package driver

import (
	"time"
	"unsafe"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
)

/*
#cgo LDFLAGS: -lcuda
#include <stdint.h>
#include <string.h>
#include <cuda.h>

// Codes of lanes' own, outside CUresult's range.
#define LANES_NOT_BOUND 100001
#define LANES_CAPTURING 100002

static CUresult lanes_bound(CUcontext want) {
	CUcontext cur = NULL;
	CUresult r = cuCtxGetCurrent(&cur);
	if (r != CUDA_SUCCESS) return r;
	return cur == want ? CUDA_SUCCESS : (CUresult)LANES_NOT_BOUND;
}

static CUresult lanes_launch(CUcontext ctx, CUfunction fn, unsigned gx, unsigned gy, unsigned gz,
		unsigned bx, unsigned by, unsigned bz, unsigned shared, CUstream s, uint64_t *argv, int n) {
	CUresult r = lanes_bound(ctx);
	if (r != CUDA_SUCCESS) return r;
	void *argp[64];
	for (int i = 0; i < n && i < 64; i++) argp[i] = &argv[i];
	return cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, shared, s, argp, NULL);
}

// lanes_launch_structs is lanes_launch for a launch with structs passed by
// value: parameter i points into blob at offs[i] when offs[i] >= 0.
static CUresult lanes_launch_structs(CUcontext ctx, CUfunction fn, unsigned gx, unsigned gy, unsigned gz,
		unsigned bx, unsigned by, unsigned bz, unsigned shared, CUstream s, uint64_t *argv, int n,
		unsigned char *blob, int *offs) {
	CUresult r = lanes_bound(ctx);
	if (r != CUDA_SUCCESS) return r;
	void *argp[64];
	for (int i = 0; i < n && i < 64; i++) argp[i] = offs[i] >= 0 ? (void *)(blob + offs[i]) : (void *)&argv[i];
	return cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, shared, s, argp, NULL);
}

static CUresult lanes_graph_launch(CUcontext ctx, CUgraphExec x, CUstream s) {
	CUresult r = lanes_bound(ctx);
	return r != CUDA_SUCCESS ? r : cuGraphLaunch(x, s);
}

static CUresult lanes_graph_upload(CUcontext ctx, CUgraphExec x, CUstream s) {
	CUresult r = lanes_bound(ctx);
	return r != CUDA_SUCCESS ? r : cuGraphUpload(x, s);
}

static CUresult lanes_htod(CUcontext ctx, CUdeviceptr dst, const void *src, size_t n, CUstream s) {
	CUresult r = lanes_bound(ctx);
	return r != CUDA_SUCCESS ? r : cuMemcpyHtoDAsync(dst, src, n, s);
}

static CUresult lanes_dtoh(CUcontext ctx, void *dst, CUdeviceptr src, size_t n, CUstream s) {
	CUresult r = lanes_bound(ctx);
	return r != CUDA_SUCCESS ? r : cuMemcpyDtoHAsync(dst, src, n, s);
}

static CUresult lanes_host_register(CUcontext ctx, void *p, size_t n) {
	CUresult r = lanes_bound(ctx);
	return r != CUDA_SUCCESS ? r : cuMemHostRegister(p, n, CU_MEMHOSTREGISTER_PORTABLE);
}

static CUresult lanes_host_unregister(CUcontext ctx, void *p) {
	CUresult r = lanes_bound(ctx);
	return r != CUDA_SUCCESS ? r : cuMemHostUnregister(p);
}

static CUresult lanes_host_free(CUcontext ctx, void *p) {
	CUresult r = lanes_bound(ctx);
	return r != CUDA_SUCCESS ? r : cuMemFreeHost(p);
}

static CUresult lanes_dtod(CUcontext ctx, CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
	CUresult r = lanes_bound(ctx);
	return r != CUDA_SUCCESS ? r : cuMemcpyDtoDAsync(dst, src, n, s);
}

static CUresult lanes_zero(CUcontext ctx, CUdeviceptr dst, size_t n, CUstream s) {
	CUresult r = lanes_bound(ctx);
	return r != CUDA_SUCCESS ? r : cuMemsetD8Async(dst, 0, n, s);
}

// lanes_readback synchronizes the stream, then copies device bytes to host.
static CUresult lanes_readback(CUcontext ctx, void *dst, CUdeviceptr src, size_t n, CUstream s) {
	CUresult r = lanes_bound(ctx);
	if (r != CUDA_SUCCESS) return r;
	r = cuStreamSynchronize(s);
	return r != CUDA_SUCCESS ? r : cuMemcpyDtoH(dst, src, n);
}

static CUresult lanes_capture_status(CUcontext ctx, CUstream s, int *status) {
	CUresult r = lanes_bound(ctx);
	if (r != CUDA_SUCCESS) return r;
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	r = cuStreamIsCapturing(s, &st);
	*status = (int)st;
	return r;
}

// lanes_record records an event after the stream's work, creating one with
// flags (CU_EVENT_DEFAULT or CU_EVENT_DISABLE_TIMING) when *ev is NULL and
// re-recording *ev otherwise; it refuses during a capture, where an event
// would become a graph node instead.
static CUresult lanes_record(CUcontext ctx, CUstream s, CUevent *ev, unsigned flags) {
	int status = 0;
	CUresult r = lanes_capture_status(ctx, s, &status);
	if (r != CUDA_SUCCESS) return r;
	if (status != CU_STREAM_CAPTURE_STATUS_NONE) return (CUresult)LANES_CAPTURING;
	int created = 0;
	if (*ev == NULL) {
		r = cuEventCreate(ev, flags);
		if (r != CUDA_SUCCESS) { *ev = NULL; return r; }
		created = 1;
	}
	r = cuEventRecord(*ev, s);
	if (r != CUDA_SUCCESS && created) { cuEventDestroy(*ev); *ev = NULL; }
	return r;
}

static CUresult lanes_event_query(CUcontext ctx, CUevent ev) {
	CUresult r = lanes_bound(ctx);
	return r != CUDA_SUCCESS ? r : cuEventQuery(ev);
}

static CUresult lanes_event_sync(CUcontext ctx, CUevent ev) {
	CUresult r = lanes_bound(ctx);
	return r != CUDA_SUCCESS ? r : cuEventSynchronize(ev);
}

static CUresult lanes_event_elapsed(CUcontext ctx, CUevent start, CUevent end, float *ms) {
	CUresult r = lanes_bound(ctx);
	return r != CUDA_SUCCESS ? r : cuEventElapsedTime(ms, start, end);
}

// lanes_event_destroy runs from the garbage collector's cleanup goroutine,
// on no bound thread: it pushes the context for the one call.
static void lanes_event_destroy(CUcontext ctx, CUevent ev) {
	if (cuCtxPushCurrent(ctx) != CUDA_SUCCESS) return;
	cuEventDestroy(ev);
	CUcontext popped;
	cuCtxPopCurrent(&popped);
}

static CUresult lanes_stream_query(CUcontext ctx, CUstream s) {
	CUresult r = lanes_bound(ctx);
	return r != CUDA_SUCCESS ? r : cuStreamQuery(s);
}

static CUresult lanes_stream_sync(CUcontext ctx, CUstream s) {
	CUresult r = lanes_bound(ctx);
	return r != CUDA_SUCCESS ? r : cuStreamSynchronize(s);
}

static CUresult lanes_begin_capture(CUcontext ctx, CUstream s, int relaxed) {
	CUresult r = lanes_bound(ctx);
	return r != CUDA_SUCCESS ? r : cuStreamBeginCapture(s, relaxed ? CU_STREAM_CAPTURE_MODE_RELAXED : CU_STREAM_CAPTURE_MODE_GLOBAL);
}

static CUresult lanes_end_capture(CUcontext ctx, CUstream s, CUgraph *g, size_t *nodes) {
	CUresult r = lanes_bound(ctx);
	if (r != CUDA_SUCCESS) return r;
	*g = NULL;
	r = cuStreamEndCapture(s, g);
	if (r != CUDA_SUCCESS) {
		if (*g != NULL) { cuGraphDestroy(*g); *g = NULL; }
		return r;
	}
	*nodes = 0;
	return cuGraphGetNodes(*g, NULL, nodes);
}

static CUresult lanes_instantiate(CUcontext ctx, CUgraph g, CUgraphExec *x) {
	CUresult r = lanes_bound(ctx);
	return r != CUDA_SUCCESS ? r : cuGraphInstantiateWithFlags(x, g, 0);
}

static CUresult lanes_exec_update(CUcontext ctx, CUgraphExec x, CUgraph g, int *result) {
	CUresult r = lanes_bound(ctx);
	if (r != CUDA_SUCCESS) return r;
	CUgraphExecUpdateResultInfo info;
	memset(&info, 0, sizeof info);
	r = cuGraphExecUpdate(x, g, &info);
	*result = (int)info.result;
	return r;
}

static CUresult lanes_graph_destroy(CUcontext ctx, CUgraph g) {
	CUresult r = lanes_bound(ctx);
	return r != CUDA_SUCCESS ? r : cuGraphDestroy(g);
}

static CUresult lanes_exec_destroy(CUcontext ctx, CUgraphExec x) {
	CUresult r = lanes_bound(ctx);
	return r != CUDA_SUCCESS ? r : cuGraphExecDestroy(x);
}

static CUresult lanes_ctx_sync(CUcontext ctx) {
	CUresult r = lanes_bound(ctx);
	return r != CUDA_SUCCESS ? r : cuCtxSynchronize();
}

static CUresult lanes_mem_alloc(CUcontext ctx, CUdeviceptr *p, size_t n) {
	CUresult r = lanes_bound(ctx);
	return r != CUDA_SUCCESS ? r : cuMemAlloc(p, n);
}

static CUresult lanes_mem_free(CUcontext ctx, CUdeviceptr p) {
	CUresult r = lanes_bound(ctx);
	return r != CUDA_SUCCESS ? r : cuMemFree(p);
}

static CUresult lanes_host_alloc(CUcontext ctx, void **p, size_t n) {
	CUresult r = lanes_bound(ctx);
	return r != CUDA_SUCCESS ? r : cuMemAllocHost(p, n);
}

static CUresult lanes_stream_create(CUcontext ctx, CUstream *s) {
	CUresult r = lanes_bound(ctx);
	return r != CUDA_SUCCESS ? r : cuStreamCreate(s, CU_STREAM_NON_BLOCKING);
}

static CUresult lanes_stream_destroy(CUcontext ctx, CUstream s) {
	CUresult r = lanes_bound(ctx);
	return r != CUDA_SUCCESS ? r : cuStreamDestroy(s);
}
// cuFuncGetParamInfo (CUDA 12.4) and cuFuncGetParamCount (declared here for
// headers older than it) are weak: a binary still starts on older drivers.
#pragma weak cuFuncGetParamInfo
CUresult cuFuncGetParamCount(CUfunction func, size_t *paramCount);
#pragma weak cuFuncGetParamCount

static CUresult lanes_param_count(CUfunction fn, size_t *n) {
	if (cuFuncGetParamCount == NULL) return CUDA_ERROR_NOT_SUPPORTED;
	return cuFuncGetParamCount(fn, n);
}

static CUresult lanes_param_info(CUfunction fn, size_t i, size_t *offset, size_t *size) {
	if (cuFuncGetParamInfo == NULL) return CUDA_ERROR_NOT_SUPPORTED;
	return cuFuncGetParamInfo(fn, i, offset, size);
}

static CUresult lanes_func_limits(CUfunction fn, int *threads, int *shared) {
	CUresult r = cuFuncGetAttribute(threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn);
	return r != CUDA_SUCCESS ? r : cuFuncGetAttribute(shared, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, fn);
}
*/
import "C"

const (
	codeNotBound  = C.LANES_NOT_BOUND
	codeCapturing = C.LANES_CAPTURING
)

// The cgo handle types. gorgonia/cu's handles wrap the same C types in its
// own package; they convert through unsafe.Pointer.
type (
	cContext   = C.CUcontext
	cStream    = C.CUstream
	cEvent     = C.CUevent
	cFunction  = C.CUfunction
	cGraph     = C.CUgraph
	cGraphExec = C.CUgraphExec
	cGraphNode = C.CUgraphNode
	cDevPtr    = C.CUdeviceptr
	cResult    = C.CUresult
	cInt       = C.int
)

func launchKernel(ctx cContext, fn cFunction, cfg cuda.LaunchConfig, s cStream, argv []uint64) cResult {
	var p *C.uint64_t
	if len(argv) > 0 {
		p = (*C.uint64_t)(unsafe.Pointer(&argv[0]))
	}
	g, b := cfg.Grid, cfg.Block
	return C.lanes_launch(ctx, fn, C.uint(g.X), C.uint(g.Y), C.uint(g.Z), C.uint(b.X), C.uint(b.Y), C.uint(b.Z),
		C.uint(cfg.SharedBytes), s, p, C.int(len(argv)))
}

// launchKernelStructs is launchKernel for a launch passing structs by
// value: offs[i] >= 0 says parameter i's bytes are blob[offs[i]:].
func launchKernelStructs(ctx cContext, fn cFunction, cfg cuda.LaunchConfig, s cStream, argv []uint64, blob []byte, offs []int32) cResult {
	g, b := cfg.Grid, cfg.Block
	return C.lanes_launch_structs(ctx, fn, C.uint(g.X), C.uint(g.Y), C.uint(g.Z), C.uint(b.X), C.uint(b.Y), C.uint(b.Z),
		C.uint(cfg.SharedBytes), s, (*C.uint64_t)(unsafe.Pointer(&argv[0])), C.int(len(argv)),
		(*C.uchar)(unsafe.Pointer(&blob[0])), (*C.int)(unsafe.Pointer(&offs[0])))
}

func graphLaunch(ctx cContext, x cGraphExec, s cStream) cResult {
	return C.lanes_graph_launch(ctx, x, s)
}

func graphUpload(ctx cContext, x cGraphExec, s cStream) cResult {
	return C.lanes_graph_upload(ctx, x, s)
}

func copyHtoD(ctx cContext, dst uint64, src unsafe.Pointer, n uint64, s cStream) cResult {
	return C.lanes_htod(ctx, C.CUdeviceptr(dst), src, C.size_t(n), s)
}

func copyDtoH(ctx cContext, dst unsafe.Pointer, src, n uint64, s cStream) cResult {
	return C.lanes_dtoh(ctx, dst, C.CUdeviceptr(src), C.size_t(n), s)
}

func hostFree(ctx cContext, p unsafe.Pointer) cResult { return C.lanes_host_free(ctx, p) }

func hostRegister(ctx cContext, p unsafe.Pointer, n uint64) cResult {
	return C.lanes_host_register(ctx, p, C.size_t(n))
}

func hostUnregister(ctx cContext, p unsafe.Pointer) cResult { return C.lanes_host_unregister(ctx, p) }

func copyDtoD(ctx cContext, dst, src, n uint64, s cStream) cResult {
	return C.lanes_dtod(ctx, C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n), s)
}

func zero(ctx cContext, dst, n uint64, s cStream) cResult {
	return C.lanes_zero(ctx, C.CUdeviceptr(dst), C.size_t(n), s)
}

func readback(ctx cContext, dst []byte, src uint64, s cStream) cResult {
	return C.lanes_readback(ctx, unsafe.Pointer(&dst[0]), C.CUdeviceptr(src), C.size_t(len(dst)), s)
}

func captureStatus(ctx cContext, s cStream) (backend.CaptureStatus, cResult) {
	var st C.int
	r := C.lanes_capture_status(ctx, s, &st)
	switch st {
	case C.CU_STREAM_CAPTURE_STATUS_ACTIVE:
		return backend.CaptureActive, r
	case C.CU_STREAM_CAPTURE_STATUS_INVALIDATED:
		return backend.CaptureInvalidated, r
	}
	return backend.CaptureNone, r
}

// recordEvent records ev (nil: a new event, timed or not) on s.
func recordEvent(ctx cContext, s cStream, ev cEvent, timed bool) (cEvent, cResult) {
	flags := C.uint(C.CU_EVENT_DISABLE_TIMING)
	if timed {
		flags = C.CU_EVENT_DEFAULT
	}
	r := C.lanes_record(ctx, s, &ev, flags)
	return ev, r
}

func queryEvent(ctx cContext, ev cEvent) cResult { return C.lanes_event_query(ctx, ev) }
func syncEvent(ctx cContext, ev cEvent) cResult  { return C.lanes_event_sync(ctx, ev) }
func destroyEvent(ctx cContext, ev cEvent)       { C.lanes_event_destroy(ctx, ev) }

func elapsed(ctx cContext, start, end cEvent) (time.Duration, cResult) {
	var ms C.float
	r := C.lanes_event_elapsed(ctx, start, end, &ms)
	return time.Duration(float64(ms) * float64(time.Millisecond)), r
}

func queryStream(ctx cContext, s cStream) cResult { return C.lanes_stream_query(ctx, s) }
func syncStream(ctx cContext, s cStream) cResult  { return C.lanes_stream_sync(ctx, s) }

func beginCapture(ctx cContext, s cStream, mode backend.CaptureMode) cResult {
	relaxed := C.int(0)
	if mode == backend.CaptureRelaxed {
		relaxed = 1
	}
	return C.lanes_begin_capture(ctx, s, relaxed)
}

func endCapture(ctx cContext, s cStream) (cGraph, int, cResult) {
	var g cGraph
	var n C.size_t
	r := C.lanes_end_capture(ctx, s, &g, &n)
	return g, int(n), r
}

func instantiate(ctx cContext, g cGraph) (cGraphExec, cResult) {
	var x cGraphExec
	r := C.lanes_instantiate(ctx, g, &x)
	return x, r
}

func execUpdate(ctx cContext, x cGraphExec, g cGraph) (int, cResult) {
	var res C.int
	r := C.lanes_exec_update(ctx, x, g, &res)
	return int(res), r
}

func destroyGraph(ctx cContext, g cGraph) cResult    { return C.lanes_graph_destroy(ctx, g) }
func destroyExec(ctx cContext, x cGraphExec) cResult { return C.lanes_exec_destroy(ctx, x) }
func syncContext(ctx cContext) cResult               { return C.lanes_ctx_sync(ctx) }
func checkBound(ctx cContext) cResult                { return C.lanes_bound(ctx) }

func memAlloc(ctx cContext, n uint64) (uint64, cResult) {
	var p C.CUdeviceptr
	r := C.lanes_mem_alloc(ctx, &p, C.size_t(n))
	return uint64(p), r
}

func memFree(ctx cContext, p uint64) cResult { return C.lanes_mem_free(ctx, C.CUdeviceptr(p)) }

func hostAlloc(ctx cContext, n uint64) (unsafe.Pointer, cResult) {
	var p unsafe.Pointer
	r := C.lanes_host_alloc(ctx, &p, C.size_t(n))
	return p, r
}

func createStream(ctx cContext) (cStream, cResult) {
	var s cStream
	r := C.lanes_stream_create(ctx, &s)
	return s, r
}

func destroyStream(ctx cContext, s cStream) cResult { return C.lanes_stream_destroy(ctx, s) }

// paramInfo is the driver's view of a function's parameter i: its offset
// and size; CUDA_ERROR_INVALID_VALUE past the last parameter, and
// CUDA_ERROR_NOT_SUPPORTED on a driver older than CUDA 12.4.
func paramInfo(fn cFunction, i int) (offset, size uint64, r cResult) {
	var o, n C.size_t
	r = C.lanes_param_info(fn, C.size_t(i), &o, &n)
	return uint64(o), uint64(n), r
}

// paramCount is how many parameters a function has, where the driver can
// say (CUDA 13's cuFuncGetParamCount); resultNotSupported otherwise.
func paramCount(fn cFunction) (int, cResult) {
	var n C.size_t
	r := C.lanes_param_count(fn, &n)
	return int(n), r
}

// funcLimits is a function's most threads per block and most dynamic shared
// memory.
func funcLimits(fn cFunction) (threads, shared int, r cResult) {
	var t, s C.int
	r = C.lanes_func_limits(fn, &t, &s)
	return int(t), int(s), r
}

// bound reports whether the calling thread has ctx current (0) or not.
func bound(ctx cContext) cResult { return C.lanes_bound(ctx) }
