//go:build cuda

// The real device's errors: CUresults classified, a sticky one poisoning
// the device, and the liveness check every call makes first.

package driver

import (
	"fmt"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
)

// Err returns the sticky error that poisoned the device, or nil.
func (d *device) Err() error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.poison == nil {
		return nil
	}
	return d.poison
}

// live fails a call on a closed or poisoned device.
func (d *device) live(op string) error {
	if !d.unwell.Load() {
		return nil
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.poison != nil {
		return d.poison
	}
	if d.closed {
		return cuda.Contractf(op, cuda.ErrDeviceClosed, "device %d is closed; open a new one", d.info.Instance)
	}
	return nil
}

// check turns a CUresult into an error, classifies it, and poisons the
// device on a sticky code.
func (d *device) check(op string, r cResult, detail string) error {
	if r == 0 {
		return nil
	}
	var err *cuda.Error
	switch int(r) {
	case codeNotBound:
		return cuda.Contractf(op, cuda.ErrThreadNotBound,
			"the calling OS thread does not have device %d's context current; call BindThread on this goroutine first", d.info.Instance)
	case codeCapturing:
		err = backend.DriverError(op, codes.IllegalState, "events are not recorded during a capture; record after EndCapture")
	default:
		err = backend.DriverError(op, cuda.Code(r), fmt.Sprintf("CUresult %d: %s", int(r), detail))
	}
	if err.Sticky {
		d.mu.Lock()
		if d.poison == nil {
			d.poison = err
			d.unwell.Store(true)
		}
		d.mu.Unlock()
	}
	return err
}

// driverError converts an error from gorgonia/cu, whose CUresult type is
// unexported but an int underneath.
func driverError(op string, err error, detail string) *cuda.Error {
	code := codes.DriverError
	if r, ok := resultOf(err); ok {
		code = cuda.Code(r)
	}
	return backend.DriverError(op, code, detail+": "+err.Error())
}
