package lanecore_test

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"

	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/lanes"
)

// thousands is a lane serving many tenants of one shape on the virtual
// clock: each tenant's step counts itself in c, zeroes a, increments it
// twice, copies it to b and increments b, so after k steps its memory
// reads c = k, a = 2, b = 3 wherever its step ran: replayed by another
// tenant's executable rebound to its buffers, or eagerly.
type thousands struct {
	t       *testing.T
	dev     sim.Device
	s       backend.Stream
	lane    *lanecore.Lane
	tenants []thousandsTenant
}

type thousandsTenant struct {
	name    string
	a, b, c cuda.Buffer
	steps   int32
}

func newThousands(t *testing.T, n int, faults ...sim.Fault) *thousands {
	dev, s := simStream(t, sim.Config{Clock: sim.ClockVirtual, Faults: faults, Kernels: kernels.Builtin().With(kernels.FaultInjection())})
	l, err := lanecore.New(lanecore.Config{ID: 1, Device: backend.Must(dev), Stream: s, Runtime: "lanes-test"})
	if err != nil {
		t.Fatalf("lanecore.New: got err %v, want nil", err)
	}
	th := &thousands{t: t, dev: dev, s: s, lane: l}
	for i := range n {
		tn := thousandsTenant{name: fmt.Sprintf("tenant-%04d", i)}
		for _, b := range []*cuda.Buffer{&tn.a, &tn.b, &tn.c} {
			if *b, err = dev.Alloc(cuda.BufferSpec{Size: 64, Elem: cuda.I32}); err != nil {
				t.Fatalf("Alloc: got err %v, want nil", err)
			}
			z, _ := cuda.Zero(b.Whole())
			if err := s.Enqueue(z); err != nil {
				t.Fatalf("Enqueue(zero): got err %v, want nil", err)
			}
		}
		th.tenants = append(th.tenants, tn)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatalf("Synchronize: got err %v, want nil", err)
	}
	return th
}

// batch is tenant i's step.
func (th *thousands) batch(i int) lanes.Batch {
	tn := &th.tenants[i]
	inc := func(b cuda.Buffer) cuda.Command {
		c, err := cuda.Launch(th.dev.Registry().MustSpec(kernels.Inc), cuda.Linear(16, 16), cuda.BufferArg(b.Whole()), cuda.I32Arg(16))
		if err != nil {
			th.t.Fatalf("cuda.Launch(inc): got err %v, want nil", err)
		}
		return c
	}
	zero, _ := cuda.Zero(tn.a.Whole())
	cp, _ := cuda.Copy(tn.b.Whole(), tn.a.Whole())
	cmds := []cuda.Command{inc(tn.c), zero, inc(tn.a), inc(tn.a), cp, inc(tn.b)}
	b := lanes.Batch{Tenant: tn.name}
	for n, c := range cmds {
		b.Entries = append(b.Entries, lanes.Replayed("lanes-test", n, c))
	}
	return b
}

// round submits one step of each tenant in order, the clock advancing
// after every 64, and drains the lane; it returns how many of the
// round's commands were replayed and how many run.
func (th *thousands) round(skip func(i int) bool) (replayed, total int) {
	th.t.Helper()
	drain := func() {
		if err := th.s.Synchronize(); err != nil {
			th.t.Fatalf("Synchronize: got err %v, want nil", err)
		}
		th.dev.Clock().Advance(time.Second)
		for _, rc := range th.lane.Poll() {
			if rc.Err != nil {
				th.t.Fatalf("receipt of fence %d: got err %v, want success", rc.Fence, rc.Err)
			}
		}
	}
	for i := range th.tenants {
		if skip != nil && skip(i) {
			continue
		}
		sub, err := th.lane.Submit(th.batch(i))
		if err != nil {
			th.t.Fatalf("Submit of %s: got err %v, want nil", th.tenants[i].name, err)
		}
		th.tenants[i].steps++
		for _, row := range sub.Attribution.Rows {
			total++
			if row.Replayed {
				replayed++
			}
		}
		if i%64 == 63 {
			drain()
		}
	}
	drain()
	return replayed, total
}

