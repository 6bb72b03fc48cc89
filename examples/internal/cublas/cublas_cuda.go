//go:build cuda

package cublas

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

typedef int (*create_t)(void **);
typedef int (*set_stream_t)(void *, void *);
typedef int (*sgemm_t)(void *, int, int, int, int, int, const float *, const float *, int,
                       const float *, int, const float *, float *, int);
typedef int (*saxpy_t)(void *, int, const float *, const float *, int, float *, int);
typedef int (*stream_sync_t)(void *);
typedef int (*destroy_t)(void *);
typedef int (*set_workspace_t)(void *, void *, size_t);

static create_t create_fn;
static set_stream_t set_stream_fn;
static sgemm_t sgemm_fn;
static saxpy_t saxpy_fn;
static stream_sync_t stream_sync_fn;
static destroy_t destroy_fn;
static set_workspace_t set_workspace_fn;

// load opens libcublas and libcuda and finds their entry points: 0, or
// -1 when no libcublas loads, -2 when an entry point is missing.
static int load(void) {
	const char *names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so", NULL};
	void *lib = NULL;
	for (int i = 0; names[i] != NULL && lib == NULL; i++) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) return -1;
	create_fn = (create_t)dlsym(lib, "cublasCreate_v2");
	set_stream_fn = (set_stream_t)dlsym(lib, "cublasSetStream_v2");
	sgemm_fn = (sgemm_t)dlsym(lib, "cublasSgemm_v2");
	saxpy_fn = (saxpy_t)dlsym(lib, "cublasSaxpy_v2");
	destroy_fn = (destroy_t)dlsym(lib, "cublasDestroy_v2");
	set_workspace_fn = (set_workspace_t)dlsym(lib, "cublasSetWorkspace_v2");
	void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (cuda != NULL) stream_sync_fn = (stream_sync_t)dlsym(cuda, "cuStreamSynchronize");
	return create_fn && set_stream_fn && sgemm_fn && saxpy_fn && stream_sync_fn && destroy_fn && set_workspace_fn ? 0 : -2;
}

static int create_handle(void **h) { return create_fn(h); }
static int destroy_handle(void *h) { return destroy_fn(h); }

// bind points the handle at stream and, when bytes is not 0, at the
// workspace (cublasSetStream resets the workspace to cuBLAS's own pool,
// so the workspace is set after it, every time).
static int bind(void *h, uintptr_t stream, uint64_t ws, uint64_t bytes) {
	int r = set_stream_fn(h, (void *)stream);
	if (r != 0 || bytes == 0) return r;
	return set_workspace_fn(h, (void *)ws, (size_t)bytes);
}

// gemm is row-major C(m×n) = A(m×k)·B(k×n): column-major C^T = B^T·A^T.
static int gemm(void *h, uintptr_t stream, uint64_t ws, uint64_t bytes, int m, int n, int k, uint64_t a, uint64_t b, uint64_t c) {
	float alpha = 1.0f, beta = 0.0f;
	int r = bind(h, stream, ws, bytes);
	if (r != 0) return r;
	return sgemm_fn(h, 0, 0, n, m, k, &alpha, (const float *)b, n, (const float *)a, k, &beta, (float *)c, n);
}

// axpy is y = a*x + y over n floats (a read at the call, so a capture
// keeps its value).
static int axpy(void *h, uintptr_t stream, uint64_t ws, uint64_t bytes, int n, float a, uint64_t x, uint64_t y) {
	int r = bind(h, stream, ws, bytes);
	if (r != 0) return r;
	return saxpy_fn(h, n, &a, (const float *)x, 1, (float *)y, 1);
}

static int stream_sync(uintptr_t stream) { return stream_sync_fn((void *)stream); }
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/lanesched/lanes/cuda"
)

var (
	loadOnce sync.Once
	loadErr  error
)

// Load loads libcublas (libcublas.so.13, .12 or .so) and libcuda once.
func Load() error {
	loadOnce.Do(func() {
		if r := C.load(); r != 0 {
			loadErr = fmt.Errorf("cublas: load libcublas (dlopen libcublas.so.13, .12 or .so) and libcuda: %d", int(r))
		}
	})
	return loadErr
}

