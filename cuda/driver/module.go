//go:build cuda

// One's own kernels on the real device: a compiled module loaded into the
// primary context, each declared kernel checked against the driver's own
// view of the function (its parameters, its launch limits) before anything
// can launch it.

package driver

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/ptx"
	"gorgonia.org/cu"
)

// kernelTable is what launches read: the registry validation checks
// commands against, and each kernel's function.
type kernelTable struct {
	kernels kernels.Registry
	funcs   map[string]cFunction
}

// CUresult codes the module checks tell apart.
const (
	resultInvalidValue = 1
	resultNotFound     = 500
	resultNotSupported = 801
)

var _ kernels.Loader = (*device)(nil)

// LoadModule loads a module of one's own kernels (see [kernels.Module])
// with cuModuleLoadData and makes its declared kernels launchable by name.
// Each declaration is checked against the driver's view of the function:
// the module must hold it (extern "C"), and (on a CUDA 12.4 or later
// driver, through cuFuncGetParamInfo) have exactly the declared
// parameters, of the declared sizes. The function's own limits (most
// threads per block, most dynamic shared memory) become its spec's, so a
// launch beyond them is refused before it reaches the GPU. An error is a
// kernels.ErrInvalidModule (or the driver's, for an image it cannot load)
// and loads nothing. It binds the calling goroutine to the device for the
// call.
func (d *device) LoadModule(m kernels.Module) error {
	const op = "load module"
	if err := d.live(op); err != nil {
		return err
	}
	d.loadMu.Lock()
	defer d.loadMu.Unlock()
	cur := d.table.Load()
	if err := m.Check(cur.kernels, false); err != nil {
		return err
	}
	unbind, err := d.BindThread()
	if err != nil {
		return err
	}
	defer unbind()
	mod, err := cu.LoadData(string(m.Image))
	if err != nil {
		return driverError(op, err, fmt.Sprintf("load module %q (cuModuleLoadData: is the image PTX, a cubin or a fatbin for this GPU?)", m.Name))
	}
	next := &kernelTable{kernels: cur.kernels.With(nil), funcs: make(map[string]cFunction, len(cur.funcs)+len(m.Kernels))}
	for n, fn := range cur.funcs {
		next.funcs[n] = fn
	}
	for _, name := range m.Kernels.Names() {
		k, fn, err := d.resolve(m, name, mod)
		if err != nil {
			_ = mod.Unload()
			return err
		}
		next.kernels[name], next.funcs[name] = k, fn
	}
	d.modules = append(d.modules, mod)
	d.table.Store(next)
	return nil
}

// resolve finds a declared kernel's function in the loaded module, checks
// its parameters against the driver's view, and returns a copy of the
// kernel whose spec carries the function's launch limits.
func (d *device) resolve(m kernels.Module, name string, mod cu.Module) (*kernels.Kernel, cFunction, error) {
	f, err := mod.Function(name)
	if err != nil {
		if code, ok := resultOf(err); ok && code == resultNotFound {
			return nil, nil, fmt.Errorf("%w: module %q has no kernel %q (declare it extern \"C\" so its name is not mangled)", kernels.ErrInvalidModule, m.Name, name)
		}
		return nil, nil, driverError("load module", err, fmt.Sprintf("find kernel %q in module %q", name, m.Name))
	}
	fn := *(*cFunction)(unsafe.Pointer(&f))
	k := m.Kernels[name].Clone()
	if err := checkParams(m, &k.Spec, fn); err != nil {
		return nil, nil, err
	}
	threads, shared, r := funcLimits(fn)
	if err := d.check("load module", r, fmt.Sprintf("read kernel %q's launch limits", name)); err != nil {
		return nil, nil, err
	}
	k.Spec.MaxBlockThreads, k.Spec.MaxSharedBytes = uint32(threads), uint32(shared)
	return k, fn, nil
}

// checkParams compares a kernel's declared parameters with the driver's
// view of the function: their count and each one's size. The count comes
// from the driver where it can say (cuFuncGetParamCount, CUDA 13), else
// from the module's PTX; only for a cubin or fatbin on an older driver is
// it found by asking for one parameter past the last, a call that fails
// by design (and that compute-sanitizer reports). A driver older than
// CUDA 12.4 cannot say at all; the declaration is then trusted.
func checkParams(m kernels.Module, spec *cuda.KernelSpec, fn cFunction) error {
	const seen = "the driver sees"
	count, r := paramCount(fn)
	switch {
	case r == resultNotSupported:
		count = ptxParamCount(m, spec.Name)
	case r != 0:
		return backend.DriverError("load module", cuda.Code(r), fmt.Sprintf("CUresult %d: read kernel %q's parameter count", int(r), spec.Name))
	}
	for i := range spec.Params {
		if count >= 0 && i >= count {
			return ptx.TooFewParams(m.Name, spec, i, seen)
		}
		offset, size, r := paramInfo(fn, i)
		switch {
		case r == resultNotSupported:
			return nil
		case r == resultInvalidValue:
			return ptx.TooFewParams(m.Name, spec, i, seen)
		case r != 0:
			return backend.DriverError("load module", cuda.Code(r), fmt.Sprintf("CUresult %d: read kernel %q's parameter %d", int(r), spec.Name, i))
		}
		if err := ptx.CheckParam(m.Name, spec, i, size, offset, seen); err != nil {
			return err
		}
	}
	switch {
	case count > len(spec.Params):
		_, size, _ := paramInfo(fn, len(spec.Params))
		return ptx.TooManyParams(m.Name, spec, size, seen)
	case count >= 0:
		return nil
	}
	if _, size, r := paramInfo(fn, len(spec.Params)); r == 0 {
		return ptx.TooManyParams(m.Name, spec, size, seen)
	}
	return nil
}

// ptxParamCount is how many parameters kernel name has in the module's
// PTX, or -1 when the image is not PTX (or does not say).
func ptxParamCount(m kernels.Module, name string) int {
	entries, ok, err := ptx.ReadPTX(m.Image)
	if !ok || err != nil {
		return -1
	}
	e, found := entries[name]
	if !found {
		return -1
	}
	return len(e.ParamSizes)
}

// resultOf is the CUresult behind an error of gorgonia.org/cu (whose
// result type is unexported, an int underneath).
func resultOf(err error) (int, bool) {
	if v := reflect.ValueOf(err); v.Kind() == reflect.Int {
		return int(v.Int()), true
	}
	return 0, false
}
