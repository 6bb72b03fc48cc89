package lanes

import (
	"slices"
	"testing"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
)

// TestRememberedStepMatchesOnlyItsOwnBatch: a fingerprint only finds the
// slot; the batch is compared field by field, so a batch that differs from
// the remembered one anywhere planning reads is no hit even when the
// fingerprints collide.
func TestRememberedStepMatchesOnlyItsOwnBatch(t *testing.T) {
	buf := cuda.Buffer{Device: 1, ID: 1, Size: 64, Elem: cuda.I32, Addr: 4096}
	launch := cuda.Command{Kind: cuda.KindLaunch, Kernel: "inc_i32", Config: cuda.Linear(16, 16), Args: []cuda.Arg{cuda.BufferArg(buf.Whole()), cuda.I32Arg(16)}}
	base := func() Batch {
		c := launch
		c.Args = slices.Clone(launch.Args)
		return Batch{Entries: []Entry{{Phase: cache.PhaseCompute, Node: 0, Command: c, Replay: Replayable(c, cache.LaunchKey("t", c), cache.LaneScope(1))}}}
	}
	var m stepMemo
	b := base()
	const fp = 42
	m.remember(&b, fp, cache.Discovery{}, 0)
	m.remember(&b, fp, cache.Discovery{}, 0) // the second sighting is kept
	if m.lookup(&b, fp) == nil {
		t.Fatalf("lookup of the remembered batch: got nil, want its step")
	}
	b.Entries[0].Command.Args[1] = cuda.I32Arg(15) // the caller's own slice changes: the copy must not
	if m.lookup(&b, fp) != nil {
		t.Fatalf("lookup after the caller changed a scalar in place: got a hit, want none")
	}
	changes := map[string]func(*Batch){
		"kernel":     func(b *Batch) { b.Entries[0].Command.Kernel = "other" },
		"scalar":     func(b *Batch) { b.Entries[0].Command.Args[1] = cuda.I32Arg(8) },
		"scope":      func(b *Batch) { b.Entries[0].Replay.Scopes[0] = cache.LaneScope(2) },
		"key":        func(b *Batch) { b.Entries[0].Replay = &ReplayContract{Scopes: []cache.Scope{cache.LaneScope(1)}} },
		"no key":     func(b *Batch) { b.Entries[0].Replay = nil },
		"phase":      func(b *Batch) { b.Entries[0].Phase = cache.PhaseReadout },
		"node":       func(b *Batch) { b.Entries[0].Node = 3 },
		"path":       func(b *Batch) { b.Path = PathReplayedOnly },
		"timing":     func(b *Batch) { b.Timing = TimingReplay },
		"boundaries": func(b *Batch) { b.EagerBoundaries = []int{0} },
		"retain":     func(b *Batch) { b.Retain = []cuda.Buffer{buf} },
		"entries":    func(b *Batch) { b.Entries = append(b.Entries, b.Entries[0]) },
		"work":       func(b *Batch) { b.Entries[0].Work.Tokens = 9 },
	}
	for name, change := range changes {
		c := base()
		change(&c)
		if m.lookup(&c, fp) != nil {
			t.Errorf("lookup of the batch with its %s changed, under the same fingerprint: got a hit, want none", name)
		}
	}
	if m.lookup(new(base()), fp) == nil {
		t.Fatalf("lookup of an equal batch built afresh: got nil, want the step")
	}
}
