// The binary encoding of commands: a wire form a fuzzer decodes into
// arbitrary commands to enqueue.

package backend

import (
	"encoding/binary"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/codes"
)

// ErrEncoding is a malformed command encoding.
var ErrEncoding = codes.NewSentinel(codes.RuntimeContract, "cuda: malformed command encoding")

// The wire form of a command: a version byte, the kind, then the kind's
// fields in little-endian order. It carries names (device instance, buffer
// id, offsets), never host pointers, so a command can cross a process or a
// wire and be checked again by the device that receives it.
const wireVersion = 1

// EncodeCommand encodes a command in its wire form. A library call is
// host code of this process: it has none, and is refused.
func EncodeCommand(c cuda.Command) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Kind == cuda.KindCall {
		return nil, cuda.Contractf("encode command", ErrEncoding, "library call %q is code of this process and has no wire form", c.LibraryCall.Name)
	}
	b := []byte{wireVersion, byte(c.Kind)}
	switch c.Kind {
	case cuda.KindLaunch:
		b = binary.LittleEndian.AppendUint16(b, uint16(len(c.Kernel)))
		b = append(b, c.Kernel...)
		for _, v := range []uint32{c.Config.Grid.X, c.Config.Grid.Y, c.Config.Grid.Z,
			c.Config.Block.X, c.Config.Block.Y, c.Config.Block.Z, c.Config.SharedBytes} {
			b = binary.LittleEndian.AppendUint32(b, v)
		}
		b = binary.LittleEndian.AppendUint16(b, uint16(len(c.Args)))
		for _, a := range c.Args {
			b = append(b, byte(a.Kind))
			switch a.Kind {
			case cuda.ParamBuffer:
				b = appendRegion(b, a.Region)
			case cuda.ParamStruct:
				b = binary.LittleEndian.AppendUint16(b, uint16(len(a.Struct)))
				b = append(b, a.Struct...)
			default:
				b = append(b, byte(a.Elem))
				b = binary.LittleEndian.AppendUint64(b, a.Bits)
			}
		}
	case cuda.KindUpload:
		b = appendRegion(b, c.Dst)
		b = binary.LittleEndian.AppendUint64(b, uint64(len(c.Host)))
		b = append(b, c.Host...)
	case cuda.KindCopy:
		b = appendRegion(appendRegion(b, c.Dst), c.Src)
	case cuda.KindZero:
		b = appendRegion(b, c.Dst)
	case cuda.KindStageIn:
		b = appendHostRegion(appendRegion(b, c.Dst), c.Staging)
	case cuda.KindStageOut:
		b = appendHostRegion(appendRegion(b, c.Src), c.Staging)
	}
	return b, nil
}

func appendHostRegion(b []byte, r cuda.HostRegion) []byte {
	for _, v := range []uint64{r.Buffer.Device, r.Buffer.ID, r.Buffer.Size, r.Offset, r.Length} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return b
}

func appendRegion(b []byte, r cuda.Region) []byte {
	for _, v := range []uint64{r.Buffer.Device, r.Buffer.ID, r.Buffer.Size, r.Buffer.Align, r.Buffer.Addr, r.Offset, r.Length} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	return append(b, byte(r.Buffer.Elem))
}

// DecodeCommand decodes a command from its wire form into c and validates it
// structurally; a malformed input is an [ErrEncoding] contract error and
// leaves c unchanged.
func DecodeCommand(c *cuda.Command, data []byte) error {
	d := decoder{b: data}
	if v := d.u8(); v != wireVersion {
		return cuda.Contractf("decode command", ErrEncoding, "wire version %d, want %d", v, wireVersion)
	}
	out := cuda.Command{Kind: cuda.CommandKind(d.u8())}
	switch out.Kind {
	case cuda.KindLaunch:
		n := int(d.u16())
		if n > cuda.MaxKernelName {
			return cuda.Contractf("decode command", ErrEncoding, "kernel name of %d bytes exceeds %d", n, cuda.MaxKernelName)
		}
		out.Kernel = string(d.bytes(n))
		cfg := &out.Config
		for _, p := range []*uint32{&cfg.Grid.X, &cfg.Grid.Y, &cfg.Grid.Z, &cfg.Block.X, &cfg.Block.Y, &cfg.Block.Z, &cfg.SharedBytes} {
			*p = d.u32()
		}
		nargs := int(d.u16())
		if nargs > cuda.MaxArgs {
			return cuda.Contractf("decode command", ErrEncoding, "%d arguments exceed %d", nargs, cuda.MaxArgs)
		}
		for i := 0; i < nargs && d.err == nil; i++ {
			a := cuda.Arg{Kind: cuda.ParamKind(d.u8())}
			switch a.Kind {
			case cuda.ParamBuffer:
				a.Region = d.region()
			case cuda.ParamStruct:
				a.Struct = string(d.bytes(int(d.u16())))
			default:
				a.Elem = cuda.ElementType(d.u8())
				a.Bits = d.u64()
			}
			out.Args = append(out.Args, a)
		}
	case cuda.KindUpload:
		out.Dst = d.region()
		n := d.u64()
		if n > uint64(len(d.b)) {
			return cuda.Contractf("decode command", ErrEncoding, "upload claims %d host bytes but %d remain", n, len(d.b))
		}
		out.Host = append([]byte{}, d.bytes(int(n))...)
	case cuda.KindCopy:
		out.Dst = d.region()
		out.Src = d.region()
	case cuda.KindZero:
		out.Dst = d.region()
	case cuda.KindStageIn:
		out.Dst = d.region()
		out.Staging = d.hostRegion()
	case cuda.KindStageOut:
		out.Src = d.region()
		out.Staging = d.hostRegion()
	default:
		return cuda.Contractf("decode command", ErrEncoding, "unknown command kind %d", uint8(out.Kind))
	}
	if d.err != nil {
		return d.err
	}
	if len(d.b) != 0 {
		return cuda.Contractf("decode command", ErrEncoding, "%d trailing bytes after the command", len(d.b))
	}
	if err := out.Validate(); err != nil {
		return err
	}
	*c = out
	return nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) bytes(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.err = cuda.Contractf("decode command", ErrEncoding, "truncated: need %d bytes, have %d", n, len(d.b))
		d.b = nil
		return nil
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) u8() uint8 {
	if b := d.bytes(1); b != nil {
		return b[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if b := d.bytes(2); b != nil {
		return binary.LittleEndian.Uint16(b)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if b := d.bytes(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if b := d.bytes(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

func (d *decoder) region() cuda.Region {
	var r cuda.Region
	for _, p := range []*uint64{&r.Buffer.Device, &r.Buffer.ID, &r.Buffer.Size, &r.Buffer.Align, &r.Buffer.Addr, &r.Offset, &r.Length} {
		*p = d.u64()
	}
	r.Buffer.Elem = cuda.ElementType(d.u8())
	return r
}

func (d *decoder) hostRegion() cuda.HostRegion {
	var r cuda.HostRegion
	for _, p := range []*uint64{&r.Buffer.Device, &r.Buffer.ID, &r.Buffer.Size, &r.Offset, &r.Length} {
		*p = d.u64()
	}
	return r
}
