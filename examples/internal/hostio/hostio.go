// Package hostio is the examples' host side of float32 data in device
// memory: decoding and writing it in place (a kernel's reference, a
// library call's), and reading a buffer back through the scheduler.
// An upload's bytes come from lanes.EncodeF32.
package hostio

import (
	"context"
	"encoding/binary"
	"math"

	"github.com/lanesched/lanes/actors"
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

// Readback reads a float32 buffer back through the scheduler, as the
// tenant's (its own buffer or a shared one), after every submission of
// the tenant accepted before it.
func Readback(ctx context.Context, s *actors.Scheduler, tenant string, b cuda.Buffer) ([]float32, error) {
	out, err := s.Read(ctx, tenant, b.Whole())
	if err != nil {
		return nil, err
	}
	return F32s(out), nil
}
