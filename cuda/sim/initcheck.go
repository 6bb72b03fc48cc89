// Config.InitCheck: which bytes of each allocation were written, the error
// that reports a read of one that was not, and the checks of copies and
// read backs (kernels and library calls are probed: probe.go).

package sim

import (
	"fmt"
	"slices"
	"sort"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/codes"
)

// ErrUninitializedRead is what every [*UninitializedReadError] wraps, for
// errors.Is. Its code is uninitialized_read, a stream's error
// that is not sticky ([cuda.BlameStream]): the work ran, the device is not
// poisoned, and the program that read memory it never wrote is at fault.
var ErrUninitializedRead = codes.NewSentinel(codes.UninitializedRead, "sim: read of uninitialized device memory")

// UninitializedReadError reports work that read device memory never
// written since Alloc, under [Config.InitCheck]: a copy, a stage_out or a
// Readback whose source holds such a byte, or a kernel or a library call
// whose result depends on one. It wraps [ErrUninitializedRead], and
// classifies as it does.
type UninitializedReadError struct {
	// Op is what read it: a command kind ("launch", "call", "copy",
	// "stage_out"), or "readback".
	Op string
	// Name is the launch's kernel or the call's name ("" otherwise).
	Name string
	// Buffer is the ID of the buffer read.
	Buffer uint64
	// Offset is the first offending byte, from the buffer's start: for a
	// copy or a read back, the first byte of its source never written;
	// for a kernel or a call, the first such byte its result depends on,
	// taken back to the start of its element (of the buffer's type).
	Offset uint64
}

// Error says what read which byte, and how to fix it.
func (e *UninitializedReadError) Error() string {
	what := e.Op
	switch e.Op {
	case cuda.KindLaunch.String():
		what = "kernel " + e.Name
	case cuda.KindCall.String():
		what = fmt.Sprintf("library call %q", e.Name)
	}
	return fmt.Sprintf("sim: %s read uninitialized device memory: byte %d of buffer %d was never written (no upload, memset, copy or work wrote it since Alloc); upload, zero or compute it before it is read", what, e.Offset, e.Buffer)
}

// Unwrap returns ErrUninitializedRead.
func (e *UninitializedReadError) Unwrap() error { return ErrUninitializedRead }

// span is the bytes [lo, hi) of an allocation.
type span struct{ lo, hi uint64 }

// written is the set of an allocation's bytes written since Alloc: sorted,
// disjoint spans, none adjacent to another, so a buffer written whole, in
// one piece or many, is one span. Its zero value is empty.
type written struct{ spans []span }

// after is the index of the first span that ends after at.
func (w *written) after(at uint64) int {
	return sort.Search(len(w.spans), func(i int) bool { return w.spans[i].hi > at })
}

// add marks [lo, hi) written.
func (w *written) add(lo, hi uint64) {
	if lo >= hi {
		return
	}
	// The first span that ends at lo or later: it and the ones after it
	// that start by hi touch [lo, hi) and merge with it.
	i := sort.Search(len(w.spans), func(i int) bool { return w.spans[i].hi >= lo })
	j := i
	for j < len(w.spans) && w.spans[j].lo <= hi {
		lo, hi = min(lo, w.spans[j].lo), max(hi, w.spans[j].hi)
		j++
	}
	w.spans = slices.Replace(w.spans, i, j, span{lo, hi})
}

// firstGap returns the first byte of [lo, hi) not written, if any.
func (w *written) firstGap(lo, hi uint64) (uint64, bool) {
	i := w.after(lo)
	if i == len(w.spans) || w.spans[i].lo > lo {
		return lo, lo < hi
	}
	// lo is written up to the span's end, which is not (spans are never
	// adjacent).
	return w.spans[i].hi, w.spans[i].hi < hi
}

