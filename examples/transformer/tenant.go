// The device side: the weights every tenant shares, uploaded once, and each
// tenant's own state (its x, KV cache, position and intermediates) with the
// batch that runs one decode step on it.

package main

import (
	"context"
	"fmt"
	"math"

	serving "github.com/lanesched/lanes"
	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/examples/internal/cublas"
	"github.com/lanesched/lanes/lanes"
)

// provider keys the step's entries for replay: change it whenever what
// they compute changes (transformer.cu, the GEMMs' shapes).
const provider = "transformer/v1"

// model is what every tenant shares: the device, the scheduler, the cuBLAS
// library and the weights, on the host and on the device.
type model struct {
	d    dims
	dev  cuda.Device
	s    *actors.Scheduler
	lib  *cuda.Library
	host *weights
	w    [numWeights]cuda.Buffer
}

// uploadWeights allocates the weights and fills them all at once, through
// the scheduler (FillShared, packed into as few batches as its bounds
// allow): from then on every tenant reads them, and no tenant can write
// them.
func (m *model) uploadWeights(ctx context.Context) (actors.SharedFill, error) {
	fills := make([]actors.SharedBytes, 0, len(m.host))
	for i, v := range m.host {
		buf, err := m.dev.Alloc(cuda.BufferSpec{Size: uint64(4 * len(v)), Elem: cuda.F32})
		if err != nil {
			return actors.SharedFill{}, err
		}
		m.w[i] = buf
		fills = append(fills, actors.SharedBytes{Buffer: buf, Bytes: serving.EncodeF32(v)})
	}
	return m.s.FillShared(ctx, fills...)
}

// tenant is one tenant's state on the device and its step.
type tenant struct {
	name  string
	input []float32 // x before the first step
	x     cuda.Buffer
	step  lanes.Batch
}

// newTenant allocates a tenant's buffers, makes them its own, zeroes its
// KV cache and position, uploads its input, and builds its step.
func (m *model) newTenant(ctx context.Context, name string, input []float32) (*tenant, error) {
	d := m.d
	bc := d.batch * d.channels
	var (
		bufs     []cuda.Buffer
		allocErr error
	)
	alloc := func(n int, e cuda.ElementType) cuda.Buffer {
		if allocErr != nil {
			return cuda.Buffer{}
		}
		b, err := m.dev.Alloc(cuda.BufferSpec{Size: uint64(4 * n), Elem: e})
		if err != nil {
			allocErr = fmt.Errorf("allocate %s's buffers: %w", name, err)
		}
		bufs = append(bufs, b)
		return b
	}
	st := stepBufs{x: alloc(bc, cuda.F32), kc: alloc(bc*d.ctx, cuda.F32), vc: alloc(bc*d.ctx, cuda.F32), pos: alloc(1, cuda.I32),
		ln1: alloc(bc, cuda.F32), qkv: alloc(3*bc, cuda.F32), att: alloc(bc, cuda.F32), proj: alloc(bc, cuda.F32),
		x1: alloc(bc, cuda.F32), ln2: alloc(bc, cuda.F32), up: alloc(4*bc, cuda.F32), down: alloc(bc, cuda.F32)}
	if allocErr != nil {
		return nil, allocErr
	}
	if err := m.s.Own(name, bufs...); err != nil {
		return nil, err
	}
	var init []lanes.Entry
	for _, b := range []cuda.Buffer{st.kc, st.vc, st.pos} {
		cmd, err := cuda.Zero(b.Whole())
		if err != nil {
			return nil, err
		}
		init = append(init, lanes.Eager(cache.PhaseInitialization, cmd))
	}
	up, err := cuda.Upload(st.x.Whole(), serving.EncodeF32(input))
	if err != nil {
		return nil, err
	}
	init = append(init, lanes.Eager(cache.PhaseInitialization, up))
	if _, err := m.s.Submit(ctx, name, lanes.Batch{Entries: init}); err != nil {
		return nil, fmt.Errorf("set up %s: %w", name, err)
	}
	step, err := m.stepBatch(st)
	if err != nil {
		return nil, fmt.Errorf("%s's step: %w", name, err)
	}
	return &tenant{name: name, input: input, x: st.x, step: step}, nil
}

// stepBufs are a tenant's buffers: x (B×C, the step's input and, after
// it, its output), the KV cache (B×T×C each), the position (one int) and
// the intermediates.
type stepBufs struct {
	x, kc, vc, pos                         cuda.Buffer
	ln1, qkv, att, proj, x1, ln2, up, down cuda.Buffer
}

// stepBuilder collects a step's entries, each a replayed compute entry of
// its own plan node, and the first error building them.
type stepBuilder struct {
	entries []lanes.Entry
	err     error
}

// add appends cmd, or notes err.
func (b *stepBuilder) add(cmd cuda.Command, err error) {
	if err != nil && b.err == nil {
		b.err = fmt.Errorf("entry %d: %w", len(b.entries), err)
	}
	b.entries = append(b.entries, lanes.Replayed(provider, len(b.entries), cmd))
}

