// What a command touches: its regions, with how, and the bytes it moves.

package cuda

// Touch is one region a command touches, with how.
type Touch struct {
	Region Region
	Access Access
}

// Touches lists the regions the command reads and writes. For a launch the
// accesses come from the kernel spec; without one every buffer argument is
// taken as read-write.
func (c Command) Touches(k *KernelSpec) []Touch {
	switch c.Kind {
	case KindLaunch:
		var out []Touch
		for i, a := range c.Args {
			if a.Kind != ParamBuffer {
				continue
			}
			acc := AccessReadWrite
			if k != nil && i < len(k.Params) {
				acc = k.Params[i].Access
			}
			out = append(out, Touch{a.Region, acc})
		}
		return out
	case KindCopy:
		return []Touch{{c.Src, AccessRead}, {c.Dst, AccessWrite}}
	case KindStageOut:
		return []Touch{{c.Src, AccessRead}}
	case KindCall:
		if c.LibraryCall == nil {
			return nil
		}
		return append([]Touch(nil), c.LibraryCall.Regions...)
	case KindUpload, KindZero, KindStageIn:
		return []Touch{{c.Dst, AccessWrite}}
	}
	return nil
}

// ForRegions calls f for every region the command names, in order (a
// launch's buffer arguments; a copy's source, then destination; otherwise the
// destination), and stops at the first error. Unlike [Command.Touches] it
// allocates nothing, for the enqueue path.
func (c Command) ForRegions(f func(Region) error) error {
	switch c.Kind {
	case KindLaunch:
		for i := range c.Args {
			if c.Args[i].Kind == ParamBuffer {
				if err := f(c.Args[i].Region); err != nil {
					return err
				}
			}
		}
		return nil
	case KindCopy:
		if err := f(c.Src); err != nil {
			return err
		}
	case KindStageOut:
		return f(c.Src)
	case KindCall:
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
func (c Command) RegionCount() int {
	n := 0
	_ = c.ForRegions(func(Region) error { n++; return nil })
	return n
}

// Bytes is the number of device bytes the command moves or its buffer
// arguments span; the cost models use it.
func (c Command) Bytes() uint64 {
	switch c.Kind {
	case KindLaunch:
		var n uint64
		for _, a := range c.Args {
			if a.Kind == ParamBuffer {
				n += a.Region.Length
			}
		}
		return n
	case KindCopy:
		return 2 * c.Dst.Length
	case KindStageOut:
		return c.Src.Length
	case KindCall:
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
