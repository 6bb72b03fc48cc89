// The data plane's upload area with a real host process: uploads through
// it or their messages, and an encoded step's inputs.

package remote_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
)

// TestAnUploadTheAreaCannotHoldCrossesInItsMessage: with an upload area
// of two pages, an upload of 4 KiB goes through it and one of 64 KiB
// through the ring, both arriving whole; one under 4 KiB never uses it.
func TestAnUploadTheAreaCannotHoldCrossesInItsMessage(t *testing.T) {
	_, addr := startHostProcess(t, "--sim-clock", "zero", "--upload-area", "8192")
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{addr}, Logf: t.Logf})
	if err != nil {
		t.Fatalf("StartFront: got err %v, want nil", err)
	}
	defer f.Stop(context.Background())
	ctx := context.Background()
	for i, n := range []int{4 << 10, 64 << 10, 100} {
		tenant := fmt.Sprintf("t%d", i)
		b, err := f.Alloc(ctx, tenant, cuda.BufferSpec{Size: uint64(n), Elem: cuda.U8})
		if err != nil {
			t.Fatalf("Alloc %d: got err %v, want nil", n, err)
		}
		data := make([]byte, n)
		for j := range data {
			data[j] = byte(3*i + j)
		}
		up, err := cuda.Upload(b.Whole(), data)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Submit(ctx, tenant, lanes.Batch{Entries: []lanes.Entry{lanes.Eager(cache.PhaseDynamicBinding, up)}}); err != nil {
			t.Fatalf("an upload of %d bytes: got err %v, want nil", n, err)
		}
		if back, err := f.Read(ctx, tenant, b.Whole()); err != nil || !bytes.Equal(back, data) {
			t.Fatalf("reading back %d bytes: got %d (equal %v), err %v; want the bytes uploaded", n, len(back), bytes.Equal(back, data), err)
		}
	}
	if h := f.Hosts()[0]; !h.DataPlane || h.AreaUploads != 1 || h.AreaBytesInUse != 0 {
		t.Fatalf("host: got DataPlane %v, %d uploads through the area, %d of its bytes in use; want the 4 KiB one alone through it, none in use", h.DataPlane, h.AreaUploads, h.AreaBytesInUse)
	}
}

// TestAnEncodedStepTakesItsInputEachTime: a step encoded once takes a
// submission's own bytes for its upload (a serving step's new input),
// through the upload area (8 KiB) or in the message (100 bytes), and each
// step's read-back is that step's input; an input that does not fit the
// template is refused before anything is sent.
func TestAnEncodedStepTakesItsInputEachTime(t *testing.T) {
	_, addr := startHostProcess(t, "--sim-clock", "zero")
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{addr}, Logf: t.Logf})
	if err != nil {
		t.Fatalf("StartFront: got err %v, want nil", err)
	}
	defer f.Stop(context.Background())
	ctx := context.Background()
	for _, n := range []int{8 << 10, 100} {
		tenant := fmt.Sprintf("t%d", n)
		b, err := f.Alloc(ctx, tenant, cuda.BufferSpec{Size: uint64(n), Elem: cuda.U8})
		if err != nil {
			t.Fatalf("Alloc %d: got err %v, want nil", n, err)
		}
		up, err := cuda.Upload(b.Whole(), make([]byte, n))
		if err != nil {
			t.Fatal(err)
		}
		zero, err := cuda.Zero(b.Whole())
		if err != nil {
			t.Fatal(err)
		}
		enc, err := f.Encode(lanes.Batch{Entries: []lanes.Entry{lanes.Eager(cache.PhaseDynamicBinding, up), lanes.Eager(cache.PhaseCompute, zero)}})
		if err != nil {
			t.Fatalf("Encode: got err %v, want nil", err)
		}
		// The zero runs after the upload: a step of the upload alone shows its input.
		onlyUp, err := f.Encode(lanes.Batch{Entries: []lanes.Entry{lanes.Eager(cache.PhaseDynamicBinding, up)}})
		if err != nil {
			t.Fatalf("Encode: got err %v, want nil", err)
		}
		for i := range 5 {
			data := make([]byte, n)
			for j := range data {
				data[j] = byte(5*i + j + 1)
			}
			p, err := f.SubmitEncoded(ctx, tenant, onlyUp, remote.Input{Entry: 0, Bytes: data})
			if err != nil {
				t.Fatalf("step %d of %d bytes: got err %v, want nil", i, n, err)
			}
			if _, err := p.Result(); err != nil {
				t.Fatalf("step %d of %d bytes: got err %v, want nil", i, n, err)
			}
			if back, err := f.Read(ctx, tenant, b.Whole()); err != nil || !bytes.Equal(back, data) {
				t.Fatalf("step %d of %d bytes read back: got %d bytes (equal %v), err %v; want that step's input", i, n, len(back), bytes.Equal(back, data), err)
			}
		}
		for _, bad := range []struct {
			what   string
			inputs []remote.Input
		}{
			{"an entry past the batch", []remote.Input{{Entry: 2, Bytes: make([]byte, n)}}},
			{"a negative entry", []remote.Input{{Entry: -1, Bytes: make([]byte, n)}}},
			{"an entry that is no upload", []remote.Input{{Entry: 1, Bytes: make([]byte, n)}}},
			{"another length", []remote.Input{{Entry: 0, Bytes: make([]byte, n+1)}}},
			{"the same entry twice", []remote.Input{{Entry: 0, Bytes: make([]byte, n)}, {Entry: 0, Bytes: make([]byte, n)}}},
		} {
			_, err := f.SubmitEncoded(ctx, tenant, enc, bad.inputs...)
			if !errors.Is(err, lanes.ErrInvalidBatch) || !cuda.Classify(err).NotSubmitted {
				t.Errorf("%s: got err %v (not submitted %v), want lanes.ErrInvalidBatch, not submitted", bad.what, err, cuda.Classify(err).NotSubmitted)
			}
		}
	}
	if h := f.Hosts()[0]; h.AreaUploads != 5 || h.AreaBytesInUse != 0 {
		t.Errorf("host: got %d uploads through the area, %d of its bytes in use; want the five 8 KiB inputs, none in use", h.AreaUploads, h.AreaBytesInUse)
	}
}
