// The example's own kernels (transformer.cu) as a lanes module: each one's
// parameters as the .cu declares them, its extent check, its launch-shape
// rule, and the Go reference the simulated device runs in its place.

package main

import (
	_ "embed"
	"encoding/binary"
	"math"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
)

//go:embed transformer.ptx
var transformerPTX []byte

// The kernels of transformer.cu.
const (
	layerNorm    = "layernorm_f32"
	bias         = "bias_f32"
	biasGELU     = "bias_gelu_f32"
	biasResidual = "bias_residual_f32"
	kvWrite      = "kv_write_f32"
	attention    = "attention_f32"
	advancePos   = "advance_pos_i32"
)

// maxBlock is the largest block of the kernels that reduce over their
// block (MAX_BLOCK in transformer.cu: their partial[] arrays).
const maxBlock = 256

// module is transformer.cu as a lanes module.
func module() kernels.Module {
	reg := kernels.Registry{}
	for _, k := range []*kernels.Kernel{layerNormKernel(), biasKernel(bias), biasKernel(biasGELU), biasResidualKernel(), kvWriteKernel(), attentionKernel(), advancePosKernel()} {
		reg[k.Spec.Name] = k
	}
	return kernels.Module{Name: "transformer", Image: transformerPTX, Kernels: reg}
}

// f32buf declares a float buffer parameter.
func f32buf(name string, a cuda.Access) cuda.Param {
	return cuda.Param{Name: name, Kind: cuda.ParamBuffer, Elem: cuda.F32, Access: a}
}

// scalar declares a scalar parameter.
func scalar(name string, e cuda.ElementType) cuda.Param {
	return cuda.Param{Name: name, Kind: cuda.ParamScalar, Elem: e}
}

// posBuf declares the read-only position counter (one int in device memory).
var posBuf = cuda.Param{Name: "pos", Kind: cuda.ParamBuffer, Elem: cuda.I32, Access: cuda.AccessRead}

// fits refuses a launch of kernel whose region r is shorter than need
// bytes (the region is the argument's, named what).
func fits(kernel, what string, r cuda.Region, need uint64) error {
	if r.Length < need {
		return cuda.Contractf("launch", cuda.ErrOutOfBounds, "%s: %s needs %d bytes; its region has %d", kernel, what, need, r.Length)
	}
	return nil
}

// positive refuses a launch of kernel whose count named what is below 1.
func positive(kernel, what string, v int64) error {
	if v < 1 {
		return cuda.Contractf("launch", cuda.ErrOutOfBounds, "%s: %s is %d; it must be at least 1", kernel, what, v)
	}
	return nil
}

// firstErr is the first non-nil error of errs.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// refuseShape is a launch-shape refusal of kernel.
func refuseShape(kernel, format string, args ...any) error {
	return cuda.Contractf("launch", cuda.ErrLaunchConfig, "%s: "+format, append([]any{kernel}, args...)...)
}

// pow2Block reports whether block is {n, 1, 1}, n a power of two up to
// maxBlock: what the block-wide tree reductions need.
func pow2Block(block cuda.Dim3) bool {
	return block.X <= maxBlock && block.X&(block.X-1) == 0 && block.Y == 1 && block.Z == 1
}

// oneDim is the shape rule of the grid-stride kernels: they index by x
// alone, so a launch with y or z extent would run every element's update
// more than once (an in-place bias added twice).
func oneDim(kernel string) func(cuda.LaunchConfig, []cuda.Arg) error {
	return func(cfg cuda.LaunchConfig, _ []cuda.Arg) error {
		if cfg.Grid.Y != 1 || cfg.Grid.Z != 1 || cfg.Block.Y != 1 || cfg.Block.Z != 1 {
			return refuseShape(kernel, "grid %v, block %v: it loops over x alone; launch {n, 1, 1} blocks of {m, 1, 1}", cfg.Grid, cfg.Block)
		}
		return nil
	}
}

