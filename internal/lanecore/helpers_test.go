package lanecore_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/cachetest"

	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/lanes"
)

const us = time.Microsecond

type rig struct {
	t    testing.TB
	dev  sim.Device
	s    backend.Stream
	lane *lanecore.Lane
	bufs []cuda.Buffer
}

func newRig(t testing.TB, mode sim.ClockMode, counters int, faults ...sim.Fault) *rig {
	t.Helper()
	dev, s := simStream(t, sim.Config{Clock: mode, Faults: faults, Trace: mode == sim.ClockVirtual})
	l, err := lanecore.New(lanecore.Config{ID: 1, Device: backend.Must(dev), Stream: s, Runtime: "lanes-test"})
	if err != nil {
		t.Fatalf("lanecore.New: got err %v, want nil", err)
	}
	r := &rig{t: t, dev: dev, s: s, lane: l, bufs: cachetest.Counters(t, dev, s, counters)}
	if err := s.Synchronize(); err != nil {
		t.Fatalf("Synchronize after zeroing the counters: got err %v, want nil", err)
	}
	return r
}

// simStream opens a simulated device, closed when the test ends, and a
// stream on it.
func simStream(t testing.TB, cfg sim.Config) (sim.Device, backend.Stream) {
	t.Helper()
	dev, err := sim.New(cfg)
	if err != nil {
		t.Fatalf("sim.New: got err %v, want nil", err)
	}
	t.Cleanup(func() { _ = dev.Close() })
	s, err := backend.Must(dev).NewStream()
	if err != nil {
		t.Fatalf("NewStream: got err %v, want nil", err)
	}
	return dev, s
}

// inc is a replayable compute entry incrementing counter buf at node.
func (r *rig) inc(buf, node int) lanes.Entry {
	e := r.eagerInc(buf, node)
	e.Replay = lanes.Replayed("lanes-test", node, e.Command).Replay
	return e
}

// eagerInc is the same entry without a replay key.
func (r *rig) eagerInc(buf, node int) lanes.Entry {
	c, err := cuda.Launch(r.dev.Registry().MustSpec(kernels.Inc), cuda.Linear(16, 16), cuda.BufferArg(r.bufs[buf].Whole()), cuda.I32Arg(16))
	if err != nil {
		r.t.Fatalf("cuda.Launch(inc of counter %d): got err %v, want nil", buf, err)
	}
	return lanes.Entry{Phase: cache.PhaseCompute, Node: node, Command: c, Work: lanes.Work{Form: lanes.FormSingle, ParticipantCount: 1, Tokens: 1}}
}

func (r *rig) steps(bufs ...int) []lanes.Entry {
	var out []lanes.Entry
	for n, b := range bufs {
		out = append(out, r.inc(b, n))
	}
	return out
}

func (r *rig) submit(b lanes.Batch) lanecore.Submission {
	r.t.Helper()
	s, err := r.lane.Submit(b)
	if err != nil {
		r.t.Fatalf("Submit: got err %v, want nil", err)
	}
	return s
}

// settle advances the virtual clock far enough for everything enqueued.
func (r *rig) settle() {
	if c := r.dev.Clock(); c != nil {
		c.Advance(10 * time.Millisecond)
	}
}

func (r *rig) count(buf int) int32 {
	r.t.Helper()
	out := make([]byte, 4)
	reg, _ := r.bufs[buf].Region(0, 4)
	if err := r.lane.Readback(reg, lanecore.ReadbackLayout{Elem: cuda.I32, Count: 1}, out); err != nil {
		r.t.Fatalf("Readback of counter %d: got err %v, want nil", buf, err)
	}
	return int32(binary.LittleEndian.Uint32(out))
}

// receiptFences lists the receipts' fences, in order.
func receiptFences(rcs []lanes.Receipt) []uint64 {
	out := make([]uint64, 0, len(rcs))
	for _, rc := range rcs {
		out = append(out, rc.Fence)
	}
	return out
}

// traceLen is how many operations the device has scheduled.
func (r *rig) traceLen() int { return len(r.dev.Trace()) }
