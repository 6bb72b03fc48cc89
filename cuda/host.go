// Pinned host buffers and regions, and the staging commands that move them.

package cuda

import "math/bits"

// HostBuffer names pinned host memory of one device instance
// (cuMemAllocHost on the GPU): staging that copy commands read or write
// when they execute, so a captured graph sees the bytes written there
// before each replay. Like a Buffer it is a plain value, checked by the
// device that allocated it.
type HostBuffer struct {
	Device uint64
	ID     uint64
	Size   uint64
}

// HostRegion is a byte range of a host buffer.
type HostRegion struct {
	Buffer HostBuffer
	Offset uint64
	Length uint64
}

// Region returns [offset, offset+length) of h, checked.
func (h HostBuffer) Region(offset, length uint64) (HostRegion, error) {
	r := HostRegion{Buffer: h, Offset: offset, Length: length}
	return r, r.Validate()
}

// Whole is the region spanning all of h.
func (h HostBuffer) Whole() HostRegion { return HostRegion{Buffer: h, Length: h.Size} }

// Validate checks the region against its buffer.
func (r HostRegion) Validate() error {
	const op = "host region"
	if r.Buffer.ID == 0 || r.Buffer.Size == 0 {
		return contractf(op, ErrStaleHandle, "host region names no allocated host buffer; take it from a HostBuffer the device returned")
	}
	if r.Length == 0 {
		return contractf(op, ErrEmptyRegion, "host region of buffer %d at offset %d is empty", r.Buffer.ID, r.Offset)
	}
	end, carry := bits.Add64(r.Offset, r.Length, 0)
	if carry != 0 || end > r.Buffer.Size {
		return contractf(op, ErrOutOfBounds, "host region [%d, +%d) is outside host buffer %d of %d bytes", r.Offset, r.Length, r.Buffer.ID, r.Buffer.Size)
	}
	return nil
}

// End is one past the region's last byte.
func (r HostRegion) End() uint64 { return r.Offset + r.Length }

// HostMemory is the pinned host staging a device offers: part of every
// [Device] (both backends implement it).
type HostMemory interface {
	// AllocHost allocates pinned host memory, zeroed.
	AllocHost(size uint64) (HostBuffer, error)
	// FreeHost releases it; work that still reads it must have finished.
	FreeHost(h HostBuffer) error
	// CheckHost reports whether h is live pinned host memory of this
	// device instance, exactly as AllocHost returned it: nil, or a contract error wrapping
	// ErrForeignHandle or ErrStaleHandle.
	CheckHost(h HostBuffer) error
	// WriteHost copies src into the staging now, on the host. No command
	// that reads the region may be in flight.
	WriteHost(dst HostRegion, src []byte) error
	// ReadHost copies the staging into dst now, on the host. Commands that
	// write the region must have finished.
	ReadHost(src HostRegion, dst []byte) error
}

// StageIn copies a host staging region into device memory when it runs
// (a host-to-device memcpy node in a graph, reading the staging at every
// replay).
func StageIn(dst Region, src HostRegion) (Command, error) {
	c := Command{Kind: KindStageIn, Dst: dst, Staging: src}
	return c, c.Validate()
}

// StageOut copies device memory into a host staging region when it runs.
func StageOut(dst HostRegion, src Region) (Command, error) {
	c := Command{Kind: KindStageOut, Src: src, Staging: dst}
	return c, c.Validate()
}