// layerNormKernel: layernorm_f32(float *y, const float *x, const float *g,
// const float *b, int rows, int cols, float eps).
func layerNormKernel() *kernels.Kernel {
	return &kernels.Kernel{
		Spec: cuda.KernelSpec{Name: layerNorm,
			Params: []cuda.Param{f32buf("y", cuda.AccessWrite), f32buf("x", cuda.AccessRead), f32buf("g", cuda.AccessRead), f32buf("b", cuda.AccessRead),
				scalar("rows", cuda.I32), scalar("cols", cuda.I32), scalar("eps", cuda.F32)},
			Check: func(a []cuda.Arg) error {
				rows, cols := int64(a[4].I32()), int64(a[5].I32())
				if err := firstErr(positive(layerNorm, "rows", rows), positive(layerNorm, "cols", cols)); err != nil {
					return err
				}
				n := uint64(4 * rows * cols)
				return firstErr(fits(layerNorm, "y", a[0].Region, n), fits(layerNorm, "x", a[1].Region, n),
					fits(layerNorm, "g", a[2].Region, uint64(4*cols)), fits(layerNorm, "b", a[3].Region, uint64(4*cols)))
			},
			// One block per row, exactly (the reference reads its block
			// size off the launch as threads over rows), each reducing
			// over a power-of-two block.
			Shape: func(cfg cuda.LaunchConfig, a []cuda.Arg) error {
				rows, g, b := uint32(a[4].I32()), cfg.Grid, cfg.Block
				switch {
				case g.X != rows || g.Y != 1 || g.Z != 1:
					return refuseShape(layerNorm, "grid %v for %d rows; launch one block per row (grid {%d, 1, 1})", g, rows, rows)
				case !pow2Block(b):
					return refuseShape(layerNorm, "block %v; its reduction needs {n, 1, 1}, n a power of two up to %d", b, maxBlock)
				}
				return nil
			}},
		Body: func(sh kernels.Shape, m []kernels.Memory, a []cuda.Arg) error {
			rows := int(a[4].I32())
			layerNormRef(m[0], m[1], m[2], m[3], rows, int(a[5].I32()), int(sh.Config.Block.X), a[6].F32())
			return nil
		},
	}
}

// biasKernel: bias_f32 or bias_gelu_f32 (float *y, const float *b, long
// long n, int cols).
func biasKernel(name string) *kernels.Kernel {
	gelu := name == biasGELU
	return &kernels.Kernel{
		Spec: cuda.KernelSpec{Name: name,
			Params: []cuda.Param{f32buf("y", cuda.AccessReadWrite), f32buf("b", cuda.AccessRead), scalar("n", cuda.I64), scalar("cols", cuda.I32)},
			Check: func(a []cuda.Arg) error {
				n, cols := a[2].I64(), int64(a[3].I32())
				if err := firstErr(positive(name, "n", n), positive(name, "cols", cols)); err != nil {
					return err
				}
				return firstErr(fits(name, "y", a[0].Region, 4*uint64(n)), fits(name, "b", a[1].Region, 4*uint64(cols)))
			},
			Shape: oneDim(name)},
		Body: func(_ kernels.Shape, m []kernels.Memory, a []cuda.Arg) error {
			y, b, cols := m[0], m[1], a[3].I32()
			for i := range a[2].I64() {
				v := ld(y, int(i)) + ld(b, int(i%int64(cols)))
				if gelu {
					v = geluF32(v)
				}
				st(y, int(i), v)
			}
			return nil
		},
	}
}

// biasResidualKernel: bias_residual_f32(float *out, const float *res,
// const float *y, const float *b, long long n, int cols).
func biasResidualKernel() *kernels.Kernel {
	return &kernels.Kernel{
		Spec: cuda.KernelSpec{Name: biasResidual,
			Params: []cuda.Param{f32buf("out", cuda.AccessWrite), f32buf("res", cuda.AccessRead), f32buf("y", cuda.AccessRead), f32buf("b", cuda.AccessRead),
				scalar("n", cuda.I64), scalar("cols", cuda.I32)},
			Check: func(a []cuda.Arg) error {
				n, cols := a[4].I64(), int64(a[5].I32())
				if err := firstErr(positive(biasResidual, "n", n), positive(biasResidual, "cols", cols)); err != nil {
					return err
				}
				return firstErr(fits(biasResidual, "out", a[0].Region, 4*uint64(n)), fits(biasResidual, "res", a[1].Region, 4*uint64(n)),
					fits(biasResidual, "y", a[2].Region, 4*uint64(n)), fits(biasResidual, "b", a[3].Region, 4*uint64(cols)))
			},
			Shape: oneDim(biasResidual)},
		Body: func(_ kernels.Shape, m []kernels.Memory, a []cuda.Arg) error {
			cols := a[5].I32()
			for i := range a[4].I64() {
				j := int(i)
				st(m[0], j, ld(m[1], j)+(ld(m[2], j)+ld(m[3], int(i%int64(cols)))))
			}
			return nil
		},
	}
}

