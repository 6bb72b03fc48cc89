//go:build cuda

// cuBLAS, loaded at run time with dlopen: the build needs no cuBLAS headers
// and no link-time dependency, only libcublas on the machine that runs it.

package main

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stddef.h>

typedef int (*create_t)(void **);
typedef int (*set_stream_t)(void *, void *);
typedef int (*sgemm_t)(void *, int, int, int, int, int, const float *, const float *, int,
                       const float *, int, const float *, float *, int);
typedef int (*stream_sync_t)(void *);

static create_t create_fn;
static set_stream_t set_stream_fn;
static sgemm_t sgemm_fn;
static stream_sync_t stream_sync_fn;

// load_cublas opens libcublas and finds the three entry points: 0, or -1
// when no libcublas loads, -2 when one lacks them.
static int load_cublas(void) {
	const char *names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so", NULL};
	void *lib = NULL;
	for (int i = 0; names[i] != NULL && lib == NULL; i++) lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) return -1;
	create_fn = (create_t)dlsym(lib, "cublasCreate_v2");
	set_stream_fn = (set_stream_t)dlsym(lib, "cublasSetStream_v2");
	sgemm_fn = (sgemm_t)dlsym(lib, "cublasSgemm_v2");
	void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (cuda != NULL) stream_sync_fn = (stream_sync_t)dlsym(cuda, "cuStreamSynchronize");
	return create_fn && set_stream_fn && sgemm_fn && stream_sync_fn ? 0 : -2;
}

static int create_handle(void **h) { return create_fn(h); }

// gemm is row-major C(m×n) = A(m×k)·B(k×n): column-major C^T = B^T·A^T.
static int gemm(void *h, uintptr_t stream, int m, int n, int k, uint64_t a, uint64_t b, uint64_t c) {
	float alpha = 1.0f, beta = 0.0f;
	int r = set_stream_fn(h, (void *)stream);
	if (r != 0) return r;
	return sgemm_fn(h, 0, 0, n, m, k, &alpha, (const float *)b, n, (const float *)a, k, &beta, (float *)c, n);
}

static int stream_sync(uintptr_t stream) { return stream_sync_fn((void *)stream); }
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/driver"
)

var (
	cublasOnce   sync.Once
	cublasErr    error
	cublasMu     sync.Mutex // one handle: set stream + sgemm together
	cublasHandle unsafe.Pointer
)

// loadCublas loads libcublas and creates one handle, on the calling thread
// (which has the device's context current: a library call's Enqueue runs
// on the lane's bound thread).
func loadCublas() error {
	cublasOnce.Do(func() {
		if r := C.load_cublas(); r != 0 {
			cublasErr = fmt.Errorf("load libcublas (dlopen libcublas.so.13, .12 or .so): %d", int(r))
			return
		}
		if r := C.create_handle(&cublasHandle); r != 0 {
			cublasErr = fmt.Errorf("cublasCreate: status %d", int(r))
		}
	})
	return cublasErr
}

// cublasSgemm enqueues C = A·B with cuBLAS on the stream it is given.
func cublasSgemm(a, b, c uint64, m, n, k int) func(stream uintptr) error {
	return func(stream uintptr) error {
		if err := loadCublas(); err != nil {
			return err
		}
		cublasMu.Lock()
		defer cublasMu.Unlock()
		if r := C.gemm(cublasHandle, C.uintptr_t(stream), C.int(m), C.int(n), C.int(k), C.uint64_t(a), C.uint64_t(b), C.uint64_t(c)); r != 0 {
			return fmt.Errorf("cublasSgemm: status %d", int(r))
		}
		return nil
	}
}

// syncingCall is a library call that breaks a capture rule: it
// synchronizes its stream (as a library that waits for its own work
// would). Eagerly that is merely slow; in a capture CUDA refuses it and
// invalidates the capture, so the batch falls back to eager execution.
func syncingCall() func(stream uintptr) error {
	return func(stream uintptr) error {
		if err := loadCublas(); err != nil {
			return err
		}
		if r := C.stream_sync(C.uintptr_t(stream)); r != 0 {
			return fmt.Errorf("cuStreamSynchronize: CUresult %d", int(r))
		}
		return nil
	}
}

// openDevice opens GPU 0.
func openDevice() (cuda.Device, error) { return driver.Open(driver.Config{}) }
