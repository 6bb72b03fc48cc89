// Device buffers and regions: what a command may name, and how regions are
// checked and compared.

package cuda

import "math/bits"

// DefaultAlignment is the alignment of an allocation whose spec leaves it
// zero: 256 bytes, what cuMemAlloc guarantees.
const DefaultAlignment = 256

// MaxAlignment is the largest alignment a buffer may ask for.
const MaxAlignment = 1 << 16

// BufferSpec describes an allocation. The zero Align means [DefaultAlignment].
type BufferSpec struct {
	Size  uint64      // bytes; a positive multiple of Elem.Size()
	Align uint64      // bytes; a power of two no smaller than Elem.Size(), at most MaxAlignment
	Elem  ElementType // the type of every element
}

// Normalize returns the spec with defaults applied and validates it.
func (s BufferSpec) Normalize() (BufferSpec, error) {
	const op = "alloc"
	if !s.Elem.Valid() {
		return s, contractf(op, ErrElementType, "buffer element type %v is not defined; set Elem to one of cuda.Bool … cuda.F64", s.Elem)
	}
	if s.Size == 0 {
		return s, contractf(op, ErrEmptyRegion, "buffer size is 0; ask for at least one %v element (%d bytes)", s.Elem, s.Elem.Size())
	}
	if s.Size%s.Elem.Size() != 0 {
		return s, contractf(op, ErrAlignment, "buffer size %d is not a multiple of the %v element size %d", s.Size, s.Elem, s.Elem.Size())
	}
	if s.Align == 0 {
		s.Align = DefaultAlignment
	}
	if bits.OnesCount64(s.Align) != 1 || s.Align < s.Elem.Size() || s.Align > MaxAlignment {
		return s, contractf(op, ErrAlignment, "alignment %d must be a power of two between the element size %d and %d", s.Align, s.Elem.Size(), MaxAlignment)
	}
	return s, nil
}

// Buffer names one allocation on one device instance. It is a plain value:
// copying it copies the name, not the memory. Only the device that returned it
// accepts it, and only until it is freed.
type Buffer struct {
	Device uint64      // instance id of the owning device
	ID     uint64      // id of the allocation, unique within the device instance
	Size   uint64      // bytes
	Align  uint64      // bytes
	Elem   ElementType // element type
	Addr   uint64      // device address of byte 0; aligned to Align
}

// Region returns the byte range [offset, offset+length) of b, checked: the
// range must be non-empty, inside the buffer, and start and end on element
// boundaries.
func (b Buffer) Region(offset, length uint64) (Region, error) {
	r := Region{Buffer: b, Offset: offset, Length: length}
	return r, r.Validate()
}

// Whole returns the region that spans all of b.
func (b Buffer) Whole() Region { return Region{Buffer: b, Length: b.Size} }

// Region is a byte range of a buffer. Commands read and write regions, never
// whole allocations, so the replay key of a command binds exactly the bytes it
// touches.
type Region struct {
	Buffer Buffer
	Offset uint64
	Length uint64
}

// Validate checks the region against its buffer.
func (r Region) Validate() error {
	const op = "region"
	b := r.Buffer
	if !b.Elem.Valid() || b.Size == 0 || b.ID == 0 {
		return contractf(op, ErrStaleHandle, "region names no allocated buffer (id %d); take regions from a Buffer the device returned", b.ID)
	}
	if r.Length == 0 {
		return contractf(op, ErrEmptyRegion, "region of buffer %d at offset %d is empty; give it a positive length", b.ID, r.Offset)
	}
	end, carry := bits.Add64(r.Offset, r.Length, 0)
	if carry != 0 || end > b.Size {
		return contractf(op, ErrOutOfBounds, "region [%d, %d+%d) is outside buffer %d of %d bytes; keep offset+length <= %d",
			r.Offset, r.Offset, r.Length, b.ID, b.Size, b.Size)
	}
	size := b.Elem.Size()
	if r.Offset%size != 0 || r.Length%size != 0 {
		return contractf(op, ErrAlignment, "region [%d, +%d) of %v buffer %d does not start and end on %d-byte element boundaries",
			r.Offset, r.Length, b.Elem, b.ID, size)
	}
	return nil
}

// Elements is the number of elements in the region.
func (r Region) Elements() uint64 {
	if s := r.Buffer.Elem.Size(); s != 0 {
		return r.Length / s
	}
	return 0
}

// Addr is the device address of the region's first byte.
func (r Region) Addr() uint64 { return r.Buffer.Addr + r.Offset }

// End is the offset one past the region's last byte.
func (r Region) End() uint64 { return r.Offset + r.Length }

// Overlaps reports whether two regions share a byte of the same buffer.
func (r Region) Overlaps(o Region) bool {
	return r.Buffer.Device == o.Buffer.Device && r.Buffer.ID == o.Buffer.ID &&
		r.Offset < o.End() && o.Offset < r.End()
}

// MemoryStats is a device's memory accounting.
type MemoryStats struct {
	Total       uint64 // bytes the device offers
	InUse       uint64 // bytes allocated now
	Peak        uint64 // most bytes ever allocated at once
	Allocations uint64 // live allocations
}

// Free is the number of bytes still allocatable.
func (m MemoryStats) Free() uint64 {
	if m.InUse > m.Total {
		return 0
	}
	return m.Total - m.InUse
}
