package discovery_test

import (
	"testing"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	discovery "github.com/lanesched/lanes/internal/discovery"
)

// zeroCmd is a replayable memset of buffer id at node, in the compute phase.
func zeroCmd(id uint64, node int, scope cache.Scope) discovery.Command {
	c := cuda.Command{Kind: cuda.KindZero, Dst: buffer(id, cuda.F32, 0x1000*id).Whole()}
	return discovery.Command{Cmd: c, Phase: cache.PhaseCompute, Node: node, Key: cache.NewKey("test", "zero").Finish(), HasKey: true, Scopes: []cache.Scope{scope}}
}

func reasons(d discovery.Discovery) []cache.Reason { return d.Reasons }

func spans(d discovery.Discovery) [][2]int {
	var out [][2]int
	for _, c := range d.Candidates {
		out = append(out, [2]int{c.Start, c.End})
	}
	return out
}

func TestDiscoverReasons(t *testing.T) {
	plan, lane1, lane2 := cache.PlanScope(), cache.LaneScope(1), cache.LaneScope(2)
	noKey := zeroCmd(9, 1, plan)
	noKey.HasKey = false
	noScope := zeroCmd(9, 1, plan)
	noScope.Scopes = []cache.Scope{{}}
	noScopes := zeroCmd(9, 1, plan)
	noScopes.Scopes = nil
	input := zeroCmd(9, 1, plan)
	input.Phase = cache.PhaseDynamicBinding
	inputNoKey := input
	inputNoKey.HasKey = false
	inputUpload := discovery.Command{Cmd: cuda.Command{Kind: cuda.KindUpload, Dst: cuda.Region{Buffer: buffer(9, cuda.F32, 0x9000), Length: 4}, Host: make([]byte, 4)},
		Phase: cache.PhaseDynamicBinding, Node: cache.NoNode, Key: cache.NewKey("t", "upload").Finish(), HasKey: true, Scopes: []cache.Scope{plan}}
	readout := discovery.Command{Cmd: cuda.Command{Kind: cuda.KindCopy, Dst: buffer(7, cuda.F32, 0x7000).Whole(), Src: buffer(8, cuda.F32, 0x8000).Whole()},
		Phase: cache.PhaseReadout, Node: cache.NoNode, Key: cache.NewKey("t", "copy").Finish(), HasKey: true, Scopes: []cache.Scope{lane1, lane1}}
	mixed := discovery.Command{Cmd: cuda.Command{Kind: cuda.KindCopy, Dst: buffer(1, cuda.F32, 0x1000).Whole(), Src: buffer(2, cuda.F32, 0x9000).Whole()},
		Key: cache.NewKey("t", "copy").Finish(), HasKey: true, Node: 1, Scopes: []cache.Scope{lane1, lane2}}

	cases := []struct {
		name       string
		cmds       []discovery.Command
		boundaries []int
		want       []cache.Reason
		spans      [][2]int
	}{
		{"all replayable: one segment", []discovery.Command{zeroCmd(1, 0, plan), zeroCmd(2, 1, lane1), zeroCmd(3, 2, plan)}, nil,
			[]cache.Reason{0, 0, 0}, [][2]int{{0, 3}}},
		{"missing key splits", []discovery.Command{zeroCmd(1, 0, plan), noKey, zeroCmd(3, 2, plan)}, nil,
			[]cache.Reason{0, cache.ReasonProviderKeyMissing, 0}, [][2]int{{0, 1}, {2, 3}}},
		{"missing scope", []discovery.Command{noScope, noScopes}, nil,
			[]cache.Reason{cache.ReasonAddressScopeMissing, cache.ReasonAddressScopeMissing}, nil},
		{"command mixes two lanes", []discovery.Command{mixed}, nil, []cache.Reason{cache.ReasonAddressScopeConflict}, nil},
		{"run mixes two lanes", []discovery.Command{zeroCmd(1, 0, lane1), zeroCmd(2, 1, plan), zeroCmd(3, 2, lane2)}, nil,
			[]cache.Reason{cache.ReasonAddressScopeConflict, cache.ReasonAddressScopeConflict, cache.ReasonAddressScopeConflict}, nil},
		{"unkeyed input is a barrier", []discovery.Command{zeroCmd(1, 0, plan), inputNoKey, zeroCmd(3, 2, plan)}, nil,
			[]cache.Reason{0, cache.ReasonNotCompute, 0}, [][2]int{{0, 1}, {2, 3}}},
		{"keyed upload input is a barrier (its bytes would be baked in)", []discovery.Command{zeroCmd(1, 0, plan), inputUpload, zeroCmd(3, 2, plan)}, nil,
			[]cache.Reason{0, cache.ReasonNotCompute, 0}, [][2]int{{0, 1}, {2, 3}}},
		{"keyed stable input and readout join the segment", []discovery.Command{input, zeroCmd(1, 0, lane1), zeroCmd(3, 2, plan), readout}, nil,
			[]cache.Reason{0, 0, 0, 0}, [][2]int{{0, 4}}},
		{"eager boundary splits", []discovery.Command{zeroCmd(1, 0, plan), zeroCmd(2, 1, plan), zeroCmd(3, 2, plan)}, []int{1},
			[]cache.Reason{0, cache.ReasonEagerBoundary, 0}, [][2]int{{0, 1}, {2, 3}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d, err := discovery.Discover(c.cmds, c.boundaries)
			if err != nil {
				t.Fatalf("Discover: got err %v, want nil", err)
			}
			if got := reasons(d); len(got) != len(c.want) {
				t.Fatalf("got %d reasons %v, want %d %v", len(got), got, len(c.want), c.want)
			}
			for i, r := range reasons(d) {
				if r != c.want[i] {
					t.Fatalf("command %d: got reason %v, want %v", i, r, c.want[i])
				}
			}
			got := spans(d)
			if len(got) != len(c.spans) {
				t.Fatalf("got candidates %v, want %v", got, c.spans)
			}
			for i := range got {
				if got[i] != c.spans[i] {
					t.Fatalf("candidate %d: got %v, want %v (got %v, want %v)", i, got[i], c.spans[i], got, c.spans)
				}
			}
		})
	}
}

