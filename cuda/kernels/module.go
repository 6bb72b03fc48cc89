// Modules: kernels of one's own, compiled for the real device (PTX, cubin
// or fatbin) and each with a Go reference the simulated device runs, so
// that one program runs in CI on the simulator and in production on a GPU.

package kernels

import (
	"fmt"
	"slices"
	"strings"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/codes"
)

// ErrInvalidModule: a module, or a kernel it declares, cannot be loaded as
// declared (a missing image or reference, a name already loaded, or a
// parameter list the driver's view of the function contradicts). It is
// the caller's error: nothing was loaded.
var ErrInvalidModule = codes.NewSentinel(codes.RuntimeContract, "kernels: invalid module")

// Module is a compiled module of one's own kernels. Image is what nvcc or
// Triton produced, as cuModuleLoadData takes it: PTX text (NUL-terminated
// or not), a cubin or a fatbin. Kernels declares each kernel of the image
// the device may launch, under the name it has in the image (declare it
// extern "C" so the name is not mangled), with its launch contract
// (Kernel.Spec: parameters in order, and an extent Check) and its Go
// reference (Kernel.Body), which the simulated device runs in its place.
//
// A kernel's parameters are what the real device checks against the
// driver's own view of the function when it loads the module (CUDA 12.4
// and later): a buffer is an 8-byte device pointer, a scalar its element
// type's size. A declaration the driver contradicts is refused then, never
// launched with the wrong argument layout.
type Module struct {
	Name    string
	Image   []byte
	Kernels Registry
}

// Loader is what every device of lanes can do: load a module of one's own
// kernels, at open (sim.Config.Modules, driver.Config.Modules) or later.
// Once loaded, a kernel is launched by name like the built-in ones, and
// its name may not be loaded again on the device.
type Loader interface {
	LoadModule(m Module) error
}

// Check reports what is wrong with the module before any device sees it:
// a missing name or image, no kernels, a kernel filed under another name
// than its spec's, a malformed parameter list, a kernel without a Go
// reference when needBody is set (the simulated device needs one), or a
// name that loaded already holds.
func (m Module) Check(loaded Registry, needBody bool) error {
	switch {
	case m.Name == "":
		return fmt.Errorf("%w: the module has no name; name it so errors can say which module is wrong", ErrInvalidModule)
	case len(m.Image) == 0:
		return fmt.Errorf("%w: module %q has no image; give the PTX, cubin or fatbin bytes nvcc produced", ErrInvalidModule, m.Name)
	case len(m.Kernels) == 0:
		return fmt.Errorf("%w: module %q declares no kernels; declare each kernel the device may launch", ErrInvalidModule, m.Name)
	}
	for _, name := range m.Kernels.Names() {
		k := m.Kernels[name]
		if err := checkKernel(m.Name, name, k, needBody); err != nil {
			return err
		}
		if _, dup := loaded[name]; dup {
			return fmt.Errorf("%w: module %q declares kernel %q, which this device has loaded already; kernel names are unique on a device", ErrInvalidModule, m.Name, name)
		}
	}
	return nil
}

