// Package driver is the real device of lanes: the [cuda.Device] boundary on
// the CUDA driver API, through gorgonia.org/cu and a small cgo file of its
// own for what gorgonia/cu lacks (stream capture, graph instantiate, upload,
// launch and node counts) and for the hot path (kernel and graph launch,
// event record and query), where the thread check rides in the same cgo
// call.
//
// It builds only with the build tag cuda, against CUDA 12 or 13 headers:
// scripts/build-cuda.sh sets CGO_CFLAGS and CGO_LDFLAGS from CUDA_HOME and
// force-includes compat.h, which re-binds the five names CUDA 12 changed.
// Without the tag the package is empty.
//
// # Threads and contexts
//
// All devices of one GPU share its primary context. Every call into a
// device must come from a goroutine that called [cuda.Device.BindThread],
// which locks it to its OS thread and makes the context current there; each
// call checks that the context is current on the calling thread and fails
// with cuda.ErrThreadNotBound otherwise, rather than run against whatever
// context the thread happens to hold.
//
// # Errors
//
// CUresult codes are classified as CUDA documents them: out of memory is
// retryable; an illegal address and the other sticky codes poison the
// device, after which every call returns that error, as CUDA's context does.
package driver
