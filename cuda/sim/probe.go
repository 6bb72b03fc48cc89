// Config.InitCheck for kernels and library calls: whether their result
// depends on bytes never written, found by running the reference again on
// a scratch copy with those bytes changed.

package sim

import (
	"bytes"
	"math"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
)

// A launch or a call declares regions, which over-approximate what it
// reads: a kernel may read a region only up to a bound its arguments or
// its data give. So bytes never written in a region it declares readable
// are reported only when its result depends on them. The real run reads
// them as the device holds them; a probe runs the reference again on a
// scratch copy of everything the command's views reach, taken before the
// real run, with those bytes changed, and compares the bytes it leaves,
// and its error, with the real run's. A difference is a dependence. Which
// buffer and byte is found, on that path only, by bisection over the
// changed bytes, in order (buffer by buffer as the command names them,
// each by offset; see dependence). Only this path copies or runs anything
// twice.

// probe is the plan of probing one launch or call.
type probe struct {
	c    cuda.Command
	bufs []probeBuf
	// size is the bytes of all the spans (each scratch copy's size);
	// unwritten the bytes of all the gaps.
	size, unwritten uint64
	// overlap: an unwritten byte lies in a region the command writes,
	// so the work may write it, and byPosition is tried too.
	overlap bool
	// pristine is the spans as the real run found them; work what a
	// probe runs on; input what it began with (the device's scratch).
	pristine, work, input []byte
}

// probeBuf is one buffer a probed command names.
type probeBuf struct {
	a *allocation
	// lo and hi are the span the command's views of the buffer reach (a
	// kernel's to the allocation's end, as a pointer reaches), and at is
	// where that span lies in the scratch copies.
	lo, hi, at uint64
	// gaps are its bytes never written in regions the command reads,
	// sorted and disjoint (offsets in the buffer).
	gaps []span
}

// pattern is how a probe changes an unwritten byte.
type pattern uint8

const (
	// flipped flips every bit of the byte, so that no bit a result may
	// hang on (a sign, a flag) keeps its value.
	flipped pattern = iota
	// zeroed makes it 0, what memory forgotten is most often meant to
	// hold: an index, a count or a flag of 0 takes another path than
	// garbage (an index the fill byte makes points outside the buffer
	// whichever way its bits are flipped).
	zeroed
	// byPosition gives each byte a value of its offset, so that a byte
	// the work copies from one unwritten place to another is told apart
	// from one it left alone; tried only where the work may write an
	// unwritten byte it reads.
	byPosition
)

// fill puts the pattern's bytes in dst where the device holds was; off
// is the offset of their first in the buffer.
func (p pattern) fill(dst, was []byte, off uint64) {
	switch p {
	case flipped:
		for i, v := range was {
			dst[i] = ^v
		}
		return
	case zeroed:
		clear(dst)
	case byPosition:
		for i := range dst {
			dst[i] = byte(((off + uint64(i)) * 0x9E3779B97F4A7C15) >> 56)
		}
	}
	for i, v := range was { // never the byte the device holds
		if dst[i] == v {
			dst[i] = ^v
		}
	}
}

// maxKeptScratch bounds the scratch a device keeps between probes.
const maxKeptScratch = 32 << 20

// executeProbed runs a launch or a call under InitCheck: as it would run
// unchecked when no byte of the regions it declares readable is unwritten
// (nothing else is done then but the look-up); otherwise probed, reporting
// a dependence on such a byte as an *UninitializedReadError. A command
// that fails carries its own error, with the report added to its detail.
func (d *device) executeProbed(c cuda.Command) error {
	if !d.readsUnwritten(c) {
		err := d.executeBytes(c)
		if err == nil {
			d.markWritten(c)
		}
		return err
	}
	p := d.planProbe(c)
	if p == nil { // a buffer was freed: the run fails with the illegal address
		return d.executeBytes(c)
	}
	d.probeScratchFor(p)
	for i := range p.bufs {
		b := &p.bufs[i]
		copy(p.pristine[b.at:b.at+b.hi-b.lo], b.a.bytes[b.lo:b.hi])
	}
	err := d.executeBytes(c)
	report := d.dependence(p, err)
	for i := range d.probeScratch {
		if cap(d.probeScratch[i]) > maxKeptScratch {
			d.probeScratch[i] = nil
		}
	}
	if err != nil {
		if ce, ok := err.(*cuda.Error); ok && report != nil {
			ce.Detail += "; before that, " + report.Error()
		}
		return err
	}
	d.markWritten(c)
	if report != nil {
		return report
	}
	return nil
}

