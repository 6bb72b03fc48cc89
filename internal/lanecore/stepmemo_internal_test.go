package lanecore

import (
	"reflect"
	"slices"
	"testing"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	discovery "github.com/lanesched/lanes/internal/discovery"

	lanes "github.com/lanesched/lanes/lanes"
)

// TestRememberedStepMatchesOnlyItsOwnBatch: a fingerprint only finds the
// slot; the batch is compared field by field, so a batch that differs from
// the remembered one anywhere planning reads is no hit even when the
// fingerprints collide.
func TestRememberedStepMatchesOnlyItsOwnBatch(t *testing.T) {
	buf := cuda.Buffer{Device: 1, ID: 1, Size: 64, Elem: cuda.I32, Addr: 4096}
	launch := cuda.Command{Kind: cuda.KindLaunch, Kernel: "inc_i32", Config: cuda.Linear(16, 16), Args: []cuda.Arg{cuda.BufferArg(buf.Whole()), cuda.I32Arg(16)}}
	base := func() lanes.Batch {
		c := launch
		c.Args = slices.Clone(launch.Args)
		return lanes.Batch{Entries: []lanes.Entry{{Phase: cache.PhaseCompute, Node: 0, Command: c, Replay: lanes.Replayable(c, cache.LaunchKey("t", c), cache.LaneScope(1))}}}
	}
	var m stepMemo
	b := base()
	const fp = 42
	m.remember(&b, fp, discovery.Discovery{}, 0)
	m.remember(&b, fp, discovery.Discovery{}, 0) // the second sighting is kept
	if m.lookup(&b, fp) == nil {
		t.Fatalf("lookup of the remembered batch: got nil, want its step")
	}
	b.Entries[0].Command.Args[1] = cuda.I32Arg(15) // the caller's own slice changes: the copy must not
	if m.lookup(&b, fp) != nil {
		t.Fatalf("lookup after the caller changed a scalar in place: got a hit, want none")
	}
	changes := map[string]func(*lanes.Batch){
		"kernel": func(b *lanes.Batch) { b.Entries[0].Command.Kernel = "other" },
		"scalar": func(b *lanes.Batch) { b.Entries[0].Command.Args[1] = cuda.I32Arg(8) },
		"scope":  func(b *lanes.Batch) { b.Entries[0].Replay.Scopes[0] = cache.LaneScope(2) },
		"key": func(b *lanes.Batch) {
			b.Entries[0].Replay = &lanes.ReplayContract{Scopes: []cache.Scope{cache.LaneScope(1)}}
		},
		"no key":     func(b *lanes.Batch) { b.Entries[0].Replay = nil },
		"phase":      func(b *lanes.Batch) { b.Entries[0].Phase = cache.PhaseReadout },
		"node":       func(b *lanes.Batch) { b.Entries[0].Node = 3 },
		"path":       func(b *lanes.Batch) { b.Path = lanes.PathReplayedOnly },
		"timing":     func(b *lanes.Batch) { b.Timing = lanes.TimingReplay },
		"boundaries": func(b *lanes.Batch) { b.EagerBoundaries = []int{0} },
		"retain":     func(b *lanes.Batch) { b.Retain = []cuda.Buffer{buf} },
		"entries":    func(b *lanes.Batch) { b.Entries = append(b.Entries, b.Entries[0]) },
		"work":       func(b *lanes.Batch) { b.Entries[0].Work.Tokens = 9 },
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

// TestMemoComparesEveryField: the memo compares commands field by field by
// hand (sameArgs, sameRegion, sameHostRegion), so a field added to any of
// those types must be compared too. It changes every leaf field of a
// remembered launch's argument, destination, source and staging, one at a
// time, found by reflection: each change must miss.
func TestMemoComparesEveryField(t *testing.T) {
	buf := cuda.Buffer{Device: 1, ID: 1, Size: 64, Align: 4, Elem: cuda.I32, Addr: 4096}
	host := cuda.HostRegion{Buffer: cuda.HostBuffer{Device: 1, ID: 7, Size: 64}, Offset: 0, Length: 64}
	base := func() lanes.Batch {
		c := cuda.Command{Kind: cuda.KindLaunch, Kernel: "inc_i32", Config: cuda.Linear(16, 16),
			Args: []cuda.Arg{cuda.BufferArg(buf.Whole()), cuda.I32Arg(16)}, Dst: buf.Whole(), Src: buf.Whole(), Staging: host}
		return lanes.Batch{Entries: []lanes.Entry{{Phase: cache.PhaseCompute, Node: 0, Command: c}}}
	}
	var m stepMemo
	b := base()
	const fp = 7
	m.remember(&b, fp, discovery.Discovery{}, 0)
	m.remember(&b, fp, discovery.Discovery{}, 0)
	if m.lookup(&b, fp) == nil {
		t.Fatalf("lookup of the remembered batch: got nil, want its step")
	}
	roots := map[string]func(*cuda.Command) reflect.Value{
		"Args[0]": func(c *cuda.Command) reflect.Value { return reflect.ValueOf(&c.Args[0]).Elem() },
		"Args[1]": func(c *cuda.Command) reflect.Value { return reflect.ValueOf(&c.Args[1]).Elem() },
		"Dst":     func(c *cuda.Command) reflect.Value { return reflect.ValueOf(&c.Dst).Elem() },
		"Src":     func(c *cuda.Command) reflect.Value { return reflect.ValueOf(&c.Src).Elem() },
		"Staging": func(c *cuda.Command) reflect.Value { return reflect.ValueOf(&c.Staging).Elem() },
		"Config":  func(c *cuda.Command) reflect.Value { return reflect.ValueOf(&c.Config).Elem() },
	}
	for name, root := range roots {
		probe := base()
		for _, path := range leafPaths(root(&probe.Entries[0].Command), name) {
			c := base()
			leaf := root(&c.Entries[0].Command).FieldByIndex(path.index)
			switch leaf.Kind() {
			case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
				leaf.SetUint(leaf.Uint() + 1)
			case reflect.Int, reflect.Int32, reflect.Int64:
				leaf.SetInt(leaf.Int() + 1)
			case reflect.String:
				leaf.SetString(leaf.String() + "x")
			default:
				t.Fatalf("%s is a %v: teach this test (and the memo's comparison) that kind", path.name, leaf.Kind())
			}
			if m.lookup(&c, fp) != nil {
				t.Errorf("lookup with %s changed: got a hit, want none (compare the field in lanes/stepmemo.go)", path.name)
			}
		}
	}
}

// leafPath is one scalar field under a struct: its name and index path.
type leafPath struct {
	name  string
	index []int
}

// leafPaths lists every scalar field under v (a struct), depth first.
func leafPaths(v reflect.Value, prefix string) []leafPath {
	var out []leafPath
	for i := range v.NumField() {
		f, name := v.Field(i), prefix+"."+v.Type().Field(i).Name
		if f.Kind() == reflect.Struct {
			for _, sub := range leafPaths(f, name) {
				out = append(out, leafPath{sub.name, append([]int{i}, sub.index...)})
			}
			continue
		}
		out = append(out, leafPath{name, []int{i}})
	}
	return out
}
