//go:build cuda

// cuBLAS for the real device, loaded at run time with dlopen: the build
// needs no cuBLAS headers and no link-time dependency, only libcublas on
// the machine that runs the host.

package axpy

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>

typedef int (*create_t)(void **);
typedef int (*set_stream_t)(void *, void *);
typedef int (*saxpy_t)(void *, int, const float *, const float *, int, float *, int);

static create_t create_fn;
static set_stream_t set_stream_fn;
static saxpy_t saxpy_fn;

// load opens libcublas and finds its entry points: 0, or -1 when no
// libcublas loads, -2 when one lacks them.
static int load(void) {
	const char *names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so", NULL};
	void *lib = NULL;
	for (int i = 0; names[i] != NULL && lib == NULL; i++) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) return -1;
	create_fn = (create_t)dlsym(lib, "cublasCreate_v2");
	set_stream_fn = (set_stream_t)dlsym(lib, "cublasSetStream_v2");
	saxpy_fn = (saxpy_t)dlsym(lib, "cublasSaxpy_v2");
	return create_fn && set_stream_fn && saxpy_fn ? 0 : -2;
}

static int create_handle(void **h) { return create_fn(h); }

// saxpy is y = a*x + y over n floats on stream (a read at the call, so
// a capture keeps its value).
static int saxpy(void *h, uintptr_t stream, int n, float a, uint64_t x, uint64_t y) {
	int r = set_stream_fn(h, (void *)stream);
	if (r != 0) return r;
	return saxpy_fn(h, n, &a, (const float *)x, 1, (float *)y, 1);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/lanesched/lanes/cuda"
)

var (
	mu     sync.Mutex // one handle: its stream is set for each call, with the call
	handle unsafe.Pointer
)

// Setup loads libcublas and makes the host's handle, on a thread with the
// device's context current (hostcmd.Options.Setup): before the host
// serves, so that no capture sees the handle's allocations. One handle
// serves every lane: cublasSaxpy uses no workspace, and each call sets the
// handle's stream under mu. (A routine with a workspace, sgemm's, wants a
// handle per stream.)
func Setup(cuda.Device) error {
	mu.Lock()
	defer mu.Unlock()
	if handle != nil {
		return nil
	}
	if r := C.load(); r != 0 {
		return fmt.Errorf("axpy: load libcublas (dlopen libcublas.so.13, .12 or .so): %d", int(r))
	}
	if r := C.create_handle(&handle); r != 0 {
		return fmt.Errorf("axpy: cublasCreate: status %d", int(r))
	}
	return nil
}

// enqueue is cublasSaxpy of x into y on the stream it is given.
func enqueue(x, y cuda.Region, a float32) func(stream uintptr) error {
	n := int(y.Length / 4)
	return func(stream uintptr) error {
		mu.Lock()
		defer mu.Unlock()
		if handle == nil {
			return errors.New("axpy: no cuBLAS handle: serve the call from a host with axpy.Setup (hostcmd.Options.Setup)")
		}
		if r := C.saxpy(handle, C.uintptr_t(stream), C.int(n), C.float(a), C.uint64_t(x.Addr()), C.uint64_t(y.Addr())); r != 0 {
			return fmt.Errorf("axpy: cublasSaxpy: status %d", int(r))
		}
		return nil
	}
}
