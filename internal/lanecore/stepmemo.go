// Remembered steps: a lane keeps what planning learned about the batches it
// planned, so that a tenant's next identical step skips validating its
// commands and discovering its segments again.

package lanecore

import (
	"math/bits"
	"slices"

	"github.com/lanesched/lanes/cuda"
	discovery "github.com/lanesched/lanes/internal/discovery"

	lanes "github.com/lanesched/lanes/lanes"
)

// A serving tenant submits the same step over and over: the same kernels on
// the same buffers with the same scalars, only the bytes in its input
// staging changing. Validating such a batch (structure, kernel specs,
// regions of this device) and discovering its candidates (binding every
// command's key) give the same answer every time: both are functions of the
// batch alone. What is not is whether its handles are still live, and the
// device's free count says when that must be asked again. So a batch equal
// to one the lane remembers reuses that one's discovery, and has its handles
// checked again only when the device freed something since.
//
// Remembered: batches without a program declaration, patches, invocations,
// library calls or keyed uploads (whose keys cover their bytes), of at most
// maxMemoEntries entries. A batch is remembered on its second sighting, so a
// tenant that never repeats a step costs a fingerprint and no copy.
//
// The bounds let one lane serve thousands of tenants, each with a step of
// a few dozen commands (under a kilobyte an entry), and remember every
// tenant's step until its next one: 4,096 tenants of 18-entry steps hold
// about 55 MB on one lane, and a lane keeps only what it was sent.
const (
	memoSteps      = 8192       // batches remembered per lane, first in first out
	memoSeen       = 2 * 8192   // fingerprints of batches seen once
	maxMemoEntries = 256        // the largest batch remembered
	memoEntries    = 128 * 1024 // entries remembered in all
)

// stepMemo is a lane's remembered steps.
type stepMemo struct {
	steps  []memoStep
	next   int                 // the ring slot the next step takes
	index  map[uint64]int      // fingerprint -> slot in steps
	held   int                 // entries held by the remembered steps
	seen   []uint64            // ring of fingerprints seen once (memoSeen), oldest at seenAt once full
	seenAt int                 // the ring slot the next fingerprint takes
	seenBy map[uint64]struct{} // the fingerprints in seen
	off    bool                // plan every batch afresh (tests compare the two)
}

// memoStep is one remembered batch: a copy of what planning read, and what
// it found.
type memoStep struct {
	fp       uint64
	batch    lanes.Batch // entries (commands copied, upload bytes dropped), path, timing, boundaries, retained buffers
	hostLens []int       // per entry: the upload's byte count, which validation checked
	disc     discovery.Discovery
	frees    uint64 // the device's free count when its handles were last found live
	att      memoAttribution
}

// memoizable reports whether b's plan can be remembered.
func memoizable(b *lanes.Batch) bool {
	if b.Program != nil || len(b.Patches) > 0 || len(b.Entries) > maxMemoEntries {
		return false
	}
	for i := range b.Entries {
		e := &b.Entries[i]
		if e.Invoke != nil || e.Command.Kind == cuda.KindCall || (e.Command.Kind == cuda.KindUpload && e.Replay != nil) {
			return false
		}
	}
	return true
}

// fingerprint is a cheap hash of what planning reads of b: a few words per
// entry, rotated in, then mixed once. It only finds a slot (the comparison
// decides), so it reads what tells one tenant's step from another's: the
// entries' kinds, nodes, argument counts and first regions.
func fingerprint(b *lanes.Batch) uint64 {
	h := uint64(len(b.Entries))<<16 | uint64(b.Path)<<8 | uint64(b.Timing)
	for _, n := range b.EagerBoundaries {
		h = bits.RotateLeft64(h, 7) ^ uint64(n)
	}
	for i := range b.Entries {
		e := &b.Entries[i]
		c := &e.Command
		v := uint64(c.Kind)<<56 ^ uint64(e.Phase)<<48 ^ uint64(len(c.Args))<<40 ^ uint64(uint32(e.Node)) ^ c.Dst.Buffer.ID<<20 ^ c.Dst.Offset ^ c.Staging.Buffer.ID<<28
		if len(c.Args) > 0 {
			a := &c.Args[0]
			v ^= a.Region.Buffer.ID<<32 ^ a.Region.Offset<<8 ^ a.Bits
		}
		if e.Replay != nil {
			v ^= uint64(e.Replay.Key[0])<<44 ^ 1<<63
		}
		h = bits.RotateLeft64(h, 13) ^ v
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	return h ^ h>>33
}

// lookup returns the remembered step equal to b, or nil.
func (m *stepMemo) lookup(b *lanes.Batch, fp uint64) *memoStep {
	i, ok := m.index[fp]
	if !ok {
		return nil
	}
	s := &m.steps[i]
	if !s.equal(b) {
		return nil
	}
	return s
}

// equal reports whether b is the remembered batch: every field planning
// reads, compared by value. It runs for every step a lane replays, so it
// compares the commands' fields itself (sameRegion, sameArgs) rather than
// through the compiler's generic struct equality, a call per nested struct
// (a third of a lane's planning on the H200).
func (s *memoStep) equal(b *lanes.Batch) bool {
	r := &s.batch
	if r.Path != b.Path || r.Timing != b.Timing || len(r.Entries) != len(b.Entries) ||
		!slices.Equal(r.EagerBoundaries, b.EagerBoundaries) || !slices.Equal(r.Retain, b.Retain) {
		return false
	}
	for i := range b.Entries {
		x, y := &r.Entries[i], &b.Entries[i]
		if x.Phase != y.Phase || x.Node != y.Node || x.Work != y.Work || y.Invoke != nil {
			return false
		}
		if (x.Replay == nil) != (y.Replay == nil) ||
			(x.Replay != nil && (x.Replay.Key != y.Replay.Key || !slices.Equal(x.Replay.Scopes, y.Replay.Scopes))) {
			return false
		}
		c, d := &x.Command, &y.Command
		if c.Kind != d.Kind || c.Config != d.Config || s.hostLens[i] != len(d.Host) || d.LibraryCall != nil ||
			!sameArgs(c.Args, d.Args) || !sameRegion(&c.Dst, &d.Dst) || !sameRegion(&c.Src, &d.Src) ||
			!sameHostRegion(&c.Staging, &d.Staging) || c.Kernel != d.Kernel {
			return false
		}
	}
	return true
}

// sameArgs reports whether two launches' arguments are equal, field by
// field (TestMemoComparesEveryField holds the field lists to the types').
func sameArgs(a, b []cuda.Arg) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := &a[i], &b[i]
		if x.Kind != y.Kind || x.Bits != y.Bits || x.Elem != y.Elem || !sameRegion(&x.Region, &y.Region) || x.Struct != y.Struct {
			return false
		}
	}
	return true
}

