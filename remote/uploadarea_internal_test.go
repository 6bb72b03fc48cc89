package remote

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/remote/wirepb"
)

// TestAreaSpansAgainstAModel: spans handed out lie in the area, on the
// grain, never overlap one another; an allocation fails only when no free
// run of the area is that long; spans given back in any order leave the
// whole area free again.
func TestAreaSpansAgainstAModel(t *testing.T) {
	const size = 64 * areaGrain
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 7))
		a := newAreaSpans(size)
		owner := make([]int, size/areaGrain) // 0: free, else the span's number
		var held []span
		longestFree := func() int {
			best, run := 0, 0
			for _, o := range owner {
				if o == 0 {
					run++
					best = max(best, run)
				} else {
					run = 0
				}
			}
			return best
		}
		for step := range 2000 {
			if len(held) > 0 && r.IntN(2) == 0 {
				i := r.IntN(len(held))
				s := held[i]
				held = append(held[:i], held[i+1:]...)
				a.release(s)
				for g := s.off / areaGrain; g < (s.off+s.n)/areaGrain; g++ {
					owner[g] = 0
				}
				continue
			}
			n := uint64(1 + r.IntN(12*areaGrain))
			grains := int((n + areaGrain - 1) / areaGrain)
			s, ok := a.alloc(n)
			if !ok {
				if longestFree() >= grains {
					t.Fatalf("seed %d step %d: alloc(%d) refused with a free run of %d grains, want a span", seed, step, n, longestFree())
				}
				continue
			}
			if s.off%areaGrain != 0 || s.n < n || s.off+s.n > size {
				t.Fatalf("seed %d step %d: alloc(%d) = %+v, want a span of at least %d on the grain within %d", seed, step, n, s, n, size)
			}
			for g := s.off / areaGrain; g < (s.off+s.n)/areaGrain; g++ {
				if owner[g] != 0 {
					t.Fatalf("seed %d step %d: alloc(%d) = %+v overlaps span %d", seed, step, n, s, owner[g])
				}
				owner[g] = step + 1
			}
			held = append(held, s)
		}
		for _, s := range held {
			a.release(s)
		}
		if a.inUse() != 0 || len(a.free) != 1 || a.free[0] != (span{0, size}) {
			t.Fatalf("seed %d: after every span came back: in use %d, free %v; want 0 and the whole area as one span", seed, a.inUse(), a.free)
		}
	}
}

// TestAnUploadAreaRefIsChecked: a command naming the upload area is
// decoded only from a plane that has one and only within its bounds (a
// forged offset or length is a wire error, never a read outside it), and
// its bytes are copied out, so the front may reuse the span.
func TestAnUploadAreaRefIsChecked(t *testing.T) {
	area := make([]byte, 8192)
	for i := range area {
		area[i] = byte(i)
	}
	dst := &wirepb.Region{Buffer: &wirepb.Buffer{Device: 1, Id: 1, Size: 4096, Align: 256, Elem: uint32(cuda.U8)}, Length: 4096}
	batch := func(ref *wirepb.AreaRef, host []byte) *wirepb.Batch {
		return &wirepb.Batch{Entries: []*wirepb.Entry{{Command: &wirepb.Command{Kind: uint32(cuda.KindUpload), Dst: dst, Area: ref, Host: host}}}}
	}
	for _, c := range []struct {
		what string
		ref  *wirepb.AreaRef
		host []byte
		area []byte
	}{
		{"no area on its plane", &wirepb.AreaRef{Offset: 0, Length: 4096}, nil, nil},
		{"past the end", &wirepb.AreaRef{Offset: 8000, Length: 4096}, nil, area},
		{"an offset past the area", &wirepb.AreaRef{Offset: 1 << 40, Length: 16}, nil, area},
		{"a length that wraps", &wirepb.AreaRef{Offset: 4096, Length: ^uint64(0) - 100}, nil, area},
		{"no length", &wirepb.AreaRef{Offset: 0, Length: 0}, nil, area},
		{"in its message too", &wirepb.AreaRef{Offset: 0, Length: 4096}, []byte{1}, area},
	} {
		if _, err := batchFromWire(batch(c.ref, c.host), c.area); !errors.Is(err, ErrWire) {
			t.Errorf("%s: got err %v, want ErrWire", c.what, err)
		}
	}
	b, err := batchFromWire(batch(&wirepb.AreaRef{Offset: 4096, Length: 4096}, nil), area)
	if err != nil {
		t.Fatalf("a span within the area: got err %v, want nil", err)
	}
	want := bytes.Clone(area[4096:])
	clear(area)
	if got := b.Entries[0].Command.Host; !bytes.Equal(got, want) {
		t.Fatalf("the upload's bytes after the area was written again: got %d bytes (equal %v), want the bytes it held when decoded", len(got), bytes.Equal(got, want))
	}
	if _, err := BatchFromWire(batch(&wirepb.AreaRef{Offset: 0, Length: 4096}, nil)); !errors.Is(err, ErrWire) {
		t.Errorf("BatchFromWire of an area ref (no plane): got err %v, want ErrWire", err)
	}
}
