package lanes_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/lanesched/lanes"
	"github.com/lanesched/lanes/actors"
)

// The element helpers round-trip what each element type holds exactly,
// round the rest to nearest even, and refuse bytes that are not whole
// elements with an invalid_argument that reads "lanes:".
func TestElementHelpersRoundTrip(t *testing.T) {
	f32 := []float32{0, -1.5, math.MaxFloat32, float32(math.Inf(-1)), 1e-40}
	if got, err := lanes.DecodeF32(lanes.EncodeF32(f32)); err != nil || !slices.Equal(got, f32) {
		t.Errorf("f32: got %v, %v; want %v", got, err, f32)
	}
	i32 := []int32{0, -1, math.MaxInt32, math.MinInt32}
	if got, err := lanes.DecodeI32(lanes.EncodeI32(i32)); err != nil || !slices.Equal(got, i32) {
		t.Errorf("i32: got %v, %v; want %v", got, err, i32)
	}
	halves := []float32{0, 1, -2.5, 65504, 1.0 / 1024}
	if got, err := lanes.DecodeF16(lanes.EncodeF16(halves)); err != nil || !slices.Equal(got, halves) {
		t.Errorf("f16: got %v, %v; want %v", got, err, halves)
	}
	if got, _ := lanes.DecodeF16(lanes.EncodeF16([]float32{1 + 1.0/4096, 1e6})); got[0] != 1 || !math.IsInf(float64(got[1]), 1) {
		t.Errorf("f16 rounding: got %v, want [1 +Inf]", got)
	}
	bf := []float32{0, 1, -3, 256}
	if got, err := lanes.DecodeBF16(lanes.EncodeBF16(bf)); err != nil || !slices.Equal(got, bf) {
		t.Errorf("bf16: got %v, %v; want %v", got, err, bf)
	}
	for name, decode := range map[string]func([]byte) error{
		"DecodeF32":  func(b []byte) error { _, err := lanes.DecodeF32(b); return err },
		"DecodeI32":  func(b []byte) error { _, err := lanes.DecodeI32(b); return err },
		"DecodeF16":  func(b []byte) error { _, err := lanes.DecodeF16(b); return err },
		"DecodeBF16": func(b []byte) error { _, err := lanes.DecodeBF16(b); return err },
	} {
		err := decode(make([]byte, 7))
		if !errors.Is(err, actors.ErrInvalidArgument) || lanes.Classify(err).Code.String() != "invalid_argument" || !strings.HasPrefix(err.Error(), "lanes: ") {
			t.Errorf("%s of 7 bytes: got %v, want invalid_argument reading lanes:", name, err)
		}
	}
}

// A receipt counts its replayed entries and, by reason, the others; the
// server lists its kernels; every error it returns reads "lanes:", its
// cause still reachable.
func TestReceiptReplaysKernelsAndErrors(t *testing.T) {
	ctx := context.Background()
	if _, err := lanes.Start(ctx, lanes.Config{}); err == nil || !strings.HasPrefix(err.Error(), "lanes: invalid argument: ") || !errors.Is(err, actors.ErrInvalidArgument) {
		t.Errorf("an empty Config: got %v, want lanes: invalid argument", err)
	}
	srv, _ := newServer(t, 1)
	names := srv.Kernels().Names()
	if !slices.Contains(names, "inc_i32") || !slices.IsSorted(names) {
		t.Errorf("Kernels().Names(): got %v, want a sorted list with inc_i32", names)
	}
	buf, err := srv.Alloc(ctx, "a", lanes.BufferSpec{Size: 4 * 64, Elem: lanes.I32})
	if err != nil {
		t.Fatal(err)
	}
	inc, err := lanes.Launch(srv.Kernels(), "inc_i32", lanes.Linear(64, 64), lanes.BufferArg(buf.Whole()), lanes.I32Arg(64))
	if err != nil {
		t.Fatal(err)
	}
	up, err := lanes.Upload(buf.Whole(), lanes.EncodeI32(make([]int32, 64)))
	if err != nil {
		t.Fatal(err)
	}
	step := lanes.Batch{Entries: []lanes.Entry{lanes.Input(up), lanes.Replayed("count/v1", 0, inc), lanes.Replayed("count/v1", 1, inc)}}
	var last lanes.Receipt
	for range 3 {
		if last, err = srv.Submit(ctx, "a", lanes.Batch{Entries: slices.Clone(step.Entries)}); err != nil {
			t.Fatal(err)
		}
	}
	got := last.Replays()
	if got.Entries != 3 || got.Replayed != 2 || got.Eager["not_compute"] != 1 || len(got.Eager) != 1 {
		t.Errorf("Replays: got %+v, want 3 entries, 2 replayed, 1 eager not_compute", got)
	}
	out, err := srv.Read(ctx, "a", buf.Whole())
	if err != nil {
		t.Fatal(err)
	}
	if vals, err := lanes.DecodeI32(out); err != nil || vals[0] != 2 || vals[63] != 2 {
		t.Errorf("after the last step: got %v, %v; want every element 2", vals, err)
	}
	_, err = srv.Alloc(ctx, "bad\nname", lanes.BufferSpec{Size: 4, Elem: lanes.I32})
	if !strings.HasPrefix(err.Error(), "lanes: ") || !errors.Is(err, actors.ErrInvalidTenant) {
		t.Errorf("a bad tenant name: got %v, want lanes: and ErrInvalidTenant", err)
	}
	p, err := srv.SubmitAsync(ctx, "a", lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("count/v1", 0, inc)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Result(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Submit(ctx, "a", step); !strings.HasPrefix(err.Error(), "lanes: stopped") || !errors.Is(err, actors.ErrStopped) {
		t.Errorf("after Stop: got %v, want lanes: stopped", err)
	}
}

// Stop with a nil context is refused, as every other call is, and the
// server goes on to stop with a real one.
func TestStopRefusesANilContext(t *testing.T) {
	ctx := context.Background()
	srv, _ := newServer(t, 1)
	var none context.Context
	if err := srv.Stop(none); !errors.Is(err, actors.ErrInvalidArgument) || !strings.HasPrefix(err.Error(), "lanes: ") {
		t.Errorf("Stop(nil): got %v, want lanes: invalid argument", err)
	}
	if err := srv.Stop(ctx); err != nil {
		t.Errorf("Stop after: got %v, want nil", err)
	}
}
