// Package hostio is the examples' host side of float32 data in device
// memory: decoding and writing it in place (a kernel's reference, a
// library call's), and reading a buffer back on a stream of the caller's
// own. An upload's bytes come from lanes.EncodeF32.
package hostio

import (
	"encoding/binary"
	"math"

	"github.com/lanesched/lanes/cuda"
)

// F32s decodes little-endian float32s.
func F32s(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// Put encodes v into b (at least 4*len(v) bytes).
func Put(b []byte, v []float32) {
	for i, f := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
	}
}

// Readback copies a float32 buffer to the host on a stream of this
// goroutine's own (bound to the device while it runs), once the work
// that wrote it has ended.
func Readback(dev cuda.Device, b cuda.Buffer) ([]float32, error) {
	unbind, err := dev.BindThread()
	if err != nil {
		return nil, err
	}
	defer unbind()
	st, err := dev.NewStream()
	if err != nil {
		return nil, err
	}
	defer st.Destroy()
	out := make([]byte, b.Size)
	if err := st.Readback(b.Whole(), out); err != nil {
		return nil, err
	}
	return F32s(out), nil
}