// gaps calls f with every maximal range of [lo, hi) not written, in order.
func (w *written) gaps(lo, hi uint64, f func(lo, hi uint64)) {
	at := lo
	for i := w.after(lo); i < len(w.spans) && w.spans[i].lo < hi; i++ {
		if w.spans[i].lo > at {
			f(at, w.spans[i].lo)
		}
		at = max(at, w.spans[i].hi)
	}
	if at < hi {
		f(at, hi)
	}
}

// allocOf is the allocation r names while it is handed out, or nil (freed
// since: the command's run fails with the illegal address).
func (d *device) allocOf(r cuda.Region) *allocation {
	d.mu.Lock()
	a, ok := d.buffers.Entry(r.Buffer.ID)
	d.mu.Unlock()
	if !ok || a.buf != r.Buffer {
		return nil
	}
	return a
}

// eachTouch calls f with every region c touches and how: a launch's
// buffer arguments with its kernel's declared access, a call's regions,
// a copy's source (read) and destination (write), a stage_out's source,
// and the destination of the others.
func (d *device) eachTouch(c cuda.Command, f func(cuda.Region, cuda.Access)) {
	switch c.Kind {
	case cuda.KindLaunch:
		k := d.kernels()[c.Kernel]
		for i := range c.Args {
			if c.Args[i].Kind != cuda.ParamBuffer {
				continue
			}
			acc := cuda.AccessReadWrite
			if k != nil && i < len(k.Spec.Params) {
				acc = k.Spec.Params[i].Access
			}
			f(c.Args[i].Region, acc)
		}
	case cuda.KindCall:
		for _, t := range c.LibraryCall.Regions {
			f(t.Region, t.Access)
		}
	case cuda.KindCopy:
		f(c.Src, cuda.AccessRead)
		f(c.Dst, cuda.AccessWrite)
	case cuda.KindStageOut:
		f(c.Src, cuda.AccessRead)
	case cuda.KindUpload, cuda.KindZero, cuda.KindStageIn:
		f(c.Dst, cuda.AccessWrite)
	}
}

// executeChecked runs a command under InitCheck: it reports a copy or a
// stage_out whose source holds a byte never written, probes a launch or a
// call whose readable regions hold one (executeProbed), runs the command
// as it would run unchecked, and then counts the regions it writes as
// written. A report comes back as the command's error unless the command
// itself failed.
func (d *device) executeChecked(c cuda.Command) error {
	if c.Kind == cuda.KindLaunch || c.Kind == cuda.KindCall {
		return d.executeProbed(c)
	}
	var report *UninitializedReadError
	d.eachTouch(c, func(r cuda.Region, acc cuda.Access) {
		if report == nil && acc == cuda.AccessRead {
			report = d.unwritten(c.Kind.String(), r)
		}
	})
	if err := d.executeBytes(c); err != nil {
		return err
	}
	d.markWritten(c)
	if report != nil {
		return report
	}
	return nil
}

// unwritten reports r's first byte never written, as a read by op, or
// returns nil.
func (d *device) unwritten(op string, r cuda.Region) *UninitializedReadError {
	a := d.allocOf(r)
	if a == nil {
		return nil
	}
	if off, ok := a.written.firstGap(r.Offset, r.End()); ok {
		return &UninitializedReadError{Op: op, Buffer: r.Buffer.ID, Offset: off}
	}
	return nil
}

// markWritten counts every region c writes as written, whole.
func (d *device) markWritten(c cuda.Command) {
	d.eachTouch(c, func(r cuda.Region, acc cuda.Access) {
		if acc.Writes() {
			if a := d.allocOf(r); a != nil {
				a.written.add(r.Offset, r.End())
			}
		}
	})
}

// checkReadback reports a Readback of src that reads a byte never
// written, under InitCheck; called with execMu held.
func (d *device) checkReadback(src cuda.Region) error {
	if !d.initCheck {
		return nil
	}
	if report := d.unwritten("readback", src); report != nil {
		return report
	}
	return nil
}