func TestDiscoverRejectsBadAttribution(t *testing.T) {
	unattributed := zeroCmd(1, cache.NoNode, cache.PlanScope())
	if _, err := discovery.Discover([]discovery.Command{unattributed}, []int{0}); err == nil {
		t.Fatal("Discover(an unattributed command, eager boundaries): got err nil, want an error")
	}
	if _, err := discovery.Discover([]discovery.Command{zeroCmd(1, -5, cache.PlanScope())}, nil); err == nil {
		t.Fatal("Discover(a command at node -5): got err nil, want an error")
	}
	if _, err := discovery.Discover(nil, []int{-1}); err == nil {
		t.Fatal("Discover(boundary -1): got err nil, want an error")
	}
}

func TestSegmentKeyIsOrderSensitive(t *testing.T) {
	a, b := zeroCmd(1, 0, cache.PlanScope()), zeroCmd(2, 1, cache.PlanScope())
	d1, _ := discovery.Discover([]discovery.Command{a, b}, nil)
	d2, _ := discovery.Discover([]discovery.Command{b, a}, nil)
	d3, _ := discovery.Discover([]discovery.Command{a, b}, nil)
	if d1.Candidates[0].Key == d2.Candidates[0].Key {
		t.Fatalf("keys of [a b] and [b a]: got both %v, want different: segment keys must follow command order", d1.Candidates[0].Key)
	}
	if d1.Candidates[0].Key != d3.Candidates[0].Key {
		t.Fatalf("keys of [a b] twice: got %v and %v, want equal", d1.Candidates[0].Key, d3.Candidates[0].Key)
	}
}

// FuzzDiscover decodes bytes into a command sequence and boundaries:
// discovery never panics, and no candidate straddles a boundary node or a
// non-replayable command (an unkeyed one, or a transfer of another phase
// that is no keyed stable transfer).
func FuzzDiscover(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, []byte{2})
	f.Add([]byte{255, 0, 17, 34, 51}, []byte{})
	f.Fuzz(func(t *testing.T, data, bounds []byte) {
		var cmds []discovery.Command
		for i, b := range data {
			c := zeroCmd(uint64(1+b%5), int(b%7), cache.PlanScope())
			switch b >> 5 {
			case 1:
				c.HasKey = false
			case 2:
				c.Scopes = []cache.Scope{cache.LaneScope(int(b % 3))}
			case 3:
				c.Phase = cache.PhaseReadout // a keyed zero: a stable transfer, it may join
			case 4:
				c.Scopes = []cache.Scope{{}}
			case 5: // an upload in the binding phase: never joins
				c.Phase = cache.PhaseDynamicBinding
				c.Cmd = cuda.Command{Kind: cuda.KindUpload, Dst: cuda.Region{Buffer: c.Cmd.Dst.Buffer, Length: 4}, Host: make([]byte, 4)}
			}
			if i%11 == 10 {
				c.Node = cache.NoNode
			}
			cmds = append(cmds, c)
		}
		var boundaries []int
		for _, b := range bounds {
			boundaries = append(boundaries, int(b%9)-1)
		}
		d, err := discovery.Discover(cmds, boundaries)
		if err != nil {
			return
		}
		isBoundary := map[int]bool{}
		for _, b := range boundaries {
			isBoundary[b] = true
		}
		covered := make([]bool, len(cmds))
		for _, c := range d.Candidates {
			if c.Start >= c.End || c.End > len(cmds) || len(c.Keys) != c.Len() {
				t.Fatalf("got candidate [%d, %d) with %d keys, want Start < End <= %d and one key per command (%+v)", c.Start, c.End, len(c.Keys), len(cmds), c)
			}
			for i := c.Start; i < c.End; i++ {
				if covered[i] {
					t.Fatalf("command %d: got it in two candidates, want at most one", i)
				}
				covered[i] = true
				joins := cmds[i].Phase == cache.PhaseCompute || cmds[i].HasKey && discovery.StableTransfer(cmds[i].Cmd.Kind)
				if !joins || isBoundary[cmds[i].Node] || d.Bindings[i].Reason != cache.ReasonNone {
					t.Fatalf("candidate %d..%d holds command %d (%v) with phase %v, boundary node %v, reason %v; want only compute commands and keyed stable transfers, off boundaries, with reason %v",
						c.Start, c.End, i, cmds[i].Cmd.Kind, cmds[i].Phase, isBoundary[cmds[i].Node], d.Bindings[i].Reason, cache.ReasonNone)
				}
			}
			if c.Start > 0 && d.Reasons[c.Start-1] == cache.ReasonNone || c.End < len(cmds) && d.Reasons[c.End] == cache.ReasonNone {
				t.Fatalf("candidate %d..%d: got a replayable neighbour (reasons %v), want a maximal candidate", c.Start, c.End, d.Reasons)
			}
		}
		for i, cov := range covered {
			if cov != (d.Reasons[i] == cache.ReasonNone) {
				t.Fatalf("command %d: got covered %v with reason %v, want covered exactly when the reason is %v", i, cov, d.Reasons[i], cache.ReasonNone)
			}
		}
	})
}

func buffer(id uint64, elem cuda.ElementType, addr uint64) cuda.Buffer {
	return cuda.Buffer{Device: 1, ID: id, Size: 1 << 20, Align: 256, Elem: elem, Addr: addr}
}
