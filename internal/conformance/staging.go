// Conformance: pinned host staging copied in and out by a replayed graph.

package conformance

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
)

// testStaging: pinned host staging is read and written when the copies
// run, so a captured graph replays over whatever the host wrote last.
func testStaging(t *testing.T, dev backend.Device) {
	hm := cuda.HostMemory(dev)
	f := fixture{t, dev}
	s := f.stream()
	in, err := hm.AllocHost(64)
	if err != nil {
		t.Fatal(err)
	}
	out, err := hm.AllocHost(64)
	if err != nil {
		t.Fatal(err)
	}
	b := f.alloc(cuda.I32, 16)
	ints := func(v int32) []byte {
		p := make([]byte, 64)
		for i := range 16 {
			binary.LittleEndian.PutUint32(p[4*i:], uint32(v+int32(i)))
		}
		return p
	}
	if err := hm.WriteHost(in.Whole(), ints(10)); err != nil {
		t.Fatal(err)
	}
	stageIn, err := cuda.StageIn(b.Whole(), in.Whole())
	if err != nil {
		t.Fatal(err)
	}
	stageOut, err := cuda.StageOut(out.Whole(), b.Whole())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Enqueue(stageIn); err != nil {
		t.Fatal(err)
	}
	if got := f.read(s, b); !bytes.Equal(got, ints(10)) {
		t.Fatal("eager stage_in did not land")
	}
	if err := s.BeginCapture(backend.CaptureRelaxed); err != nil {
		t.Fatal(err)
	}
	if err := s.Enqueue(stageIn); err != nil {
		t.Fatal(err)
	}
	f.launch(s, kernels.Inc, 16, cuda.BufferArg(b.Whole()), cuda.I32Arg(16))
	if err := s.Enqueue(stageOut); err != nil {
		t.Fatal(err)
	}
	g, err := s.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	x, err := g.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []int32{100, 200, 300} {
		if err := hm.WriteHost(in.Whole(), ints(v)); err != nil {
			t.Fatal(err)
		}
		if err := s.Launch(x); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 64)
		if err := hm.ReadHost(out.Whole(), got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, ints(v+1)) {
			t.Fatalf("replay over staging %d returned %v…, want %d+1…", v, got[:8], v)
		}
	}
	short := make([]byte, 8)
	wantContract(t, hm.ReadHost(out.Whole(), short), cuda.ErrOutOfBounds)
	if err := hm.FreeHost(out); err != nil {
		t.Fatal(err)
	}
	wantContract(t, hm.WriteHost(out.Whole(), make([]byte, 64)), cuda.ErrStaleHandle)
	_, err = cuda.StageIn(b.Whole(), cuda.HostRegion{Buffer: in, Length: 60})
	wantContract(t, err, cuda.ErrOutOfBounds)
}

// testPinInPlace: host memory the device did not allocate, pinned where it
// is, is read by an upload when it runs; pinning its pages twice is
// refused; unpinning twice does nothing the second time; after unpinning
// it can be pinned again.
func testPinInPlace(t *testing.T, dev backend.Device) {
	pinner, ok := dev.(backend.HostPinner)
	if !ok {
		t.Fatal("the device does not implement backend.HostPinner")
	}
	f := fixture{t, dev}
	s := f.stream()
	const n = 1 << 16
	mem := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(mem[4*i:], uint32(i))
	}
	unpin, err := pinner.PinHost(mem)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pinner.PinHost(mem[8192:])
	wantCode(t, err, codes.HostMemoryRegistered)
	b := f.alloc(cuda.I32, n)
	// The upload reads the caller's memory itself (no copy retained).
	up := cuda.Command{Kind: cuda.KindUpload, Dst: b.Whole(), Host: mem}
	if err := s.Enqueue(up); err != nil {
		t.Fatal(err)
	}
	if got := f.read(s, b); !bytes.Equal(got, mem) {
		t.Fatal("an upload from pinned memory did not land")
	}
	if err := unpin(); err != nil {
		t.Fatal(err)
	}
	if err := unpin(); err != nil {
		t.Fatalf("a second unpin: got %v, want nil", err)
	}
	again, err := pinner.PinHost(mem)
	if err != nil {
		t.Fatalf("pinning again after unpinning: %v", err)
	}
	if err := again(); err != nil {
		t.Fatal(err)
	}
	if _, err := pinner.PinHost(nil); err == nil {
		t.Fatal("pinning no bytes: got nil, want an error")
	}
}
