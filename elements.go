package lanes

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/internal/half"
)

// The bytes of a buffer's elements, as the device holds them
// (little-endian), to Upload and from Read: EncodeF32 and DecodeF32 for
// F32, and the same for I32, F16 and BF16 (whose values are float32s in Go,
// rounded to the nearest representable half or bfloat16 on the way in).

// EncodeF32 is the bytes of F32 elements.
func EncodeF32(v []float32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return out
}

// DecodeF32 is the F32 elements of b, whose length must be a multiple of 4.
func DecodeF32(b []byte) ([]float32, error) {
	if err := whole("DecodeF32", b, 4); err != nil {
		return nil, err
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out, nil
}

// EncodeI32 is the bytes of I32 elements.
func EncodeI32(v []int32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(x))
	}
	return out
}

// DecodeI32 is the I32 elements of b, whose length must be a multiple of 4.
func DecodeI32(b []byte) ([]int32, error) {
	if err := whole("DecodeI32", b, 4); err != nil {
		return nil, err
	}
	out := make([]int32, len(b)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out, nil
}

// EncodeF16 is the bytes of F16 elements: each value rounded to the
// nearest half (IEEE 754 binary16, ties to even; beyond its range,
// infinity).
func EncodeF16(v []float32) []byte {
	out := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(out[2*i:], half.Float16Bits(x))
	}
	return out
}

// DecodeF16 is the F16 elements of b as float32s (exactly); b's length
// must be a multiple of 2.
func DecodeF16(b []byte) ([]float32, error) {
	if err := whole("DecodeF16", b, 2); err != nil {
		return nil, err
	}
	out := make([]float32, len(b)/2)
	for i := range out {
		out[i] = half.Float16From(binary.LittleEndian.Uint16(b[2*i:]))
	}
	return out, nil
}

// EncodeBF16 is the bytes of BF16 elements: each value rounded to the
// nearest bfloat16 (ties to even).
func EncodeBF16(v []float32) []byte {
	out := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(out[2*i:], half.BFloat16Bits(x))
	}
	return out
}

// DecodeBF16 is the BF16 elements of b as float32s (exactly); b's length
// must be a multiple of 2.
func DecodeBF16(b []byte) ([]float32, error) {
	if err := whole("DecodeBF16", b, 2); err != nil {
		return nil, err
	}
	out := make([]float32, len(b)/2)
	for i := range out {
		out[i] = half.BFloat16From(binary.LittleEndian.Uint16(b[2*i:]))
	}
	return out, nil
}

// whole refuses bytes that are not a whole number of elements.
func whole(op string, b []byte, size int) error {
	if len(b)%size != 0 {
		return &serverError{cause: fmt.Errorf("%w: %s: %d bytes is not a whole number of %d-byte elements; pass what Read returned for a region of such elements", actors.ErrInvalidArgument, op, len(b), size)}
	}
	return nil
}
