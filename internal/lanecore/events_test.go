package lanecore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/cachetest"

	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/lanes"
)

// countingStream counts the events a lane records and releases.
type countingStream struct {
	backend.Stream
	timed, fences, released *int
}

func (s countingStream) Record() (backend.Event, error) {
	*s.timed++
	e, err := s.Stream.Record()
	return countingEvent{e, s.released}, err
}

func (s countingStream) RecordFence() (backend.Event, error) {
	*s.fences++
	e, err := s.Stream.RecordFence()
	return countingEvent{e, s.released}, err
}

type countingEvent struct {
	backend.Event
	released *int
}

// Elapsed unwraps the other event, which the device knows only bare.
func (e countingEvent) Elapsed(start backend.Event) (time.Duration, error) {
	if c, ok := start.(countingEvent); ok {
		start = c.Event
	}
	return e.Event.Elapsed(start)
}

func (e countingEvent) Release() {
	*e.released++
	e.Event.Release()
}

// TestCompletedSubmissionsReleaseTheirEvents: without timing a fence is an
// event without timing; with timing the fence times the submission, and the
// first timed command starts at its start event and the last ends at its
// fence (one command: two events in all; two: four). A submission enqueued
// while the previous timed fence is still pending starts at that fence (one
// event fewer); after it completed, it records its own start. Either way
// every event of a completed submission goes back to the stream, once.
func TestCompletedSubmissionsReleaseTheirEvents(t *testing.T) {
	for _, tc := range []struct {
		timing        lanes.TimingMode
		entries       int
		timed, fences int // per submission, with its own start event
		settle        bool
	}{
		{lanes.TimingOff, 1, 0, 1, false}, {lanes.TimingCompletion, 1, 2, 0, false}, {lanes.TimingKernel, 1, 2, 0, false},
		{lanes.TimingKernel, 2, 4, 0, false}, {lanes.TimingKernel, 3, 6, 0, false},
		{lanes.TimingCompletion, 1, 2, 0, true}, {lanes.TimingKernel, 2, 4, 0, true},
	} {
		t.Run(fmt.Sprintf("%v/%d/settled=%v", tc.timing, tc.entries, tc.settle), func(t *testing.T) {
			dev, err := sim.New(sim.Config{Clock: sim.ClockVirtual})
			if err != nil {
				t.Fatalf("sim.New: got err %v, want nil", err)
			}
			defer dev.Close()
			s, err := backend.Must(dev).NewStream()
			if err != nil {
				t.Fatalf("NewStream: got err %v, want nil", err)
			}
			var timed, fences, released int
			cs := countingStream{s, &timed, &fences, &released}
			l, err := lanecore.New(lanecore.Config{ID: 1, Device: backend.Must(dev), Stream: cs, Runtime: "lanes-test"})
			if err != nil {
				t.Fatalf("lanecore.New: got err %v, want nil", err)
			}
			r := &rig{t: t, dev: dev, s: cs, lane: l}
			r.bufs = cachetest.Counters(t, dev, s, 1)
			r.settle()
			var entries []lanes.Entry
			for range tc.entries {
				entries = append(entries, r.eagerInc(0, 0))
			}
			const n = 5
			var rs []lanes.Receipt
			for range n {
				if _, err := l.Submit(lanes.Batch{Entries: entries, Timing: tc.timing}); err != nil {
					t.Fatalf("Submit: got err %v, want nil", err)
				}
				if tc.settle { // the fence completes before the next submission
					r.settle()
					rs = append(rs, l.Poll()...)
				}
			}
			r.settle()
			rs = append(rs, l.Poll()...)
			if len(rs) != n {
				t.Fatalf("got %d receipts, want %d", len(rs), n)
			}
			want := n * tc.timed
			if !tc.settle && tc.timed > 0 {
				want = n*(tc.timed-1) + 1 // all but the first start at the previous fence
			}
			if timed != want || fences != n*tc.fences {
				t.Fatalf("got %d timing events and %d fences recorded, want %d and %d", timed, fences, want, n*tc.fences)
			}
			if released != timed+fences {
				t.Fatalf("got %d events released, want all %d recorded", released, timed+fences)
			}
			for _, rc := range rs {
				// The same work costs the same on the virtual clock, whether
				// the submission began at its own event or a borrowed one
				// (the first, on an idle stream, also pays the launch latency;
				// so does every one after a settle).
				if rc.DeviceTime != rs[len(rs)-1].DeviceTime && rc.Fence != rs[0].Fence {
					t.Fatalf("receipt %d: got device time %v, want %v as the last's: the same work", rc.Fence, rc.DeviceTime, rs[len(rs)-1].DeviceTime)
				}
				if tc.timing >= lanes.TimingCompletion && rc.DeviceTime <= 0 {
					t.Fatalf("receipt %d: got device time %v, want > 0 (%d incs, each with a cost on the virtual clock)", rc.Fence, rc.DeviceTime, tc.entries)
				}
				if want := 0; tc.timing >= lanes.TimingKernel {
					want = tc.entries
					if len(rc.Spans) != want {
						t.Fatalf("receipt %d: got %d spans, want one per command, %d", rc.Fence, len(rc.Spans), want)
					}
					var sum time.Duration
					for _, sp := range rc.Spans {
						sum += sp.Duration
					}
					if sum <= 0 || sum > rc.DeviceTime {
						t.Fatalf("receipt %d: got spans summing to %v in a device time of %v, want more than 0 and at most it", rc.Fence, sum, rc.DeviceTime)
					}
				}
			}
		})
	}
}
