package discovery_test

import (
	"math/rand"
	"reflect"
	"testing"

	"github.com/lanesched/lanes/cache"
	discovery "github.com/lanesched/lanes/internal/discovery"
)

// TestMemoGivesTheSameDiscovery: a memo changes no key. Random batches,
// repeated and mixed, through a memo small enough to start over many
// times, discover exactly what the memo-less Discover does, although the
// memo reuses one discovery's slices for the next.
func TestMemoGivesTheSameDiscovery(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	memo := discovery.NewMemo(7)
	var batches [][]discovery.Command
	for range 40 {
		n := 1 + r.Intn(12)
		var cmds []discovery.Command
		for i := range n {
			c := zeroCmd(uint64(1+r.Intn(6)), i, cache.PlanScope())
			if r.Intn(5) == 0 {
				c.Scopes = []cache.Scope{cache.LaneScope(r.Intn(3))}
			}
			if r.Intn(6) == 0 {
				c.Phase = cache.PhaseDynamicBinding // splits the run: several candidates share the memo's key array
			}
			cmds = append(cmds, c)
		}
		batches = append(batches, cmds)
	}
	for i := range 400 {
		cmds := batches[r.Intn(len(batches))]
		want, err := discovery.Discover(cmds, nil)
		if err != nil {
			t.Fatalf("discovery %d: Discover: got err %v, want nil", i, err)
		}
		got, err := memo.Discover(cmds, nil)
		if err != nil {
			t.Fatalf("discovery %d: Memo.Discover: got err %v, want nil", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("discovery %d through the memo differs:\n got %+v\nwant %+v", i, got, want)
		}
	}
}

// BenchmarkDiscover compares discovery of a 16-command segment with and
// without a memo: the memo answers repeated keys by lookup, not SHA-256.
func BenchmarkDiscover(b *testing.B) {
	var cmds []discovery.Command
	for i := range 16 {
		cmds = append(cmds, zeroCmd(uint64(1+i), i, cache.PlanScope()))
	}
	for _, memo := range []*discovery.Memo{nil, discovery.NewMemo(64)} {
		name := "hashed"
		if memo != nil {
			name = "memo"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				if _, err := memo.Discover(cmds, nil); err != nil {
					b.Fatalf("Discover: got err %v, want nil", err)
				}
			}
		})
	}
}
