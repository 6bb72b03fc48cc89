// Package embedder is a small multi-tenant serving backend written against
// lanes' public API alone, in a module of its own, as a user would write
// one: each tenant owns a model state on the device and pinned host
// staging for its results; a step uploads the tenant's input, runs a
// replayable compute chain and stages the state out to the host. Its tests
// are the embedder suite: careless and malicious tenants beside healthy
// ones whose results are checked bit for bit, order at the admission limit,
// cancellation, errors that keep their cause, injected faults over a long
// run. They run on the simulated device, and with the cuda build tag on a
// real GPU.
package embedder

import (
	"fmt"
	"math"
	"runtime"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
)

// Backend serves tenants on one device through one scheduler.
type Backend struct {
	Dev cuda.Device
	S   *actors.Scheduler
}

// Tenant is one tenant's device state: N float32s of model state, an input
// buffer, and pinned host staging its results come back through.
type Tenant struct {
	Name  string
	N     int
	State cuda.Buffer
	Input cuda.Buffer
	Out   cuda.HostBuffer
}

// Do runs fn on a goroutine bound to the device, as every direct device
// call must be on a real GPU.
func (b *Backend) Do(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	unbind, err := b.Dev.BindThread()
	if err != nil {
		return err
	}
	defer unbind()
	return fn()
}

// NewTenant allocates a tenant's buffers (state zeroed by its first step's
// caller) and records them as the tenant's own.
func (b *Backend) NewTenant(name string, n int) (*Tenant, error) {
	t := &Tenant{Name: name, N: n}
	err := b.Do(func() error {
		var err error
		spec := cuda.BufferSpec{Size: uint64(4 * n), Elem: cuda.F32}
		if t.State, err = b.Dev.Alloc(spec); err != nil {
			return err
		}
		if t.Input, err = b.Dev.Alloc(spec); err != nil {
			return err
		}
		t.Out, err = b.Dev.AllocHost(uint64(4 * n))
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := b.S.Own(name, t.State, t.Input); err != nil {
		return nil, err
	}
	if err := b.S.OwnHost(name, t.Out); err != nil {
		return nil, err
	}
	return t, nil
}

// Kernel looks a kernel's launch contract up on the device.
func (b *Backend) Kernel(name string) (*cuda.KernelSpec, error) {
	k, ok := b.Dev.Kernels().Kernel(name)
	if !ok {
		return nil, fmt.Errorf("embedder: no kernel %s", name)
	}
	return &k, nil
}

// Reset is a batch that zeroes the tenant's state.
func (b *Backend) Reset(t *Tenant) (lanes.Batch, error) {
	z, err := cuda.Zero(t.State.Whole())
	if err != nil {
		return lanes.Batch{}, err
	}
	return lanes.Batch{Entries: []lanes.Entry{{Phase: cache.PhaseInitialization, Node: cache.NoNode, Command: z}}}, nil
}

// Step is one decode-like step: upload the input, then k replayable axpy
// kernels (state += 0.5 * input, k times), then stage the state out to the
// tenant's pinned host buffer.
func (b *Backend) Step(t *Tenant, input []float32, k int) (lanes.Batch, error) {
	up, err := cuda.Upload(t.Input.Whole(), f32Bytes(input))
	if err != nil {
		return lanes.Batch{}, err
	}
	axpy, err := b.Kernel("axpy_f32")
	if err != nil {
		return lanes.Batch{}, err
	}
	launch, err := cuda.Launch(axpy, cuda.Linear(uint32(t.N), 128), cuda.BufferArg(t.State.Whole()), cuda.BufferArg(t.Input.Whole()), cuda.F32Arg(0.5), cuda.I32Arg(int32(t.N)))
	if err != nil {
		return lanes.Batch{}, err
	}
	out, err := cuda.StageOut(t.Out.Whole(), t.State.Whole())
	if err != nil {
		return lanes.Batch{}, err
	}
	replay := lanes.Replayable(launch, cache.LaunchKey("embedder", launch), cache.PlanScope())
	batch := lanes.Batch{Entries: []lanes.Entry{{Phase: cache.PhaseDynamicBinding, Node: cache.NoNode, Command: up}}}
	for i := range k {
		batch.Entries = append(batch.Entries, lanes.Entry{Phase: cache.PhaseCompute, Node: i, Command: launch, Replay: replay})
	}
	batch.Entries = append(batch.Entries, lanes.Entry{Phase: cache.PhaseReadout, Node: cache.NoNode, Command: out})
	return batch, nil
}

// Result reads the tenant's staged-out state (after a step succeeded).
func (b *Backend) Result(t *Tenant) ([]float32, error) {
	buf := make([]byte, 4*t.N)
	err := b.Do(func() error { return b.Dev.ReadHost(t.Out.Whole(), buf) })
	return bytesF32(buf), err
}

// Reference is one step in Go, rounded exactly as the kernels round: the
// state a step leaves, given the state before it.
func Reference(state, input []float32, k int) []float32 {
	out := append([]float32(nil), state...)
	for range k {
		for i := range out {
			out[i] = float32(float32(0.5*input[i]) + out[i])
		}
	}
	return out
}

// SameBits reports whether two float32 slices are bit-for-bit equal.
func SameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

func f32Bytes(v []float32) []byte {
	out := make([]byte, 4*len(v))
	for i, f := range v {
		u := math.Float32bits(f)
		out[4*i], out[4*i+1], out[4*i+2], out[4*i+3] = byte(u), byte(u>>8), byte(u>>16), byte(u>>24)
	}
	return out
}

func bytesF32(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
	}
	return out
}