// Handle is a cuBLAS handle. Its calls set its stream first (and its
// workspace after, when it has one: SetWorkspace): calls of one handle on
// several streams must not overlap, so make one handle per stream (per
// lane: a cuda.Library's Setup) rather than share one.
type Handle struct {
	p               unsafe.Pointer
	workspace       uint64
	workspaceLength uint64
}

// NewHandle loads cuBLAS and makes a handle, on the calling thread, which
// must have the device's context current and must not be capturing (the
// handle allocates).
func NewHandle() (Handle, error) {
	if err := Load(); err != nil {
		return Handle{}, err
	}
	var h Handle
	if r := C.create_handle(&h.p); r != 0 {
		return Handle{}, fmt.Errorf("cublas: cublasCreate: status %d", int(r))
	}
	return h, nil
}

// SetWorkspace gives the handle's calls the device memory at addr, bytes
// long, as their workspace, instead of cuBLAS's own pool (which it may
// grow by allocating, which a capture refuses). It returns the handle so
// set up.
func (h Handle) SetWorkspace(addr, bytes uint64) Handle {
	h.workspace, h.workspaceLength = addr, bytes
	return h
}

// Destroy releases the handle (cublasDestroy, which synchronizes the
// device).
func (h Handle) Destroy() error {
	if r := C.destroy_handle(h.p); r != 0 {
		return fmt.Errorf("cublas: cublasDestroy: status %d", int(r))
	}
	return nil
}

// Sgemm enqueues row-major C(m×n) = A(m×k)·B(k×n) on stream.
func (h Handle) Sgemm(stream uintptr, m, n, k int, a, b, c uint64) error {
	if r := C.gemm(h.p, C.uintptr_t(stream), C.uint64_t(h.workspace), C.uint64_t(h.workspaceLength), C.int(m), C.int(n), C.int(k), C.uint64_t(a), C.uint64_t(b), C.uint64_t(c)); r != 0 {
		return fmt.Errorf("cublas: cublasSgemm: status %d", int(r))
	}
	return nil
}

// Saxpy enqueues y = alpha·x + y over n float32s on stream.
func (h Handle) Saxpy(stream uintptr, n int, alpha float32, x, y uint64) error {
	if r := C.axpy(h.p, C.uintptr_t(stream), C.uint64_t(h.workspace), C.uint64_t(h.workspaceLength), C.int(n), C.float(alpha), C.uint64_t(x), C.uint64_t(y)); r != 0 {
		return fmt.Errorf("cublas: cublasSaxpy: status %d", int(r))
	}
	return nil
}

// StreamSynchronize waits for stream (cuStreamSynchronize): what a library
// that waits for its own work does, which a capture refuses.
func StreamSynchronize(stream uintptr) error {
	if err := Load(); err != nil {
		return err
	}
	if r := C.stream_sync(C.uintptr_t(stream)); r != 0 {
		return fmt.Errorf("cuStreamSynchronize: CUresult %d", int(r))
	}
	return nil
}

// setup makes the lane's handle, pointed at the lane's workspace
// (Handle.SetWorkspace sets it on every call, after the stream: setting a
// stream resets cuBLAS's workspace).
func setup(l cuda.LibraryLane) (any, error) {
	h, err := NewHandle()
	if err != nil {
		return nil, err
	}
	return h.SetWorkspace(l.Workspace.Addr(), l.Workspace.Length), nil
}

// teardown destroys the lane's handle.
func teardown(l cuda.LibraryLane) error {
	if h, ok := l.State.(Handle); ok {
		return h.Destroy()
	}
	return nil
}

// enqueueSgemm enqueues C = A·B on the lane's stream with its handle.
func enqueueSgemm(a, b, c uint64, m, n, k int) func(cuda.LibraryLane) error {
	return func(l cuda.LibraryLane) error {
		h, ok := l.State.(Handle)
		if !ok {
			return fmt.Errorf("sgemm: lane %d holds no cuBLAS handle (its state is %T)", l.Lane, l.State)
		}
		return h.Sgemm(l.Stream, m, n, k, a, b, c)
	}
}
