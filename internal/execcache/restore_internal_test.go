package execcache

import (
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	discovery "github.com/lanesched/lanes/internal/discovery"
)

// partialExec is an executable whose device refuses its next rebind at
// a node past the first (the nodes before it took theirs), as the GPU
// does node by node, then takes rebinds again.
type partialExec struct {
	backend.Exec
	refuseAt  int
	rebinds   [][]cuda.Command
	destroyed bool
}

func (x *partialExec) Rebind(cmds []cuda.Command) error {
	x.rebinds = append(x.rebinds, cmds)
	if x.refuseAt > 0 {
		at := x.refuseAt
		x.refuseAt = 0
		return &backend.RebindRefusedError{Refusal: backend.RebindDeviceRefused, Node: at, Detail: "refused"}
	}
	return nil
}

func (x *partialExec) DeviceBytes() int64 { return 1 }
func (x *partialExec) Destroy() error     { x.destroyed = true; return nil }

// TestRestoreAfterPartialRebind: a donor the device refused past its first
// node is rebound to its own recipe and stays resident under its key; one
// refused at its first node is left as it was; one with no recipe to go
// back to is evicted.
func TestRestoreAfterPartialRebind(t *testing.T) {
	c := New()
	if _, err := c.Configure(4); err != nil {
		t.Fatal(err)
	}
	own := []cuda.Command{{Kind: cuda.KindLaunch, Kernel: "k"}}
	put := func(key byte, recipe []cuda.Command) (*Executable, *partialExec) {
		x := &partialExec{}
		e := &Executable{Key: discovery.SegmentKey{key}, Exec: x, Owner: "a", recipe: recipe, uploaded: true, DeviceBytes: 1, lastUsed: c.tick()}
		c.put(e)
		return e, x
	}
	var r discovery.PrepareReport
	for _, tc := range []struct {
		name     string
		at       int
		recipe   []cuda.Command
		resident bool
		rebinds  int
	}{
		{"refused at the first node", 0, own, true, 0},
		{"refused past the first node", 2, own, true, 1},
		{"refused past the first node, no recipe", 2, nil, false, 0},
	} {
		e, x := put(byte(len(c.entries)+1), tc.recipe)
		gone, err := c.restore(&r, e, &backend.RebindRefusedError{Refusal: backend.RebindDeviceRefused, Node: tc.at}, true)
		if err != nil || gone == tc.resident {
			t.Fatalf("%s: restore: got gone %v, err %v; want gone %v, nil", tc.name, gone, err, !tc.resident)
		}
		if _, ok := c.entries[e.Key]; ok != tc.resident || x.destroyed == tc.resident {
			t.Fatalf("%s: got resident %v (destroyed %v), want resident %v", tc.name, ok, x.destroyed, tc.resident)
		}
		if len(x.rebinds) != tc.rebinds || tc.rebinds > 0 && &x.rebinds[0][0] != &own[0] {
			t.Fatalf("%s: got %d rebinds, want %d (to its own recipe)", tc.name, len(x.rebinds), tc.rebinds)
		}
		if err := c.CheckInvariants(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
	}
}