// check reads every tenant's memory: its own steps, and nobody else's,
// wrote it.
func (th *thousands) check(what string) {
	th.t.Helper()
	read := func(b cuda.Buffer) int32 {
		out := make([]byte, 4)
		reg, _ := b.Region(0, 4)
		if err := th.lane.Readback(reg, lanecore.ReadbackLayout{Elem: cuda.I32, Count: 1}, out); err != nil {
			th.t.Fatalf("Readback: got err %v, want nil", err)
		}
		return int32(binary.LittleEndian.Uint32(out))
	}
	for _, tn := range th.tenants {
		want := [3]int32{tn.steps, 2, 3}
		if tn.steps == 0 {
			want = [3]int32{}
		}
		if got := [3]int32{read(tn.c), read(tn.a), read(tn.b)}; got != want {
			th.t.Fatalf("%s: %s's memory (c, a, b): got %v, want %v: a step wrote another tenant's buffers or lost its own", what, tn.name, got, want)
		}
	}
}

// TestThousandsOfTenants: 2,048 tenants of one shape on one lane whose
// cache holds 64 executables, preparation sealed after the first 64
// tenants' steps were captured. Every later step, the late tenants' too,
// replays: a resident of its shape takes its parameters in place. The
// executables' device memory stays what 64 hold, every tenant's memory
// holds exactly its own steps' work, and forgetting a tenant or one
// tenant's refused rebind leaves every other tenant's steps replayed.
func TestThousandsOfTenants(t *testing.T) {
	const n, capacity = 2048, 64
	th := newThousands(t, n, sim.Fault{Kind: sim.FaultUpdateReject, Kernel: kernels.Inc, Nth: 2*n + 5, Times: 1}) // fires in the third round
	if _, err := th.lane.Configure(capacity); err != nil {
		t.Fatalf("Configure(%d): got err %v, want nil", capacity, err)
	}
	for i := range capacity { // one at a time: a capture needs a quiescent stream
		if _, err := th.lane.Submit(th.batch(i)); err != nil {
			t.Fatalf("warm-up Submit: got err %v, want nil", err)
		}
		th.tenants[i].steps++
		th.dev.Clock().Advance(time.Second)
		th.lane.Poll()
	}
	if _, err := th.lane.Seal(); err != nil {
		t.Fatalf("Seal: got err %v, want nil", err)
	}
	bytesOfCapacity := th.lane.Counters().ExecutableDeviceBytes
	for round := range 1 {
		replayed, total := th.round(nil)
		if share := float64(replayed) / float64(total); share < 0.95 {
			t.Fatalf("round %d: %d of %d commands replayed (%.1f%%), want at least 95%%", round, replayed, total, 100*share)
		}
		c := th.lane.Counters()
		if c.Executables > capacity || c.ExecutableDeviceBytes > bytesOfCapacity || c.Captured != capacity {
			t.Fatalf("round %d: %d executables holding %d device bytes, %d captured; want at most %d holding %d, none captured after the seal",
				round, c.Executables, c.ExecutableDeviceBytes, c.Captured, capacity, bytesOfCapacity)
		}
		th.check(fmt.Sprintf("round %d", round))
	}
	if c := th.lane.Counters(); c.Rebound < n-capacity {
		t.Fatalf("got %d rebinds, want at least one per late tenant (%d)", c.Rebound, n-capacity)
	}

	// A forgotten tenant's executables become no one's: the others still
	// replay every step, and its memory is left alone.
	gone := 7
	th.lane.ForgetTenant(th.tenants[gone].name, nil)
	replayed, total := th.round(func(i int) bool { return i == gone })
	if replayed != total {
		t.Fatalf("after forgetting %s: %d of %d commands replayed, want all", th.tenants[gone].name, replayed, total)
	}

	// One rebind refused by the device (the fault fires once, in this
	// round): that tenant's step runs eagerly, the executable it would
	// have taken stays as it was, and every other tenant's step replays.
	refusals := th.lane.Counters().RebindRefusals
	replayed, total = th.round(func(i int) bool { return i == gone })
	c := th.lane.Counters()
	if c.RebindRefusals != refusals+1 {
		t.Fatalf("got %d more rebind refusals, want the one injected", c.RebindRefusals-refusals)
	}
	if eager := total - replayed; eager != 6 {
		t.Fatalf("with one rebind refused: %d commands ran eagerly, want the refused tenant's 6 alone", eager)
	}
	th.check("after a tenant was forgotten and a rebind refused")
	if got := th.lane.Counters().Executables; got != capacity {
		t.Fatalf("after the refused rebind: %d executables, want all %d kept (a sealed cache never gets one back)", got, capacity)
	}
}
