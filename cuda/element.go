// Element types of device buffers.

package cuda

import "fmt"

// ElementType is the element type of a buffer or a scalar kernel parameter.
// The zero value is invalid, so a forgotten type is caught at the boundary.
type ElementType uint8

// The element types a buffer or scalar may have.
const (
	Bool ElementType = iota + 1
	U8
	U32
	I8
	I32
	F16
	BF16
	F32
	// The 8-byte types: int64_t, long, ptrdiff_t; uint64_t, size_t; double.
	I64
	U64
	F64
)

var elementNames = [...]string{"invalid", "bool", "u8", "u32", "i8", "i32", "f16", "bf16", "f32", "i64", "u64", "f64"}
var elementSizes = [...]uint64{0, 1, 1, 4, 1, 4, 2, 2, 4, 8, 8, 8}

// Valid reports whether t is one of the defined element types.
func (t ElementType) Valid() bool { return t >= Bool && t <= F64 }

// Size is the size of one element in bytes; 0 for an invalid type.
func (t ElementType) Size() uint64 {
	if !t.Valid() {
		return 0
	}
	return elementSizes[t]
}

// String returns the lower-case name of the type ("f32").
func (t ElementType) String() string {
	if !t.Valid() {
		return fmt.Sprintf("invalid(%d)", uint8(t))
	}
	return elementNames[t]
}
