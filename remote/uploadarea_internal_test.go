package remote

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/shmring"
	"github.com/lanesched/lanes/internal/testdev"
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/lanes"
	host "github.com/lanesched/lanes/remote/internal/host"

	dataplane "github.com/lanesched/lanes/remote/internal/dataplane"

	wire "github.com/lanesched/lanes/remote/internal/wire"
)

// TestAreaSpansAgainstAModel: spans handed out lie in the area, on the
// grain, never overlap one another; an allocation fails only when no free
// run of the area is that long; spans given back in any order leave the
// whole area free again.
func TestAreaSpansAgainstAModel(t *testing.T) {
	const size = 64 * dataplane.AreaGrain
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 7))
		a := dataplane.NewAreaSpans(size)
		owner := make([]int, size/dataplane.AreaGrain) // 0: free, else the span's number
		var held []dataplane.Span
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
				a.Release(s)
				for g := s.Off / dataplane.AreaGrain; g < (s.Off+s.N)/dataplane.AreaGrain; g++ {
					owner[g] = 0
				}
				continue
			}
			n := uint64(1 + r.IntN(12*dataplane.AreaGrain))
			grains := int((n + dataplane.AreaGrain - 1) / dataplane.AreaGrain)
			s, ok := a.Alloc(n)
			if !ok {
				if longestFree() >= grains {
					t.Fatalf("seed %d step %d: alloc(%d) refused with a free run of %d grains, want a span", seed, step, n, longestFree())
				}
				continue
			}
			if s.Off%dataplane.AreaGrain != 0 || s.N < n || s.Off+s.N > size {
				t.Fatalf("seed %d step %d: alloc(%d) = %+v, want a span of at least %d on the grain within %d", seed, step, n, s, n, size)
			}
			for g := s.Off / dataplane.AreaGrain; g < (s.Off+s.N)/dataplane.AreaGrain; g++ {
				if owner[g] != 0 {
					t.Fatalf("seed %d step %d: alloc(%d) = %+v overlaps span %d", seed, step, n, s, owner[g])
				}
				owner[g] = step + 1
			}
			held = append(held, s)
		}
		for _, s := range held {
			a.Release(s)
		}
		if a.InUse() != 0 || len(a.Free) != 1 || a.Free[0] != (dataplane.Span{Off: 0, N: size}) {
			t.Fatalf("seed %d: after every span came back: in use %d, free %v; want 0 and the whole area as one span", seed, a.InUse(), a.Free)
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
		if _, err := wire.BatchFromWire(batch(c.ref, c.host), wire.Decoding{Area: c.area}); !errors.Is(err, wire.ErrWire) {
			t.Errorf("%s: got err %v, want ErrWire", c.what, err)
		}
	}
	b, err := wire.BatchFromWire(batch(&wirepb.AreaRef{Offset: 4096, Length: 4096}, nil), wire.Decoding{Area: area})
	if err != nil {
		t.Fatalf("a span within the area: got err %v, want nil", err)
	}
	want := bytes.Clone(area[4096:])
	clear(area)
	if got := b.Entries[0].Command.Host; !bytes.Equal(got, want) {
		t.Fatalf("the upload's bytes after the area was written again: got %d bytes (equal %v), want the bytes it held when decoded", len(got), bytes.Equal(got, want))
	}
	if _, err := BatchFromWire(batch(&wirepb.AreaRef{Offset: 0, Length: 4096}, nil)); !errors.Is(err, wire.ErrWire) {
		t.Errorf("BatchFromWire of an area ref (no plane): got err %v, want ErrWire", err)
	}
}

// pinningSim is a simulated device that says it pins host memory (as the
// GPU does with cuMemHostRegister), counting pins and unpins.
type pinningSim struct {
	testdev.Device
	pins, unpins atomic.Int32
}

func (d *pinningSim) PinHost(mem []byte) (func() error, error) {
	d.pins.Add(1)
	return func() error { d.unpins.Add(1); return nil }, nil
}

