package lanes_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/codes"
	"github.com/lanesched/lanes/internal/lanecore"
	laneerr "github.com/lanesched/lanes/internal/laneerr"
	"github.com/lanesched/lanes/lanes"
)

func buffer(id uint64) cuda.Buffer {
	return cuda.Buffer{Device: 1, ID: id, Size: 1 << 16, Align: 256, Elem: cuda.F32, Addr: id << 20}
}

func zero(t *testing.T, b cuda.Buffer) cuda.Command {
	t.Helper()
	c, err := cuda.Zero(b.Whole())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The entry constructors give each entry the phase, node and replay
// contract their docs promise: Replayed keys a compute command for replay
// on a plan node with every region plan-scoped; the eager ones carry no
// contract and belong to no node.
func TestEntryConstructors(t *testing.T) {
	c := zero(t, buffer(1))
	r := lanes.Replayed("p", 3, c)
	if r.Phase != cache.PhaseCompute || r.Node != 3 || r.Replay == nil || len(r.Replay.Scopes) != 1 || r.Replay.Scopes[0] != cache.PlanScope() {
		t.Fatalf("Replayed: %+v", r)
	}
	if again := lanes.Replayed("p", 3, c); again.Replay.Key != r.Replay.Key {
		t.Fatalf("one command, one provider: keys %s and %s", r.Replay.Key, again.Replay.Key)
	}
	if other := lanes.Replayed("q", 3, c); other.Replay.Key == r.Replay.Key {
		t.Fatal("two providers gave one key")
	}
	for _, c2 := range []struct {
		e     lanes.Entry
		phase cache.Phase
	}{
		{lanes.Input(c), cache.PhaseDynamicBinding},
		{lanes.Output(c), cache.PhaseReadout},
		{lanes.Eager(cache.PhaseInitialization, c), cache.PhaseInitialization},
	} {
		if c2.e.Phase != c2.phase || c2.e.Node != cache.NoNode || c2.e.Replay != nil {
			t.Fatalf("eager entry %+v: want phase %s, no node, no contract", c2.e, c2.phase)
		}
	}
	rc := lanes.Replayable(c, r.Replay.Key, cache.LaneScope(2))
	if len(rc.Scopes) != 1 || rc.Scopes[0] != cache.LaneScope(2) {
		t.Fatalf("Replayable scopes %v", rc.Scopes)
	}
}

// Replays counts a receipt's rows: how many replayed, and by reason why
// each other one did not; a receipt without rows counts nothing.
func TestReplaysCountsRows(t *testing.T) {
	var rec lanes.Receipt
	rec.Attribution.Rows = []lanes.Row{
		{Replayed: true}, {Replayed: true},
		{Reason: cache.ReasonNotCompute}, {Reason: cache.ReasonNotCompute},
		{Reason: cache.ReasonCapacityDeferred},
	}
	got := rec.Replays()
	if got.Entries != 5 || got.Replayed != 2 || got.Eager["not_compute"] != 2 || got.Eager["capacity_deferred"] != 1 || len(got.Eager) != 2 {
		t.Fatalf("Replays: %+v", got)
	}
	if empty := (lanes.Receipt{}).Replays(); empty.Entries != 0 || empty.Replayed != 0 || empty.Eager != nil {
		t.Fatalf("an empty receipt counts %+v", empty)
	}
}

// A layout's fields must tile its region from 0, without gaps or
// overlaps; each refusal says what to fix and is errors.Is ErrPatch.
func TestLayoutValidate(t *testing.T) {
	region := buffer(2).Whole()
	region.Length = 16
	ok := lanes.Layout{ID: "l", Region: region, Fields: []lanes.Field{{Offset: 0, Length: 4}, {Offset: 4, Length: 12}}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("a tiling layout: %v", err)
	}
	for name, l := range map[string]lanes.Layout{
		"no id":   {Region: region, Fields: ok.Fields},
		"a gap":   {ID: "l", Region: region, Fields: []lanes.Field{{Offset: 0, Length: 4}, {Offset: 8, Length: 8}}},
		"empty":   {ID: "l", Region: region, Fields: []lanes.Field{{Offset: 0, Length: 0}}},
		"short":   {ID: "l", Region: region, Fields: []lanes.Field{{Offset: 0, Length: 8}}},
		"nowhere": {ID: "l", Fields: ok.Fields},
	} {
		if err := l.Validate(); !errors.Is(err, lanes.ErrPatch) || !strings.Contains(err.Error(), "layout") {
			t.Fatalf("%s: %v, want a layout error errors.Is ErrPatch", name, err)
		}
	}
}

// ForHandles visits every device buffer a batch names (its commands'
// regions, its patches' destinations, its retained buffers) and every
// host buffer it stages through, and stops at the first error.
func TestForHandlesVisitsEveryHandle(t *testing.T) {
	layout := &lanes.Layout{ID: "l", Region: buffer(3).Whole()}
	host := cuda.HostBuffer{Device: 1, ID: 9, Size: 1 << 16}
	stage, err := cuda.StageIn(buffer(4).Whole(), host.Whole())
	if err != nil {
		t.Fatal(err)
	}
	b := lanes.Batch{
		Entries: []lanes.Entry{lanes.Input(zero(t, buffer(1))), lanes.Input(stage), {Invoke: nil, Command: zero(t, buffer(5))}},
		Patches: []lanes.Patch{{Layout: layout}, {Dst: buffer(6).Whole()}},
		Retain:  []cuda.Buffer{buffer(7)},
	}
	var devs []uint64
	var hosts []uint64
	if err := lanecore.ForHandles(&b, func(b cuda.Buffer) error { devs = append(devs, b.ID); return nil }, func(h cuda.HostBuffer) error { hosts = append(hosts, h.ID); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := []uint64{1, 4, 5, 3, 6, 7}; !slices.Equal(devs, want) || !slices.Equal(hosts, []uint64{9}) {
		t.Fatalf("visited devices %v, hosts %v; want %v and [9]", devs, hosts, want)
	}
	stop := errors.New("stop")
	n := 0
	if err := lanecore.ForHandles(&b, func(cuda.Buffer) error { n++; return stop }, nil); err != stop || n != 1 {
		t.Fatalf("an error stops the walk: %v after %d", err, n)
	}
}

// Wrap classifies its cause: a definitely-not-submitted error keeps the
// cause's retryability, a submitted one is never retryable, and the
// message says which.
func TestWrapClassifies(t *testing.T) {
	e := laneerr.Wrap("submit", true, lanes.ErrInvalidBatch)
	if !errors.Is(e, lanes.ErrInvalidBatch) || !e.Class().NotSubmitted || e.Class().Code != codes.BatchInvalid || !strings.HasSuffix(e.Error(), "(definitely not submitted)") {
		t.Fatalf("not submitted: %v, class %+v", e, e.Class())
	}
	oom := laneerr.Wrap("fence", false, cuda.ErrOutOfMemory)
	if oom.Retryable || oom.NotSubmitted || strings.Contains(oom.Error(), "not submitted") || cuda.Classify(oom).Code != codes.OutOfMemory {
		t.Fatalf("submitted: %v, class %+v", oom, oom.Class())
	}
	if retry := laneerr.Wrap("submit", true, cuda.ErrOutOfMemory); retry.Retryable != cuda.Classify(cuda.ErrOutOfMemory).Retryable {
		t.Fatalf("not submitted keeps the cause's retryability: %+v", retry.Class())
	}
	if s := (&lanes.Error{Code: codes.LaneFailed}).Error(); !strings.Contains(s, "with no cause") {
		t.Fatalf("an error without a cause reads %q", s)
	}
}

// The names of forms, paths, timing modes and outcomes are stable; out of
// range values read "unknown".
func TestVocabularyNames(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{lanes.FormNone.String(), "none"}, {lanes.FormWave.String(), "wave"}, {lanes.Form(9).String(), "unknown"},
		{lanes.PathAdaptive.String(), "adaptive"}, {lanes.PathReplayedWithBoundaries.String(), "replayed_with_boundaries"}, {lanes.Path(9).String(), "unknown"},
		{lanes.TimingOff.String(), "off"}, {lanes.TimingVerification.String(), "verification"}, {lanes.TimingMode(9).String(), "unknown"},
		{lanes.OutcomeSucceeded.String(), "succeeded"}, {lanes.OutcomeIndeterminate.String(), "indeterminate"}, {lanes.OutcomeRefused.String(), "refused"},
	} {
		if c.got != c.want {
			t.Fatalf("name %q, want %q", c.got, c.want)
		}
	}
}