// oneThread is advance_pos_i32's launch.
var oneThread = cuda.LaunchConfig{Grid: cuda.Dim3{X: 1, Y: 1, Z: 1}, Block: cuda.Dim3{X: 1, Y: 1, Z: 1}}

// pow2Between is the least power of two at least n, within lo and hi.
func pow2Between(n, lo, hi int) uint32 {
	p := lo
	for p < n && p < hi {
		p *= 2
	}
	return uint32(p)
}

// stepBatch is one decode step on st as one batch: every entry replayed,
// so that from the second step on the whole step is one graph launch.
// Nothing in it changes between steps: the position the step writes and
// attends to is read from device memory (st.pos), which its last kernel
// advances.
func (m *model) stepBatch(st stepBufs) (lanes.Batch, error) {
	d := m.d
	B, C, H, D, T := d.batch, d.channels, d.heads, d.headDim(), d.ctx
	ks := m.dev.Kernels()
	var b stepBuilder
	r := func(buf cuda.Buffer) cuda.Arg { return cuda.BufferArg(buf.Whole()) }
	w := func(i int) cuda.Arg { return cuda.BufferArg(m.w[i].Whole()) }
	i32 := func(v int) cuda.Arg { return cuda.I32Arg(int32(v)) }
	linear := func(n int) cuda.LaunchConfig { return cuda.Linear(uint32(n), 256) }
	ln := cuda.LaunchConfig{Grid: cuda.Dim3{X: uint32(B), Y: 1, Z: 1}, Block: cuda.Dim3{X: pow2Between(C, 32, maxBlock), Y: 1, Z: 1}}
	att := cuda.LaunchConfig{Grid: cuda.Dim3{X: uint32(B * H), Y: 1, Z: 1}, Block: cuda.Dim3{X: pow2Between(max(T, D), 32, maxBlock), Y: 1, Z: 1}, SharedBytes: uint32(4 * T)}
	stride := cuda.U64Arg(uint64(d.seqStride()))
	scale := cuda.F32Arg(float32(1 / math.Sqrt(float64(D))))

	// Attention: ln1 = layernorm(x); qkv = ln1·Wqkv + b; k, v into the
	// cache at pos; att = softmax(q·K/sqrt(D))·V per head; x1 = x +
	// att·Wo + b.
	b.add(cuda.LaunchNamed(ks, layerNorm, ln, r(st.ln1), r(st.x), w(ln1Gain), w(ln1Bias), i32(B), i32(C), cuda.F32Arg(eps)))
	b.add(cublas.SgemmCall(m.lib, st.ln1.Whole(), m.w[wQKV].Whole(), st.qkv.Whole(), B, 3*C, C))
	b.add(cuda.LaunchNamed(ks, bias, linear(3*B*C), r(st.qkv), w(bQKV), cuda.I64Arg(int64(3*B*C)), i32(3*C)))
	b.add(cuda.LaunchNamed(ks, kvWrite, linear(B*C), r(st.kc), r(st.vc), r(st.qkv), r(st.pos), i32(B), i32(T), i32(C), stride))
	b.add(cuda.LaunchNamed(ks, attention, att, r(st.att), r(st.qkv), r(st.kc), r(st.vc), r(st.pos), i32(B), i32(T), i32(H), i32(D), stride, scale))
	b.add(cublas.SgemmCall(m.lib, st.att.Whole(), m.w[wOut].Whole(), st.proj.Whole(), B, C, C))
	b.add(cuda.LaunchNamed(ks, biasResidual, linear(B*C), r(st.x1), r(st.x), r(st.proj), w(bOut), cuda.I64Arg(int64(B*C)), i32(C)))
	// MLP: x = x1 + gelu(layernorm(x1)·W1 + b1)·W2 + b2; then pos += 1.
	b.add(cuda.LaunchNamed(ks, layerNorm, ln, r(st.ln2), r(st.x1), w(ln2Gain), w(ln2Bias), i32(B), i32(C), cuda.F32Arg(eps)))
	b.add(cublas.SgemmCall(m.lib, st.ln2.Whole(), m.w[wUp].Whole(), st.up.Whole(), B, 4*C, C))
	b.add(cuda.LaunchNamed(ks, biasGELU, linear(4*B*C), r(st.up), w(bUp), cuda.I64Arg(int64(4*B*C)), i32(4*C)))
	b.add(cublas.SgemmCall(m.lib, st.up.Whole(), m.w[wDown].Whole(), st.down.Whole(), B, C, 4*C))
	b.add(cuda.LaunchNamed(ks, biasResidual, linear(B*C), r(st.x), r(st.x1), r(st.down), w(bDown), cuda.I64Arg(int64(B*C)), i32(C)))
	b.add(cuda.LaunchNamed(ks, advancePos, oneThread, r(st.pos)))
	return lanes.Batch{Entries: b.entries}, b.err
}
