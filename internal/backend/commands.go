// What a command touches (its regions, with how, and the bytes it moves),
// and the name of its enqueue.

package backend

import "github.com/lanesched/lanes/cuda"

// Touches lists the regions the command reads and writes. For a launch the
// accesses come from the kernel spec; without one every buffer argument is
// taken as read-write.
func Touches(c cuda.Command, k *cuda.KernelSpec) []cuda.Touch {
	switch c.Kind {
	case cuda.KindLaunch:
		var out []cuda.Touch
		for i, a := range c.Args {
			if a.Kind != cuda.ParamBuffer {
				continue
			}
			acc := cuda.AccessReadWrite
			if k != nil && i < len(k.Params) {
				acc = k.Params[i].Access
			}
			out = append(out, cuda.Touch{Region: a.Region, Access: acc})
		}
		return out
	case cuda.KindCopy:
		return []cuda.Touch{{Region: c.Src, Access: cuda.AccessRead}, {Region: c.Dst, Access: cuda.AccessWrite}}
	case cuda.KindStageOut:
		return []cuda.Touch{{Region: c.Src, Access: cuda.AccessRead}}
	case cuda.KindCall:
		if c.LibraryCall == nil {
			return nil
		}
		return append([]cuda.Touch(nil), c.LibraryCall.Regions...)
	case cuda.KindUpload, cuda.KindZero, cuda.KindStageIn:
		return []cuda.Touch{{Region: c.Dst, Access: cuda.AccessWrite}}
	}
	return nil
}

// ForRegions calls f for every region the command names, in order (a
// launch's buffer arguments; a copy's source, then destination; otherwise the
// destination), and stops at the first error. Unlike [Touches] it
// allocates nothing, for the enqueue path.
func ForRegions(c cuda.Command, f func(cuda.Region) error) error {
	switch c.Kind {
	case cuda.KindLaunch:
		for i := range c.Args {
			if c.Args[i].Kind == cuda.ParamBuffer {
				if err := f(c.Args[i].Region); err != nil {
					return err
				}
			}
		}
		return nil
	case cuda.KindCopy:
		if err := f(c.Src); err != nil {
			return err
		}
	case cuda.KindStageOut:
		return f(c.Src)
	case cuda.KindCall:
		if c.LibraryCall == nil { // Validate refuses it
			return nil
		}
		for _, t := range c.LibraryCall.Regions {
			if err := f(t.Region); err != nil {
				return err
			}
		}
		return nil
	}
	return f(c.Dst)
}

// RegionCount is the number of regions ForRegions visits.
func RegionCount(c cuda.Command) int {
	n := 0
	_ = ForRegions(c, func(cuda.Region) error { n++; return nil })
	return n
}

// Bytes is the number of device bytes the command moves or its buffer
// arguments span; the cost models use it.
func CommandBytes(c cuda.Command) uint64 {
	switch c.Kind {
	case cuda.KindLaunch:
		var n uint64
		for _, a := range c.Args {
			if a.Kind == cuda.ParamBuffer {
				n += a.Region.Length
			}
		}
		return n
	case cuda.KindCopy:
		return 2 * c.Dst.Length
	case cuda.KindStageOut:
		return c.Src.Length
	case cuda.KindCall:
		var n uint64
		if c.LibraryCall == nil {
			return 0
		}
		for _, t := range c.LibraryCall.Regions {
			n += t.Region.Length
		}
		return n
	}
	return c.Dst.Length
}

var enqueueOps = [...]string{"enqueue", "enqueue launch", "enqueue upload", "enqueue copy", "enqueue zero", "enqueue stage_in", "enqueue stage_out", "enqueue call"}

// EnqueueOp is the operation name a device reports for enqueuing a command
// of kind k ("enqueue launch"); it allocates nothing.
func EnqueueOp(k cuda.CommandKind) string {
	if int(k) < len(enqueueOps) {
		return enqueueOps[k]
	}
	return enqueueOps[0]
}