// sameRegion reports whether two device regions are equal, field by field.
func sameRegion(a, b *cuda.Region) bool {
	x, y := &a.Buffer, &b.Buffer
	return a.Offset == b.Offset && a.Length == b.Length && x.ID == y.ID && x.Device == y.Device && x.Addr == y.Addr &&
		x.Size == y.Size && x.Align == y.Align && x.Elem == y.Elem
}

// sameHostRegion reports whether two host regions are equal, field by field.
func sameHostRegion(a, b *cuda.HostRegion) bool {
	return a.Offset == b.Offset && a.Length == b.Length && a.Buffer.ID == b.Buffer.ID && a.Buffer.Device == b.Buffer.Device &&
		a.Buffer.Size == b.Buffer.Size
}

// remember keeps b's plan (its discovery d, its handles found live at
// device free count frees) if b was seen before; otherwise it notes b's
// fingerprint.
func (m *stepMemo) remember(b *lanes.Batch, fp uint64, d discovery.Discovery, frees uint64) {
	if _, ok := m.seenBy[fp]; !ok {
		m.see(fp)
		return
	}
	if m.index == nil { // grown as steps come: most lanes remember a few
		m.index = make(map[uint64]int)
	}
	if i, ok := m.index[fp]; ok { // a colliding batch: the newer one takes its place
		m.drop(i)
	}
	for m.held+len(b.Entries) > memoEntries { // the oldest go first
		m.drop(m.next)
		m.next = (m.next + 1) % memoSteps
	}
	s := memoStep{fp: fp, batch: copyPlanned(b), hostLens: make([]int, len(b.Entries)), disc: copyDiscovery(d), frees: frees}
	for i := range b.Entries {
		s.hostLens[i] = len(b.Entries[i].Command.Host)
	}
	slot := len(m.steps)
	if slot < memoSteps {
		m.steps = append(m.steps, s)
	} else {
		slot = m.next
		m.drop(slot)
		m.steps[slot] = s
		m.next = (m.next + 1) % memoSteps
	}
	m.index[fp] = slot
	m.held += len(b.Entries)
}

// see notes a fingerprint seen once, forgetting the oldest beyond
// memoSeen.
func (m *stepMemo) see(fp uint64) {
	if m.seenBy == nil {
		m.seenBy = make(map[uint64]struct{}, 256)
	}
	if len(m.seen) < memoSeen {
		m.seen = append(m.seen, fp)
	} else {
		delete(m.seenBy, m.seen[m.seenAt])
		m.seen[m.seenAt] = fp
		m.seenAt = (m.seenAt + 1) % memoSeen
	}
	m.seenBy[fp] = struct{}{}
}

// drop forgets the step in slot i (its slot stays, empty).
func (m *stepMemo) drop(i int) {
	if i >= len(m.steps) || m.steps[i].batch.Entries == nil {
		return
	}
	s := &m.steps[i]
	if j, ok := m.index[s.fp]; ok && j == i {
		delete(m.index, s.fp)
	}
	m.held -= len(s.batch.Entries)
	*s = memoStep{}
}

// copyPlanned copies what planning reads of b, sharing nothing with it
// (upload bytes are not kept: validation checked their length alone).
func copyPlanned(b *lanes.Batch) lanes.Batch {
	c := lanes.Batch{Path: b.Path, Timing: b.Timing, EagerBoundaries: slices.Clone(b.EagerBoundaries), Retain: slices.Clone(b.Retain),
		Entries: make([]lanes.Entry, len(b.Entries))}
	for i, e := range b.Entries {
		e.Command.Args = slices.Clone(e.Command.Args)
		e.Command.Host = nil
		if e.Replay != nil {
			e.Replay = &lanes.ReplayContract{Key: e.Replay.Key, Scopes: slices.Clone(e.Replay.Scopes)}
		}
		c.Entries[i] = e
	}
	return c
}

// copyDiscovery copies a discovery out of the cache memo's reused slices.
func copyDiscovery(d discovery.Discovery) discovery.Discovery {
	c := discovery.Discovery{Bindings: slices.Clone(d.Bindings), Reasons: slices.Clone(d.Reasons)}
	if len(d.Candidates) > 0 {
		c.Candidates = make([]discovery.Candidate, len(d.Candidates))
		for i, cand := range d.Candidates {
			cand.Keys = slices.Clone(cand.Keys)
			c.Candidates[i] = cand
		}
	}
	return c
}
