package lanes_test

import (
	"testing"

	"github.com/lanesched/lanes/cache/cachetest"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/lanes"
)

// countingStream counts the events a lane records and releases.
type countingStream struct {
	cuda.Stream
	timed, fences, released *int
}

func (s countingStream) Record() (cuda.Event, error) {
	*s.timed++
	e, err := s.Stream.Record()
	return countingEvent{e, s.released}, err
}

func (s countingStream) RecordFence() (cuda.Event, error) {
	*s.fences++
	e, err := s.Stream.RecordFence()
	return countingEvent{e, s.released}, err
}

type countingEvent struct {
	cuda.Event
	released *int
}

func (e countingEvent) Release() {
	*e.released++
	e.Event.Release()
}

// TestCompletedSubmissionsReleaseTheirEvents: without timing a fence is an
// event without timing; with timing the fence times the submission; either
// way every event of a completed submission goes back to the stream.
func TestCompletedSubmissionsReleaseTheirEvents(t *testing.T) {
	for _, tc := range []struct {
		timing        lanes.TimingMode
		timed, fences int
	}{{lanes.TimingOff, 0, 1}, {lanes.TimingCompletion, 2, 0}, {lanes.TimingKernel, 4, 0}} {
		t.Run(tc.timing.String(), func(t *testing.T) {
			dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost})
			if err != nil {
				t.Fatalf("sim.New: got err %v, want nil", err)
			}
			defer dev.Close()
			s, err := dev.NewStream()
			if err != nil {
				t.Fatalf("NewStream: got err %v, want nil", err)
			}
			var timed, fences, released int
			cs := countingStream{s, &timed, &fences, &released}
			l, err := lanes.New(lanes.Config{ID: 1, Device: dev, Stream: cs, Runtime: "lanes-test"})
			if err != nil {
				t.Fatalf("lanes.New: got err %v, want nil", err)
			}
			r := &rig{t: t, dev: dev, s: cs, lane: l}
			r.bufs = cachetest.Counters(t, dev, s, 1)
			const n = 5
			for range n {
				if _, err := l.Submit(lanes.Batch{Entries: []lanes.Entry{r.eagerInc(0, 0)}, Timing: tc.timing}); err != nil {
					t.Fatalf("Submit: got err %v, want nil", err)
				}
			}
			rs, _, err := l.Synchronize()
			if err != nil || len(rs) != n {
				t.Fatalf("Synchronize: got %d receipts, err %v; want %d, nil", len(rs), err, n)
			}
			if timed != n*tc.timed || fences != n*tc.fences {
				t.Fatalf("got %d timing events and %d fences recorded, want %d and %d", timed, fences, n*tc.timed, n*tc.fences)
			}
			if released != timed+fences {
				t.Fatalf("got %d events released, want all %d recorded", released, timed+fences)
			}
		})
	}
}