// cacheExtent checks the KV-cache arguments shared by kv_write_f32 and
// attention_f32: batch sequences of ctx positions of channels floats,
// seqStride elements apart (at least one sequence's worth, so that
// sequences do not overlap). It returns the bytes each cache must hold.
func cacheExtent(kernel string, batch, ctx, channels int64, seqStride uint64) (uint64, error) {
	if err := firstErr(positive(kernel, "batch", batch), positive(kernel, "ctx", ctx), positive(kernel, "channels", channels)); err != nil {
		return 0, err
	}
	per := uint64(ctx * channels)
	if seqStride < per || seqStride > math.MaxInt64/4/uint64(batch) {
		return 0, cuda.Contractf("launch", cuda.ErrOutOfBounds, "%s: seq_stride %d for sequences of %d positions of %d floats; it must be at least %d and small enough to address", kernel, seqStride, ctx, channels, per)
	}
	return 4 * (uint64(batch-1)*seqStride + per), nil
}

// kvWriteKernel: kv_write_f32(float *kcache, float *vcache, const float
// *qkv, const int *pos, int batch, int ctx, int channels, size_t
// seq_stride).
func kvWriteKernel() *kernels.Kernel {
	return &kernels.Kernel{
		Spec: cuda.KernelSpec{Name: kvWrite,
			Params: []cuda.Param{f32buf("kcache", cuda.AccessReadWrite), f32buf("vcache", cuda.AccessReadWrite), f32buf("qkv", cuda.AccessRead), posBuf,
				scalar("batch", cuda.I32), scalar("ctx", cuda.I32), scalar("channels", cuda.I32), scalar("seq_stride", cuda.U64)},
			Check: func(a []cuda.Arg) error {
				batch, channels := int64(a[4].I32()), int64(a[6].I32())
				need, err := cacheExtent(kvWrite, batch, int64(a[5].I32()), channels, a[7].U64())
				if err != nil {
					return err
				}
				return firstErr(fits(kvWrite, "kcache", a[0].Region, need), fits(kvWrite, "vcache", a[1].Region, need),
					fits(kvWrite, "qkv", a[2].Region, uint64(4*batch*3*channels)), fits(kvWrite, "pos", a[3].Region, 4))
			},
			Shape: oneDim(kvWrite)},
		Body: func(_ kernels.Shape, m []kernels.Memory, a []cuda.Arg) error {
			kvWriteRef(m[0], m[1], m[2], int(ldI32(m[3], 0)), int(a[4].I32()), int(a[5].I32()), int(a[6].I32()), int(a[7].U64()))
			return nil
		},
	}
}

