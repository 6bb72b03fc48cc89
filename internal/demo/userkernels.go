// --kernels-from: the demo's tenants serving steps of a user's own module
// (manifest.go says what the directory holds), and the input values every
// step writes.

package demo

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"slices"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/half"
)

// Reference is a Go reference implementation of a --kernels-from kernel
// (kernels.Kernel.Body): the simulated device runs it in the kernel's
// place.
type Reference func(shape kernels.Shape, mem []kernels.Memory, args []cuda.Arg) error

// withReferences attaches refs to the workload's kernels, and on the
// simulated device refuses a workload with a kernel that has none.
func (w *workload) withReferences(device string, refs map[string]Reference) error {
	var missing []string
	for name, k := range w.module.Kernels {
		if ref := refs[name]; ref != nil {
			k.Body = ref
		} else {
			missing = append(missing, name)
		}
	}
	if device == "sim" && len(missing) > 0 {
		slices.Sort(missing)
		return errManifest(w.dir, "the simulated device runs a kernel through its Go reference, and a manifest carries none (%v): run it with --device cuda", missing)
	}
	return nil
}

// loadUserModule loads the workload's module into the device and
// allocates the buffers its tenants share.
func (d *deviceSetup) loadUserModule(seed int64) error {
	w := d.work
	l, ok := d.dev.(kernels.Loader)
	if !ok {
		return fmt.Errorf("the %s device cannot load modules", d.dev.Info().Name)
	}
	if err := l.LoadModule(w.module); err != nil {
		if errors.Is(err, kernels.ErrInvalidModule) {
			return errManifest(w.dir, "%s: %w", w.image, err)
		}
		return err
	}
	d.shared = make([]cuda.Buffer, len(w.buffers))
	rng := rand.New(rand.NewSource(seed))
	for i, b := range w.buffers {
		if !b.shared {
			continue
		}
		var err error
		if d.shared[i], err = d.allocDecl(b, rng); err != nil {
			return err
		}
	}
	return nil
}

// allocDecl allocates a manifest buffer and initializes it.
func (d *deviceSetup) allocDecl(b bufferDecl, rng *rand.Rand) (cuda.Buffer, error) {
	buf, err := d.dev.Alloc(cuda.BufferSpec{Size: b.count * b.elem.Size(), Elem: b.elem})
	if err != nil {
		return cuda.Buffer{}, fmt.Errorf("buffer %q: %w", b.name, err)
	}
	var init cuda.Command
	if b.random {
		v := make([]byte, buf.Size)
		fillValues(v, b.elem, rng)
		init, err = cuda.Upload(buf.Whole(), v)
	} else {
		init, err = cuda.Zero(buf.Whole())
	}
	if err == nil {
		err = d.st.Enqueue(init)
	}
	return buf, err
}

// newUserTenant sets up tenant t on the workload: its own buffers, the
// step's launches over them and the shared ones, and its pinned staging.
func (d *deviceSetup) newUserTenant(t int, name string) (*tenant, error) {
	w := d.work
	tn := d.tenantBase(t, name)
	tn.provider = w.provider
	bufs := slices.Clone(d.shared)
	for i, b := range w.buffers {
		if b.shared {
			continue
		}
		var err error
		if bufs[i], err = d.allocDecl(b, tn.rng); err != nil {
			return nil, err
		}
	}
	tn.in, tn.inElem, tn.result = bufs[w.input].Whole(), w.buffers[w.input].elem, bufs[w.output].Whole()
	out, err := d.dev.Alloc(cuda.BufferSpec{Size: tn.result.Length, Elem: w.buffers[w.output].elem})
	if err != nil {
		return nil, err
	}
	tn.out, tn.readout = out, out.Whole()
	shared := func(rg cuda.Region) bool {
		return rg.Buffer.Size > 0 && slices.Contains(d.shared, rg.Buffer)
	}
	for i, l := range w.step {
		args := make([]cuda.Arg, len(l.args))
		for j, a := range l.args {
			if args[j] = a.scalar; a.buffer >= 0 {
				args[j] = cuda.BufferArg(bufs[a.buffer].Whole())
			}
		}
		cmd, err := cuda.LaunchNamed(d.dev.Kernels(), l.kernel, l.cfg, args...)
		if err != nil {
			return nil, errManifest(w.dir, "step[%d] (%s): %w", i, l.kernel, err)
		}
		tn.addCompute(cmd, shared)
	}
	return tn, d.allocStaging(tn)
}

// fillValues writes small values of element type t into b: eighths from
// -0.5 to 0.5 for floating point, 0 to 15 for integers, both for bool; each
// draw of rng makes sixteen. Each element is one of sixteen encodings,
// looked up rather than converted (a serving step fills its input every
// time).
func fillValues(b []byte, t cuda.ElementType, rng *rand.Rand) {
	size := int(t.Size())
	codes := &fillCodes[t]
	var bits uint64
	for i, n := 0, 0; i+size <= len(b); i, n = i+size, n+1 {
		if n%16 == 0 {
			bits = rng.Uint64()
		}
		c := codes[bits&15]
		bits >>= 4
		switch size {
		case 8:
			binary.LittleEndian.PutUint64(b[i:], c)
		case 4:
			binary.LittleEndian.PutUint32(b[i:], uint32(c))
		case 2:
			binary.LittleEndian.PutUint16(b[i:], uint16(c))
		default:
			b[i] = byte(c)
		}
	}
}

// fillCodes is valueCodes for every element type.
var fillCodes = func() (codes [256][16]uint64) {
	for t := range codes {
		codes[t] = valueCodes(cuda.ElementType(t))
	}
	return codes
}()

// valueCodes is the encoding of each of fillValues' sixteen draws in
// element type t.
func valueCodes(t cuda.ElementType) (codes [16]uint64) {
	for k := range uint64(16) {
		f := float32(int(k)%9-4) / 8
		switch t {
		case cuda.F64:
			codes[k] = math.Float64bits(float64(f))
		case cuda.F32:
			codes[k] = uint64(math.Float32bits(f))
		case cuda.BF16:
			codes[k] = uint64(half.BFloat16Bits(f))
		case cuda.F16:
			codes[k] = uint64(half.Float16Bits(f))
		case cuda.Bool:
			codes[k] = k & 1
		default: // integers
			codes[k] = k
		}
	}
	return codes
}