// readsUnwritten reports whether a region c declares readable holds a
// byte never written.
func (d *device) readsUnwritten(c cuda.Command) bool {
	found := false
	d.eachTouch(c, func(r cuda.Region, acc cuda.Access) {
		if found || acc == cuda.AccessWrite {
			return
		}
		if a := d.allocOf(r); a != nil {
			_, found = a.written.firstGap(r.Offset, r.End())
		}
	})
	return found
}

// planProbe plans probing c, or returns nil when a buffer it names was
// freed.
func (d *device) planProbe(c cuda.Command) *probe {
	p := &probe{c: c}
	freed := false
	d.eachTouch(c, func(r cuda.Region, acc cuda.Access) {
		a := d.allocOf(r)
		if a == nil {
			freed = true
			return
		}
		b := p.buf(r.Buffer.ID)
		if b == nil {
			p.bufs = append(p.bufs, probeBuf{a: a, lo: math.MaxUint64})
			b = &p.bufs[len(p.bufs)-1]
		}
		b.lo = min(b.lo, r.Offset)
		if c.Kind == cuda.KindLaunch {
			b.hi = uint64(len(a.bytes))
		} else {
			b.hi = max(b.hi, r.End())
		}
		if acc != cuda.AccessWrite {
			a.written.gaps(r.Offset, r.End(), func(lo, hi uint64) { b.gaps = append(b.gaps, span{lo, hi}) })
		}
	})
	if freed {
		return nil
	}
	for i := range p.bufs {
		b := &p.bufs[i]
		b.gaps = union(b.gaps)
		b.at = p.size
		p.size += b.hi - b.lo
		for _, g := range b.gaps {
			p.unwritten += g.hi - g.lo
		}
	}
	d.eachTouch(c, func(r cuda.Region, acc cuda.Access) {
		if !acc.Writes() {
			return
		}
		for _, g := range p.buf(r.Buffer.ID).gaps {
			if g.lo < r.End() && r.Offset < g.hi {
				p.overlap = true
			}
		}
	})
	return p
}

// buf is the plan's buffer of that ID, or nil.
func (p *probe) buf(id uint64) *probeBuf {
	for i := range p.bufs {
		if p.bufs[i].a.buf.ID == id {
			return &p.bufs[i]
		}
	}
	return nil
}

// union sorts spans and merges those that overlap or touch.
func union(ss []span) []span {
	if len(ss) < 2 {
		return ss
	}
	for i := 1; i < len(ss); i++ { // few spans: insertion sort
		for j := i; j > 0 && ss[j].lo < ss[j-1].lo; j-- {
			ss[j], ss[j-1] = ss[j-1], ss[j]
		}
	}
	out := ss[:1]
	for _, s := range ss[1:] {
		if last := &out[len(out)-1]; s.lo <= last.hi {
			last.hi = max(last.hi, s.hi)
		} else {
			out = append(out, s)
		}
	}
	return out
}

// probeScratchFor gives the plan the device's scratch copies, grown to its
// spans' size.
func (d *device) probeScratchFor(p *probe) {
	for i := range d.probeScratch {
		if uint64(cap(d.probeScratch[i])) < p.size {
			d.probeScratch[i] = make([]byte, p.size)
		}
	}
	p.pristine, p.work, p.input = d.probeScratch[0][:p.size], d.probeScratch[1][:p.size], d.probeScratch[2][:p.size]
}