// attentionKernel: attention_f32(float *out, const float *qkv, const float
// *kcache, const float *vcache, const int *pos, int batch, int ctx, int
// heads, int head_dim, size_t seq_stride, float scale).
func attentionKernel() *kernels.Kernel {
	return &kernels.Kernel{
		Spec: cuda.KernelSpec{Name: attention,
			Params: []cuda.Param{f32buf("out", cuda.AccessWrite), f32buf("qkv", cuda.AccessRead), f32buf("kcache", cuda.AccessRead), f32buf("vcache", cuda.AccessRead), posBuf,
				scalar("batch", cuda.I32), scalar("ctx", cuda.I32), scalar("heads", cuda.I32), scalar("head_dim", cuda.I32),
				scalar("seq_stride", cuda.U64), scalar("scale", cuda.F32)},
			Check: func(a []cuda.Arg) error {
				batch, heads, hd := int64(a[5].I32()), int64(a[7].I32()), int64(a[8].I32())
				if err := firstErr(positive(attention, "heads", heads), positive(attention, "head_dim", hd)); err != nil {
					return err
				}
				channels := heads * hd
				need, err := cacheExtent(attention, batch, int64(a[6].I32()), channels, a[9].U64())
				if err != nil {
					return err
				}
				return firstErr(fits(attention, "out", a[0].Region, uint64(4*batch*channels)), fits(attention, "qkv", a[1].Region, uint64(4*batch*3*channels)),
					fits(attention, "kcache", a[2].Region, need), fits(attention, "vcache", a[3].Region, need), fits(attention, "pos", a[4].Region, 4))
			},
			// One block per (sequence, head), exactly, from blockIdx.x;
			// a power-of-two block for the softmax's reductions; and the
			// scores of every position in dynamic shared memory, which a
			// GPU would overrun unchecked.
			Shape: func(cfg cuda.LaunchConfig, a []cuda.Arg) error {
				blocks, ctx := uint64(a[5].I32())*uint64(a[7].I32()), uint64(a[6].I32())
				g, b := cfg.Grid, cfg.Block
				switch {
				case uint64(g.X) != blocks || g.Y != 1 || g.Z != 1:
					return refuseShape(attention, "grid %v; launch one block per sequence and head (grid {%d, 1, 1})", g, blocks)
				case !pow2Block(b):
					return refuseShape(attention, "block %v; its softmax reduces over {n, 1, 1}, n a power of two up to %d", b, maxBlock)
				case uint64(cfg.SharedBytes) < 4*ctx:
					return refuseShape(attention, "%d bytes of dynamic shared memory; its scores need %d (4 per position of a context of %d)", cfg.SharedBytes, 4*ctx, ctx)
				}
				return nil
			}},
		Body: func(sh kernels.Shape, m []kernels.Memory, a []cuda.Arg) error {
			batch, heads := int(a[5].I32()), int(a[7].I32())
			attentionRef(m[0], m[1], m[2], m[3], int(ldI32(m[4], 0)), batch, int(a[6].I32()), heads, int(a[8].I32()),
				int(a[9].U64()), a[10].F32(), int(sh.Config.Block.X))
			return nil
		},
	}
}

// advancePosKernel: advance_pos_i32(int *pos).
func advancePosKernel() *kernels.Kernel {
	return &kernels.Kernel{
		Spec: cuda.KernelSpec{Name: advancePos,
			Params: []cuda.Param{{Name: "pos", Kind: cuda.ParamBuffer, Elem: cuda.I32, Access: cuda.AccessReadWrite}},
			Check:  func(a []cuda.Arg) error { return fits(advancePos, "pos", a[0].Region, 4) },
			// The counter is one int: a launch of one thread says so.
			Shape: func(cfg cuda.LaunchConfig, _ []cuda.Arg) error {
				if cfg.Grid.Count() != 1 || cfg.Block.Count() != 1 {
					return refuseShape(advancePos, "grid %v, block %v; launch one thread", cfg.Grid, cfg.Block)
				}
				return nil
			}},
		Body: func(_ kernels.Shape, m []kernels.Memory, _ []cuda.Arg) error {
			binary.LittleEndian.PutUint32(m[0], uint32(ldI32(m[0], 0)+1))
			return nil
		},
	}
}

// blockReduce is a block's tree reduction over its partial values, as
// block_sum and block_max in transformer.cu run it: len(p) a power of two.
func blockReduce(p []float32, op func(a, b float32) float32) float32 {
	for s := len(p) / 2; s > 0; s >>= 1 {
		for i := range s {
			p[i] = op(p[i], p[i+s])
		}
	}
	return p[0]
}

// add is block_sum's operation.
func add(a, b float32) float32 { return a + b }

// fmax is block_max's operation (fmaxf, for numbers).
func fmax(a, b float32) float32 { return max(a, b) }

