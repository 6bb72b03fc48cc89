// Commands, buffers and regions on the wire.

package wire

import (
	"bytes"
	"math"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/wirepb"
)

func commandToWire(c cuda.Command) *wirepb.Command {
	w := &wirepb.Command{Kind: uint32(c.Kind), Kernel: c.Kernel, SharedBytes: c.Config.SharedBytes,
		Grid:  &wirepb.Dim3{X: c.Config.Grid.X, Y: c.Config.Grid.Y, Z: c.Config.Grid.Z},
		Block: &wirepb.Dim3{X: c.Config.Block.X, Y: c.Config.Block.Y, Z: c.Config.Block.Z},
		Dst:   RegionToWire(c.Dst), Src: RegionToWire(c.Src), Host: c.Host,
		Staging: &wirepb.HostRegion{Device: c.Staging.Buffer.Device, Id: c.Staging.Buffer.ID, Size: c.Staging.Buffer.Size,
			Offset: c.Staging.Offset, Length: c.Staging.Length}}
	for _, a := range c.Args {
		w.Args = append(w.Args, &wirepb.Arg{Kind: uint32(a.Kind), Region: RegionToWire(a.Region), Elem: uint32(a.Elem), Bits: a.Bits, Value: []byte(a.Struct)})
	}
	if c.Kind == cuda.KindCall && c.LibraryCall != nil {
		w.Call = callToWire(c.LibraryCall)
	}
	return w
}

func commandFromWire(w *wirepb.Command, d Decoding) (cuda.Command, error) {
	switch {
	case w.Kind == 0 || w.Kind > uint32(cuda.KindCall),
		cuda.CommandKind(w.Kind) == cuda.KindStageIn, cuda.CommandKind(w.Kind) == cuda.KindStageOut:
		return cuda.Command{}, WireErr("command kind %d has no wire form", w.Kind) // no front sends one (batchToWire refuses it)
	case len(w.Kernel) > cuda.MaxKernelName:
		return cuda.Command{}, WireErr("kernel name of %d bytes; at most %d", len(w.Kernel), cuda.MaxKernelName)
	case len(w.Args) > cuda.MaxArgs:
		return cuda.Command{}, WireErr("%d arguments; at most %d", len(w.Args), cuda.MaxArgs)
	case len(w.Host) > MaxHostBytes:
		return cuda.Command{}, WireErr("%d upload bytes; at most %d in one command", len(w.Host), MaxHostBytes)
	}
	if cuda.CommandKind(w.Kind) == cuda.KindCall {
		return callFromWire(w.Call, d.Calls, d.Host)
	}
	if w.Call != nil {
		return cuda.Command{}, WireErr("a library call's declaration on a command of kind %d", w.Kind)
	}
	c := cuda.Command{Kind: cuda.CommandKind(w.Kind), Kernel: w.Kernel, Config: cuda.LaunchConfig{Grid: dim3(w.Grid), Block: dim3(w.Block), SharedBytes: w.SharedBytes}}
	var err error
	if c.Dst, err = RegionFromWire(w.Dst); err != nil {
		return cuda.Command{}, err
	}
	if c.Src, err = RegionFromWire(w.Src); err != nil {
		return cuda.Command{}, err
	}
	if len(w.Host) > 0 {
		c.Host = w.Host // the message's own bytes (decoding copied them once): no second copy
	}
	if w.Area != nil {
		if len(w.Host) > 0 {
			return cuda.Command{}, WireErr("an upload both in its message and in the upload area")
		}
		if c.Host, err = FromArea(d.Area, w.Area, d.InPlace); err != nil {
			return cuda.Command{}, err
		}
	}
	if s := w.Staging; s != nil {
		c.Staging = cuda.HostRegion{Buffer: cuda.HostBuffer{Device: s.Device, ID: s.Id, Size: s.Size}, Offset: s.Offset, Length: s.Length}
	}
	for _, a := range w.Args {
		if a == nil || a.Kind > math.MaxUint8 || a.Elem > math.MaxUint8 {
			return cuda.Command{}, WireErr("bad argument")
		}
		r, err := RegionFromWire(a.Region)
		if err != nil {
			return cuda.Command{}, err
		}
		c.Args = append(c.Args, cuda.Arg{Kind: cuda.ParamKind(a.Kind), Region: r, Elem: cuda.ElementType(a.Elem), Bits: a.Bits, Struct: string(a.Value)})
	}
	return c, nil
}

func dim3(d *wirepb.Dim3) cuda.Dim3 {
	if d == nil {
		return cuda.Dim3{}
	}
	return cuda.Dim3{X: d.X, Y: d.Y, Z: d.Z}
}

// BufferToWire is a buffer handle on the wire.
func BufferToWire(b cuda.Buffer) *wirepb.Buffer {
	return &wirepb.Buffer{Device: b.Device, Id: b.ID, Size: b.Size, Align: b.Align, Elem: uint32(b.Elem), Addr: b.Addr}
}

// BufferFromWire is a buffer handle from the wire, checked.
func BufferFromWire(w *wirepb.Buffer) (cuda.Buffer, error) {
	if w == nil {
		return cuda.Buffer{}, nil
	}
	if w.Elem > math.MaxUint8 {
		return cuda.Buffer{}, WireErr("element type %d out of range", w.Elem)
	}
	return cuda.Buffer{Device: w.Device, ID: w.Id, Size: w.Size, Align: w.Align, Elem: cuda.ElementType(w.Elem), Addr: w.Addr}, nil
}

// RegionToWire is a region on the wire.
func RegionToWire(r cuda.Region) *wirepb.Region {
	if r == (cuda.Region{}) {
		return nil
	}
	return &wirepb.Region{Buffer: BufferToWire(r.Buffer), Offset: r.Offset, Length: r.Length}
}

// RegionFromWire is a region from the wire, checked.
func RegionFromWire(w *wirepb.Region) (cuda.Region, error) {
	if w == nil {
		return cuda.Region{}, nil
	}
	b, err := BufferFromWire(w.Buffer)
	if err != nil {
		return cuda.Region{}, err
	}
	return cuda.Region{Buffer: b, Offset: w.Offset, Length: w.Length}, nil
}

// FromArea is an upload's bytes in a data plane's upload area (nil: the
// message came through none), checked against its bounds: read there
// (inPlace: the area is pinned and held until the step ends) or copied
// out now, once (the front may write the span again once the call ended,
// and the host's plane may go before the step runs).
func FromArea(area []byte, a *wirepb.AreaRef, inPlace bool) ([]byte, error) {
	switch {
	case area == nil:
		return nil, WireErr("an upload in an upload area, but the message came through no data plane that has one")
	case a.Length == 0 || a.Length > MaxHostBytes || a.Offset > uint64(len(area)) || a.Length > uint64(len(area))-a.Offset:
		return nil, WireErr("an upload of %d bytes at %d of an upload area of %d bytes", a.Length, a.Offset, len(area))
	}
	end := a.Offset + a.Length
	if inPlace {
		return area[a.Offset:end:end], nil
	}
	return bytes.Clone(area[a.Offset:end]), nil
}