// dependence finds whether the real run's result (the device's bytes now,
// and realErr) depends on the unwritten bytes, and if so on which first:
// the shortest prefix of them (in order) whose change shows it ends at a
// byte the result needs, with the ones before it that it needs too (a
// kernel that faults on any of several garbage indices needs them all
// changed); of those, the first is the last start of a range up to that
// byte whose change still shows it. A result that needs one byte is
// reported at that byte, at the start of its element.
func (d *device) dependence(p *probe, realErr error) *UninitializedReadError {
	for pat := flipped; pat <= byPosition; pat++ {
		if pat == byPosition && !p.overlap {
			break
		}
		if !d.differs(p, pat, 0, p.unwritten, realErr) {
			continue
		}
		lo, hi := uint64(1), p.unwritten // changing [0, hi) shows it, [0, lo-1) does not
		for lo < hi {
			if mid := lo + (hi-lo)/2; d.differs(p, pat, 0, mid, realErr) {
				hi = mid
			} else {
				lo = mid + 1
			}
		}
		end := hi
		lo, hi = 0, end-1 // changing [lo, end) shows it, [hi+1, end) does not
		for lo < hi {
			if mid := hi - (hi-lo)/2; d.differs(p, pat, mid, end, realErr) {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		id, off := p.nth(lo)
		e := &UninitializedReadError{Op: p.c.Kind.String(), Name: p.c.Kernel, Buffer: id, Offset: off}
		if p.c.Kind == cuda.KindCall {
			e.Name = p.c.LibraryCall.Name
		}
		return e
	}
	return nil
}

// nth is the buffer ID of the i-th unwritten byte, in order, and the
// offset of the element it lies in (of its unwritten part).
func (p *probe) nth(i uint64) (uint64, uint64) {
	for _, b := range p.bufs {
		for _, g := range b.gaps {
			if n := g.hi - g.lo; i >= n {
				i -= n
				continue
			}
			off := g.lo + i
			return b.a.buf.ID, max(g.lo, off-off%max(1, b.a.buf.Elem.Size()))
		}
	}
	panic("sim: probe byte out of range")
}

// differs runs the command's reference on a copy of the pristine bytes
// whose unwritten bytes [from, to) pat changed, and reports whether what it
// leaves, or its error, differs from the real run's. A changed byte
// differs unless the run left it alone (the real run left the device's
// byte as it was, the probe left the pattern's) or wrote the real run's
// value there; any other byte differs unless it holds the real run's value.
func (d *device) differs(p *probe, pat pattern, from, to uint64, realErr error) bool {
	copy(p.work, p.pristine)
	p.eachChanged(from, to, func(_ int, b *probeBuf, lo, hi uint64) {
		j := b.at + lo - b.lo
		pat.fill(p.work[j:j+hi-lo], p.pristine[j:j+hi-lo], lo)
	})
	copy(p.input, p.work)
	err := d.runCompute(p.c, func(r cuda.Region) (kernels.Memory, error) {
		b := p.buf(r.Buffer.ID)
		end := b.at + b.hi - b.lo
		return p.work[b.at+r.Offset-b.lo : end : end], nil
	})
	if (err == nil) != (realErr == nil) || (err != nil && err.Error() != realErr.Error()) {
		return true
	}
	done := make([]uint64, len(p.bufs)) // per buffer: compared up to here, from its lo
	diff := false
	p.eachChanged(from, to, func(i int, b *probeBuf, lo, hi uint64) {
		if diff {
			return
		}
		// The span's bytes: the device's, the pristine ones, the probe's
		// and what it began with; indexed from the span's start.
		n := b.hi - b.lo
		real, was := b.a.bytes[b.lo:b.hi], p.pristine[b.at:b.at+n]
		probed, in := p.work[b.at:b.at+n], p.input[b.at:b.at+n]
		lo, hi = lo-b.lo, hi-b.lo
		if !bytes.Equal(real[done[i]:lo], probed[done[i]:lo]) {
			diff = true
			return
		}
		done[i] = hi
		if bytes.Equal(real[lo:hi], probed[lo:hi]) || (bytes.Equal(real[lo:hi], was[lo:hi]) && bytes.Equal(probed[lo:hi], in[lo:hi])) {
			return // written alike, or left alone by both
		}
		for j := lo; j < hi; j++ {
			if probed[j] != real[j] && (real[j] != was[j] || probed[j] != in[j]) {
				diff = true
				return
			}
		}
	})
	for i := range p.bufs {
		b := &p.bufs[i]
		n := b.hi - b.lo
		if diff || !bytes.Equal(b.a.bytes[b.lo+done[i]:b.hi], p.work[b.at+done[i]:b.at+n]) {
			return true
		}
	}
	return false
}

// eachChanged calls f with the unwritten bytes [from, to) (counted in
// order), range by range, and the index of their buffer in the plan.
func (p *probe) eachChanged(from, to uint64, f func(i int, b *probeBuf, lo, hi uint64)) {
	at := uint64(0) // the count of the bytes before g
	for i := range p.bufs {
		b := &p.bufs[i]
		for _, g := range b.gaps {
			n := g.hi - g.lo
			if at >= to {
				return
			}
			if lo, hi := max(from, at), min(to, at+n); lo < hi {
				f(i, b, g.lo+lo-at, g.lo+hi-at)
			}
			at += n
		}
	}
}