// sqrtF32 is sqrtf, correctly rounded (CUDA's default, -prec-sqrt=true).
func sqrtF32(v float32) float32 { return float32(math.Sqrt(float64(v))) }

// layerNormRef is layernorm_f32 with block threads per row: each thread
// sums its strided columns, the block reduces them as a tree. The explicit
// float32 conversions round each product on its own (no fused
// multiply-add, as -fmad=false compiles the kernel).
func layerNormRef(y, x, g, b kernels.Memory, rows, cols, block int, eps float32) {
	partial := make([]float32, block)
	for r := range rows {
		row := r * cols
		for t := range partial {
			var acc float32
			for c := t; c < cols; c += block {
				acc += ld(x, row+c)
			}
			partial[t] = acc
		}
		mean := blockReduce(partial, add) / float32(cols)
		for t := range partial {
			var acc float32
			for c := t; c < cols; c += block {
				d := ld(x, row+c) - mean
				acc += float32(d * d)
			}
			partial[t] = acc
		}
		inv := 1 / sqrtF32(blockReduce(partial, add)/float32(cols)+eps)
		for c := range cols {
			st(y, row+c, float32((ld(x, row+c)-mean)*inv*ld(g, c))+ld(b, c))
		}
	}
}

// geluF32 is GPT-2's GELU as bias_gelu_f32 computes it (tanhf here is
// math.Tanh rounded; CUDA's differs from it in the last bit at times).
func geluF32(v float32) float32 {
	inner := float32(0.7978845608) * (v + float32(0.044715*v*v*v))
	return 0.5 * v * (1 + float32(math.Tanh(float64(inner))))
}

// kvWriteRef is kv_write_f32.
func kvWriteRef(kc, vc, qkv kernels.Memory, pos, batch, ctx, channels, seqStride int) {
	if pos < 0 || pos >= ctx {
		return
	}
	for s := range batch {
		row := s * 3 * channels
		for c := range channels {
			at := s*seqStride + pos*channels + c
			st(kc, at, ld(qkv, row+channels+c))
			st(vc, at, ld(qkv, row+2*channels+c))
		}
	}
}

// attentionRef is attention_f32 with block threads per (sequence, head):
// thread t scores positions t, t+block, ...; the maximum and the sum of
// the exponentials are reduced over the block as a tree; each output
// element sums over the positions in order.
func attentionRef(out, qkv, kc, vc kernels.Memory, pos, batch, ctx, heads, hd, seqStride int, scale float32, block int) {
	channels := heads * hd
	n := min(max(pos+1, 1), ctx)
	scores, partial := make([]float32, n), make([]float32, block)
	for blk := range batch * heads {
		s, h := blk/heads, blk%heads
		q, kb, vb := s*3*channels+h*hd, s*seqStride+h*hd, s*seqStride+h*hd
		for t := range partial {
			m := float32(math.Inf(-1))
			for p := t; p < n; p += block {
				var dot float32
				for d := range hd {
					dot += float32(ld(qkv, q+d) * ld(kc, kb+p*channels+d))
				}
				dot *= scale
				scores[p] = dot
				m = max(m, dot)
			}
			partial[t] = m
		}
		m := blockReduce(partial, fmax)
		for t := range partial {
			var sum float32
			for p := t; p < n; p += block {
				e := float32(math.Exp(float64(scores[p] - m)))
				scores[p] = e
				sum += e
			}
			partial[t] = sum
		}
		total := blockReduce(partial, add)
		for d := range hd {
			var acc float32
			for p := range n {
				acc += float32(scores[p] * ld(vc, vb+p*channels+d))
			}
			st(out, s*channels+h*hd+d, acc/total)
		}
	}
}

// ld reads float i of m.
func ld(m kernels.Memory, i int) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(m[4*i:]))
}

// st writes float i of m.
func st(m kernels.Memory, i int, v float32) {
	binary.LittleEndian.PutUint32(m[4*i:], math.Float32bits(v))
}

// ldI32 reads int i of m.
func ldI32(m kernels.Memory, i int) int32 { return int32(binary.LittleEndian.Uint32(m[4*i:])) }