// TestUploadsAreReadInPlaceFromAPinnedArea: on a host whose device pins
// the upload area, a step's uploads are read there by its copies (no copy
// out), every one arriving whole though the front writes each span again
// for the next call; the area is unpinned once, when the registration
// went and no step read it any more.
func TestUploadsAreReadInPlaceFromAPinnedArea(t *testing.T) {
	base, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	dev := &pinningSim{Device: testdev.Sim(base)}
	h, err := host.Serve(context.Background(), host.Config{Name: "pinned", Scheduler: actors.Config{Devices: []cuda.Device{dev}}, Logf: t.Logf})
	if err != nil {
		t.Fatalf("Serve: got err %v, want nil", err)
	}
	t.Cleanup(func() { _ = h.Stop(context.Background()) })
	f := startFrontHere(t, h, &logLines{t: t}, false)
	ctx := context.Background()
	const n = 64 << 10
	b, err := f.Alloc(ctx, "t", cuda.BufferSpec{Size: n, Elem: cuda.U8})
	if err != nil {
		t.Fatalf("Alloc: got err %v, want nil", err)
	}
	for i := range 20 {
		data := make([]byte, n)
		for j := range data {
			data[j] = byte(i*7 + j)
		}
		up, err := cuda.Upload(b.Whole(), data)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Submit(ctx, "t", lanes.Batch{Entries: []lanes.Entry{lanes.Eager(cache.PhaseDynamicBinding, up)}}); err != nil {
			t.Fatalf("upload %d: got err %v, want nil", i, err)
		}
		if back, err := f.Read(ctx, "t", b.Whole()); err != nil || !bytes.Equal(back, data) {
			t.Fatalf("upload %d read back: got %d bytes (equal %v), err %v; want the bytes uploaded", i, len(back), bytes.Equal(back, data), err)
		}
	}
	st := f.Hosts()[0]
	h.Mu.Lock()
	r := h.Regs[st.Epoch]
	h.Mu.Unlock()
	if r == nil || r.PlaneFor() == nil {
		t.Fatalf("the host's registration under epoch %d: got none with a data plane, want one", st.Epoch)
	}
	p := r.PlaneFor()
	if st.AreaUploads != 20 || p.HeldSteps.Load() != 20 || p.Holds.Load() != 0 || dev.pins.Load() != 1 {
		t.Fatalf("got %d uploads through the area, %d steps reading it in place, %d holding it now, %d pins; want 20, 20, 0, 1", st.AreaUploads, p.HeldSteps.Load(), p.Holds.Load(), dev.pins.Load())
	}
	if got := dev.unpins.Load(); got != 0 {
		t.Fatalf("unpins while the front is served: got %d, want 0", got)
	}
	_ = f.Stop(ctx) // the host drops the registration and lets its plane go
	select {
	case <-p.Done:
	case <-time.After(10 * time.Second):
		t.Fatal("the plane of a stopped front: still mapped after 10 s, want it unmapped")
	}
	if got := dev.unpins.Load(); got != 1 {
		t.Fatalf("unpins after the plane went: got %d, want 1", got)
	}
}

// TestAPinnedAreaStaysMappedWhileAStepReadsIt: a host's plane closed
// while steps read its pinned area in place stays mapped (and pinned)
// until the last of them ended, then is unpinned once and unmapped; once
// it is going, no new step may hold it.
func TestAPinnedAreaStaysMappedWhileAStepReadsIt(t *testing.T) {
	host, offer, err := dataplane.MakePlane(shmring.MinCapacity, 4096)
	if err != nil {
		t.Fatalf("makePlane: got err %v, want nil", err)
	}
	front, err := dataplane.AttachPlane(offer)
	if err != nil {
		t.Fatalf("attachPlane: got err %v, want nil", err)
	}
	defer front.Close()
	var unpins atomic.Int32
	if host.HoldArea() {
		t.Fatal("holdArea of an unpinned area: got true, want false (its uploads are copied out)")
	}
	host.Unpin = func() error { unpins.Add(1); return nil }
	for range 2 { // two steps read it
		if !host.HoldArea() {
			t.Fatal("holdArea of a pinned area: got false, want true")
		}
	}
	host.Close()
	for range 2 {
		select {
		case <-host.Done:
			t.Fatal("the plane closed with steps reading its area: unmapped, want it mapped until they ended")
		default:
		}
		if unpins.Load() != 0 || host.HoldArea() {
			t.Fatalf("while going: got %d unpins, a new hold granted %v; want 0 and none", unpins.Load(), host.Holds.Load() > 2)
		}
		copy(host.Area, "still mapped") // a step's copy reading it would not fault
		host.ReleaseArea()
	}
	select {
	case <-host.Done:
	default:
		t.Fatal("the last step reading the area ended: still mapped, want it unmapped")
	}
	if unpins.Load() != 1 {
		t.Fatalf("unpins: got %d, want 1", unpins.Load())
	}
}
