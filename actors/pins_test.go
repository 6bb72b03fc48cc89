package actors_test

import (
	"context"
	"encoding/binary"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/codes"
	"github.com/lanesched/lanes/internal/simhook"

	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/lanes"
)

// pinCounter is a simulated device that counts the pins and unpins of
// host memory it is asked for.
type pinCounter struct {
	*device
	pins, unpins atomic.Int64
}

func (d *pinCounter) PinHost(mem []byte) (func() error, error) {
	unpin, err := d.device.PinHost(mem)
	if err != nil {
		return nil, err
	}
	d.pins.Add(1)
	return func() error {
		d.unpins.Add(1)
		return unpin()
	}, nil
}

// TestPinnedInputsLetGoWhenNothingReadsThem: the buffers a lane pinned for
// staged replays are unpinned when the scheduler stops, and when the
// device is lost; a lane abandoned after a hang keeps them (its stream
// may still copy from them), even through Stop.
func TestPinnedInputsLetGoWhenNothingReadsThem(t *testing.T) {
	for _, c := range []struct {
		fault      sim.FaultKind
		wantUnpins int64
	}{{0, 1}, {sim.FaultSticky, 1}, {sim.FaultHang, 0}} {
		name := "no fault"
		if c.fault != 0 {
			name = c.fault.String()
		}
		t.Run(name, func(t *testing.T) {
			dev := &pinCounter{device: newDevice(t, sim.Config{Clock: sim.ClockZeroCost}, 0)}
			cfg := actors.Config{Devices: []cuda.Device{dev}, CacheCapacity: 8}
			if c.fault == sim.FaultHang {
				cfg.HangTimeout = 500 * time.Millisecond
			}
			s, err := actors.Start(context.Background(), cfg)
			if err != nil {
				t.Fatalf("actors.Start: got err %v, want nil", err)
			}
			st := prepareStagedIncN(t, s, dev.device, lanecore.MinPinnedInput/4)
			ctx := context.Background()
			x := make([]byte, lanecore.MinPinnedInput)
			for i := range 3 {
				binary.LittleEndian.PutUint32(x, uint32(i))
				res, err := s.Replay(ctx, "t", st, [][]byte{x}, true)
				if err != nil || binary.LittleEndian.Uint32(res.Outputs[0]) != uint32(i+1) {
					t.Fatalf("replay %d: got err %v, want the input incremented", i, err)
				}
			}
			if dev.pins.Load() != 1 || s.Lanes()[0].Staged.PinnedUploads != 2 {
				t.Fatalf("after three replays of one buffer: got %d pins, %d pinned uploads; want 1, 2", dev.pins.Load(), s.Lanes()[0].Staged.PinnedUploads)
			}
			if c.fault != 0 {
				_ = dev.InjectFault(sim.Fault{Kind: c.fault, Nth: 1})
				binary.LittleEndian.PutUint32(x, 9)
				if _, err := s.Replay(ctx, "t", st, [][]byte{x}, true); err == nil {
					t.Fatalf("a replay meeting a %v fault: got nil, want an error", c.fault)
				}
			}
			sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := s.Stop(sctx); err != nil {
				t.Fatalf("Stop: got err %v, want nil", err)
			}
			if got := dev.unpins.Load(); got != c.wantUnpins {
				t.Fatalf("after Stop: got %d unpins of 1 pin, want %d", got, c.wantUnpins)
			}
			if c.fault == sim.FaultHang {
				// Still pinned: the caller cannot pin it, the hung
				// stream's copy may read it yet.
				var ce *cuda.Error
				if _, err := dev.device.PinHost(x); !errors.As(err, &ce) || ce.Code != codes.HostMemoryRegistered {
					t.Fatalf("pinning a buffer a hung lane kept pinned: got err %v, want code %d", err, codes.HostMemoryRegistered)
				}
			}
		})
	}
}

// TestHungLanePinsGoOnceItsStreamDrains: a lane abandoned after a hang
// keeps its pinned buffers while its stream may still copy from them, and
// lets them go once that stream drained, so the lane rebuilt in its place
// pins them again.
func TestHungLanePinsGoOnceItsStreamDrains(t *testing.T) {
	// A real-time device where 64 MiB of increments take about 130 ms
	// (timed, not computed: NoData).
	cfg := sim.Config{Clock: sim.ClockRealTime, NoData: true}
	simhook.MemoryBandwidth(&cfg, 1e9)
	dev := &pinCounter{device: newDevice(t, cfg, 0)}
	s := start(t, actors.Config{Devices: []cuda.Device{dev}, CacheCapacity: 8, HangTimeout: 400 * time.Millisecond})
	spec := stagedIncSpec(dev.device, lanecore.MinPinnedInput/4)
	ctx := context.Background()
	st, err := s.PrepareStaged(ctx, "t", 0, spec)
	if err != nil {
		t.Fatalf("PrepareStaged: got err %v, want nil", err)
	}
	x := make([]byte, lanecore.MinPinnedInput)
	replay := func(i int) error {
		binary.LittleEndian.PutUint32(x, uint32(i))
		_, err := s.Replay(ctx, "t", st, [][]byte{x}, true)
		return err
	}
	for i := range 3 {
		if err := replay(i); err != nil {
			t.Fatalf("replay %d: got err %v, want nil", i, err)
		}
	}
	if dev.pins.Load() != 1 {
		t.Fatalf("after three replays of one buffer: got %d pins, want 1", dev.pins.Load())
	}
	// Seconds of device work behind the pinned replays: the lane is
	// declared hung, abandoned and rebuilt while its stream still runs.
	const big = 64 << 20
	slow, _ := dev.Alloc(cuda.BufferSpec{Size: big, Elem: cuda.I32})
	var b lanes.Batch
	for range 20 {
		c, _ := cuda.Launch(dev.Registry().MustSpec(kernels.Inc), cuda.Linear(big/4, 256), cuda.BufferArg(slow.Whole()), cuda.I32Arg(big/4))
		b.Entries = append(b.Entries, lanes.Eager(cache.PhaseCompute, c))
	}
	if _, err := s.Submit(ctx, "slow", b); !errors.Is(err, actors.ErrHung) {
		t.Fatalf("2.7 s of work with a 400 ms hang timeout: got err %v, want actors.ErrHung", err)
	}
	if dev.unpins.Load() != 0 {
		t.Fatalf("right after the hang: got %d unpins, want 0 (the hung stream may still copy from the buffer)", dev.unpins.Load())
	}
	_ = dev.Synchronize() // the abandoned stream drains
	deadline := time.Now().Add(20 * time.Second)
	for i := 3; dev.pins.Load() < 2; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("after the hung stream drained: %d pins, %d unpins; want the buffer let go and pinned again by the rebuilt lane", dev.pins.Load(), dev.unpins.Load())
		}
		if err := replay(i); errors.Is(err, lanes.ErrStagedLost) {
			// The rebuilt lane is a fresh one: prepare the program there.
			if p, err := s.PrepareStaged(ctx, "t", 0, spec); err != nil {
				t.Logf("PrepareStaged on the rebuilt lane: %v", err)
			} else {
				st = p
			}
		} else if err != nil {
			t.Logf("replay %d while the lane is rebuilt: %v", i, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if dev.unpins.Load() != 1 {
		t.Fatalf("got %d unpins, want 1: the abandoned lane's pin", dev.unpins.Load())
	}
}
