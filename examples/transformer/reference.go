// The model on the host: its sizes, its weights (made deterministically),
// and the whole block's decode steps in float64, the reference every
// tenant's result is checked against.

package main

import (
	"math"
	"math/rand"
)

// eps is the layernorms' epsilon (GPT-2's).
const eps = 1e-5

// The weights of the block, in the order they are made and uploaded.
const (
	ln1Gain = iota
	ln1Bias
	wQKV // C×3C
	bQKV // 3C
	wOut // C×C
	bOut // C
	ln2Gain
	ln2Bias
	wUp   // C×4C
	bUp   // 4C
	wDown // 4C×C
	bDown // C
	numWeights
)

// weights are the block's parameters on the host.
type weights [numWeights][]float32

// newWeights makes the block's weights from seed: gains near 1, small
// biases, and matrices uniform in ±1/sqrt(fan-in), so activations stay
// near unit scale step after step.
func newWeights(d dims) *weights {
	rng := rand.New(rand.NewSource(d.seed))
	c := d.channels
	uniform := func(n int, center, spread float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(center + spread*(2*rng.Float64()-1))
		}
		return v
	}
	var w weights
	for i, shape := range [numWeights][2]int{{1, c}, {1, c}, {c, 3 * c}, {1, 3 * c}, {c, c}, {1, c}, {1, c}, {1, c}, {c, 4 * c}, {1, 4 * c}, {4 * c, c}, {1, c}} {
		switch i {
		case ln1Gain, ln2Gain:
			w[i] = uniform(shape[1], 1, 0.1)
		case wQKV, wOut, wUp, wDown:
			w[i] = uniform(shape[0]*shape[1], 0, 1/math.Sqrt(float64(shape[0])))
		default:
			w[i] = uniform(shape[1], 0, 0.05)
		}
	}
	return &w
}

// newInput is a tenant's first x (B×C), from its own seed.
func newInput(d dims, seed int64) []float32 {
	rng := rand.New(rand.NewSource(seed))
	x := make([]float32, d.batch*d.channels)
	for i := range x {
		x[i] = rng.Float32()*2 - 1
	}
	return x
}

// decodeRef runs steps decode steps of the block from x0, in float64, and
// returns x after the last: what each tenant's x must hold then.
func decodeRef(d dims, w *weights, x0 []float32, steps int) []float64 {
	c, b, hd := d.channels, d.batch, d.headDim()
	wf := func(i int) []float64 {
		out := make([]float64, len(w[i]))
		for j, v := range w[i] {
			out[j] = float64(v)
		}
		return out
	}
	var w64 [numWeights][]float64
	for i := range w64 {
		w64[i] = wf(i)
	}
	x := make([]float64, len(x0))
	for i, v := range x0 {
		x[i] = float64(v)
	}
	kc, vc := make([]float64, b*d.ctx*c), make([]float64, b*d.ctx*c)
	scale := 1 / math.Sqrt(float64(hd))
	for pos := range steps {
		qkv := affine(layerNorm64(x, w64[ln1Gain], w64[ln1Bias], b, c), w64[wQKV], w64[bQKV], b, c, 3*c)
		for s := range b {
			copy(kc[(s*d.ctx+pos)*c:][:c], qkv[s*3*c+c:])
			copy(vc[(s*d.ctx+pos)*c:][:c], qkv[s*3*c+2*c:])
		}
		att := make([]float64, b*c)
		scores := make([]float64, pos+1)
		for s := range b {
			for h := range d.heads {
				q := qkv[s*3*c+h*hd:][:hd]
				top := math.Inf(-1)
				for t := range scores {
					k := kc[(s*d.ctx+t)*c+h*hd:][:hd]
					var dot float64
					for i := range hd {
						dot += q[i] * k[i]
					}
					scores[t] = dot * scale
					top = max(top, scores[t])
				}
				var sum float64
				for t := range scores {
					scores[t] = math.Exp(scores[t] - top)
					sum += scores[t]
				}
				for i := range hd {
					var acc float64
					for t := range scores {
						acc += scores[t] * vc[(s*d.ctx+t)*c+h*hd+i]
					}
					att[s*c+h*hd+i] = acc / sum
				}
			}
		}
		x1 := add64(x, affine(att, w64[wOut], w64[bOut], b, c, c))
		up := affine(layerNorm64(x1, w64[ln2Gain], w64[ln2Bias], b, c), w64[wUp], w64[bUp], b, c, 4*c)
		for i, v := range up {
			up[i] = 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
		}
		x = add64(x1, affine(up, w64[wDown], w64[bDown], b, 4*c, c))
	}
	return x
}

// layerNorm64 normalizes each of rows rows of cols, then scales by g and
// shifts by b.
func layerNorm64(x, g, b []float64, rows, cols int) []float64 {
	y := make([]float64, len(x))
	for r := range rows {
		row := x[r*cols:][:cols]
		var mean, variance float64
		for _, v := range row {
			mean += v
		}
		mean /= float64(cols)
		for _, v := range row {
			variance += (v - mean) * (v - mean)
		}
		inv := 1 / math.Sqrt(variance/float64(cols)+eps)
		for i, v := range row {
			y[r*cols+i] = (v-mean)*inv*g[i] + b[i]
		}
	}
	return y
}

// affine is x(rows×k)·w(k×n) + bias, row-major: each output starts at
// its bias and adds the products over k in order, a row of w at a time.
func affine(x, w, bias []float64, rows, k, n int) []float64 {
	y := make([]float64, rows*n)
	for r := range rows {
		out := y[r*n:][:n]
		copy(out, bias)
		for p, xv := range x[r*k:][:k] {
			for j, wv := range w[p*n:][:n] {
				out[j] += xv * wv
			}
		}
	}
	return y
}

// add64 is a + b, element-wise.
func add64(a, b []float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = a[i] + b[i]
	}
	return out
}

// normwise is the error of got against want: the largest difference over
// the largest reference value.
func normwise(got []float32, want []float64) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var diff, scale float64
	for i, w := range want {
		diff = max(diff, math.Abs(float64(got[i])-w))
		scale = max(scale, math.Abs(w))
	}
	if math.IsNaN(diff) {
		return math.Inf(1)
	}
	return diff / max(scale, 1e-30)
}
