// Package cachetest drives an [execcache.Cache] against the simulated device the
// way a lane does, for the tests of cache and of the packages above it.
package cachetest

import (
	"encoding/binary"
	"testing"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
	discovery "github.com/lanesched/lanes/internal/discovery"

	execcache "github.com/lanesched/lanes/internal/execcache"
)

// Rig is a zero-cost simulated device with one stream, a cache, and a few
// zeroed int32 counters of 16 elements.
type Rig struct {
	T      testing.TB
	Dev    sim.Device
	Stream backend.Stream
	Cache  *execcache.Cache
	Bufs   []cuda.Buffer
	Owner  string // the tenant Run prepares for
	// CaptureOnly prepares without the commands (no execcache.Encoder.Command):
	// misses are captured, never served by rebinding a resident.
	CaptureOnly bool
}

// New makes a rig with the given number of counters and device faults.
func New(t testing.TB, counters int, faults ...sim.Fault) *Rig {
	t.Helper()
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost, Faults: faults})
	if err != nil {
		t.Fatalf("cachetest: sim.New: got err %v, want nil", err)
	}
	t.Cleanup(func() { _ = dev.Close() })
	s, err := backend.Must(dev).NewStream()
	if err != nil {
		t.Fatalf("cachetest: NewStream: got err %v, want nil", err)
	}
	return &Rig{T: t, Dev: dev, Stream: s, Cache: execcache.New(), Bufs: Counters(t, dev, s, counters)}
}

// Counters allocates n int32 counters of 16 elements on dev and enqueues
// their zeroing on s.
func Counters(t testing.TB, dev sim.Device, s backend.Stream, n int) []cuda.Buffer {
	t.Helper()
	bufs := make([]cuda.Buffer, 0, n)
	for range n {
		b, err := dev.Alloc(cuda.BufferSpec{Size: 64, Elem: cuda.I32})
		if err != nil {
			t.Fatalf("cachetest: Alloc of a 64-byte counter: got err %v, want nil", err)
		}
		z, _ := cuda.Zero(b.Whole())
		if err := s.Enqueue(z); err != nil {
			t.Fatalf("cachetest: Enqueue(zero counter): got err %v, want nil", err)
		}
		bufs = append(bufs, b)
	}
	return bufs
}

// Inc is a replayable, plan-scoped increment of counter buf at a plan node.
func (r *Rig) Inc(buf, node int) discovery.Command {
	r.T.Helper()
	c, err := cuda.Launch(r.Dev.Registry().MustSpec(kernels.Inc), cuda.Linear(16, 16), cuda.BufferArg(r.Bufs[buf].Whole()), cuda.I32Arg(16))
	if err != nil {
		r.T.Fatalf("cachetest: cuda.Launch(inc of counter %d): got err %v, want nil", buf, err)
	}
	return discovery.Command{Cmd: c, Phase: cache.PhaseCompute, Node: node, Key: cache.LaunchKey("cachetest", c), HasKey: true, Scopes: []cache.Scope{cache.PlanScope()}}
}

// Segment is increments of the given counters at nodes 0, 1, 2, ...
func (r *Rig) Segment(bufs ...int) []discovery.Command {
	var cmds []discovery.Command
	for n, b := range bufs {
		cmds = append(cmds, r.Inc(b, n))
	}
	return cmds
}

// Barrier is an input-phase memset of a counter: an eager barrier.
func (r *Rig) Barrier(buf int) discovery.Command {
	z, _ := cuda.Zero(r.Bufs[buf].Whole())
	return discovery.Command{Cmd: z, Phase: cache.PhaseDynamicBinding, Node: cache.NoNode}
}

// Run discovers, prepares and executes a batch as a lane does: resident
// candidates replayed, everything else eager. It checks the cache's
// invariants and that every candidate got a disposition.
func (r *Rig) Run(cmds []discovery.Command, quiescent bool, boundaries ...int) (discovery.Discovery, discovery.PrepareReport) {
	r.T.Helper()
	d, err := discovery.Discover(cmds, boundaries)
	if err != nil {
		r.T.Fatalf("cachetest: Discover: got err %v, want nil", err)
	}
	enqueue := func(i int) error { return r.Stream.Enqueue(cmds[i].Cmd) }
	enc := execcache.Encoder{Enqueue: enqueue, Command: func(i int) cuda.Command { return cmds[i].Cmd }}
	if r.CaptureOnly {
		enc.Command = nil
	}
	rep, err := r.Cache.PrepareWith(r.Stream, r.Owner, d.Candidates, quiescent, enc)
	if err != nil {
		r.T.Fatalf("cachetest: Prepare: got err %v, want nil", err)
	}
	if err := r.Cache.CheckInvariants(); err != nil {
		r.T.Fatalf("cachetest: after Prepare, CheckInvariants: got %v, want nil", err)
	}
	if len(rep.Dispositions) != len(d.Candidates) {
		r.T.Fatalf("cachetest: got %d dispositions, want one per candidate (%d)", len(rep.Dispositions), len(d.Candidates))
	}
	next := 0
	eager := func(from, to int) {
		for i := from; i < to; i++ {
			if err := enqueue(i); err != nil {
				r.T.Fatalf("cachetest: eager Enqueue of command %d: got err %v, want nil", i, err)
			}
		}
	}
	for ci, cand := range d.Candidates {
		eager(next, cand.Start)
		next = cand.End
		if rep.Dispositions[ci].Resident() {
			if _, err := r.Cache.Launch(r.Stream, cand.Key); err != nil {
				r.T.Fatalf("cachetest: Launch of candidate %d (%v, %v): got err %v, want nil", ci, cand.Key.Short(), rep.Dispositions[ci], err)
			}
			continue
		}
		eager(cand.Start, cand.End)
	}
	eager(next, len(cmds))
	return d, rep
}

// Count reads counter buf's first element.
func (r *Rig) Count(buf int) int32 {
	r.T.Helper()
	return ReadCounter(r.T, r.Stream, r.Bufs[buf])
}

// ReadCounter reads a counter buffer's first element through s (which
// synchronizes first).
func ReadCounter(t testing.TB, s backend.Stream, counter cuda.Buffer) int32 {
	t.Helper()
	out := make([]byte, 4)
	reg, _ := counter.Region(0, 4)
	if err := s.Readback(reg, out); err != nil {
		t.Fatalf("cachetest: Readback of a counter: got err %v, want nil", err)
	}
	return int32(binary.LittleEndian.Uint32(out))
}