// checkKernel checks one kernel's declaration.
func checkKernel(module, name string, k *Kernel, needBody bool) error {
	switch {
	case k == nil:
		return fmt.Errorf("%w: module %q declares kernel %q as nil", ErrInvalidModule, module, name)
	case name == "" || len(name) > cuda.MaxKernelName || strings.ContainsRune(name, 0):
		return fmt.Errorf("%w: module %q declares a kernel named %q; a name is 1 to %d bytes without NUL, as the function is named in the image", ErrInvalidModule, module, name, cuda.MaxKernelName)
	case !identifier(name):
		return fmt.Errorf("%w: module %q declares a kernel named %q; a kernel is named as its extern \"C\" (or mangled) function is: letters, digits, _ and $, not starting with a digit", ErrInvalidModule, module, name)
	case k.Spec.Name != name:
		return fmt.Errorf("%w: module %q files kernel %q under the name %q; file it under its spec's name", ErrInvalidModule, module, k.Spec.Name, name)
	case len(k.Spec.Params) > 64:
		return fmt.Errorf("%w: kernel %q of module %q declares %d parameters; at most 64", ErrInvalidModule, name, module, len(k.Spec.Params))
	case needBody && k.Body == nil:
		return fmt.Errorf("%w: kernel %q of module %q has no Go reference (Kernel.Body): the simulated device runs every kernel through its reference", ErrInvalidModule, name, module)
	case k.Spec.MaxBlockThreads > maxBlockThreads || k.Spec.MaxSharedBytes > maxSharedBytes:
		return fmt.Errorf("%w: kernel %q of module %q declares limits of %d threads per block and %d bytes of shared memory; no GPU has more than %d and %d (leave them 0 for the device's)",
			ErrInvalidModule, name, module, k.Spec.MaxBlockThreads, k.Spec.MaxSharedBytes, maxBlockThreads, maxSharedBytes)
	}
	for i, p := range k.Spec.Params {
		switch {
		case p.Name == "":
			return fmt.Errorf("%w: kernel %q parameter %d has no name; name it so errors can say which is wrong", ErrInvalidModule, name, i)
		case slices.ContainsFunc(k.Spec.Params[:i], func(q cuda.Param) bool { return q.Name == p.Name }):
			return fmt.Errorf("%w: kernel %q declares parameter %q twice; each parameter has its own name", ErrInvalidModule, name, p.Name)
		case p.Kind != cuda.ParamBuffer && p.Access != 0:
			return fmt.Errorf("%w: kernel %q parameter %d (%s) declares access %s; only a buffer has one", ErrInvalidModule, name, i, p.Name, p.Access)
		case p.Kind != cuda.ParamBuffer && p.Kind != cuda.ParamScalar && p.Kind != cuda.ParamStruct:
			return fmt.Errorf("%w: kernel %q parameter %d (%s) has kind %d; use cuda.ParamBuffer, cuda.ParamScalar or cuda.ParamStruct", ErrInvalidModule, name, i, p.Name, p.Kind)
		case p.Kind == cuda.ParamStruct:
			if !cuda.ValidStruct(p.Size, p.Align) {
				return fmt.Errorf("%w: kernel %q struct parameter %d (%s) declares %d B aligned to %d; a struct is 1 to %d B, its alignment a power of two up to 256 dividing its size (sizeof and alignof of the C type)",
					ErrInvalidModule, name, i, p.Name, p.Size, p.Align, cuda.MaxStructBytes)
			}
		case !p.Elem.Valid():
			return fmt.Errorf("%w: kernel %q parameter %d (%s) has no valid element type", ErrInvalidModule, name, i, p.Name)
		case p.Kind == cuda.ParamBuffer && !p.Access.Valid():
			return fmt.Errorf("%w: kernel %q buffer parameter %d (%s) declares no access; say cuda.AccessRead, AccessWrite or AccessReadWrite", ErrInvalidModule, name, i, p.Name)
		}
	}
	if n := paramBufferBytes(k.Spec.Params); n > MaxParamBytes {
		return fmt.Errorf("%w: kernel %q of module %q declares %d bytes of parameters; CUDA passes at most %d to a kernel (pass large structs in a buffer)", ErrInvalidModule, name, module, n, MaxParamBytes)
	}
	return nil
}

// MaxParamBytes is the most parameter bytes a kernel takes (CUDA 12.1 and
// later, Volta and later).
const MaxParamBytes = 32764

// paramBufferBytes is the size of the parameter buffer a declaration lays
// out: each parameter at the next multiple of its alignment.
func paramBufferBytes(params []cuda.Param) uint64 {
	var used uint64
	for _, p := range params {
		size, align := ParamSize(p), ParamSize(p)
		if p.Kind == cuda.ParamStruct {
			align = uint64(p.Align)
		}
		align = max(align, 1)
		used = (used+align-1)&^(align-1) + size
	}
	return used
}

// identifier reports whether name is a C identifier (with $, which some
// compilers' symbols carry).
func identifier(name string) bool {
	for i, r := range name {
		letter := r == '_' || r == '$' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z')
		if !letter && (i == 0 || r < '0' || r > '9') {
			return false
		}
	}
	return name != ""
}

// The most any CUDA device allows per block: threads, and shared memory
// (an H200 opts in to 227 KiB).
const (
	maxBlockThreads = 1024
	maxSharedBytes  = 256 << 10
)

// Check reports what is wrong with the registry's declarations (as
// Module.Check does for a module's), a kernel without a Go reference
// included when needBody is set.
func (r Registry) Check(needBody bool) error {
	for _, name := range r.Names() {
		if err := checkKernel("(registry)", name, r[name], needBody); err != nil {
			return err
		}
	}
	return nil
}

// Clone is a copy of the registry whose kernels are clones: nothing in it
// is shared with r.
func (r Registry) Clone() Registry {
	out := make(Registry, len(r))
	for name, k := range r {
		out[name] = k.Clone()
	}
	return out
}

// ParamSize is the size in bytes the driver gives a parameter of this
// declaration: a buffer is a device pointer, a scalar its element's size,
// a struct its declared size.
func ParamSize(p cuda.Param) uint64 {
	switch p.Kind {
	case cuda.ParamBuffer:
		return 8
	case cuda.ParamStruct:
		return uint64(p.Size)
	}
	return p.Elem.Size()
}
