package lanes_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lanesched/lanes"
	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/codes"

	core "github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
)

// What happens while work waits, on both sides: the device's clock is
// virtual and held still, so a batch that fills the lane's stream keeps
// the batches behind it waiting in the lane's queue for as long as the
// test says; then the clock runs and everything ends.

// waitingSide is a server whose device's clock the test holds, and the
// scheduler its lanes run in (the lane host's own, through a front).
type waitingSide struct {
	srv   *lanes.Server
	sched *actors.Scheduler
	clock *sim.VirtualClock
}

// waitingSides are the two ways, each with a device on a virtual clock: in
// process, and a lane host (served in this process, so that the test holds
// its clock) through a front.
var waitingSides = []struct {
	name  string
	start func(t *testing.T) waitingSide
}{
	{"in process", func(t *testing.T) waitingSide {
		clock := &sim.VirtualClock{}
		dev := virtualDevice(t, clock)
		srv, err := lanes.Start(context.Background(), lanes.Config{Devices: []lanes.Device{dev}, Scheduler: actors.Config{HangTimeout: -1}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stopRunning(srv, clock) })
		return waitingSide{srv: srv, sched: schedulerOf(srv), clock: clock}
	}},
	{"lane host", func(t *testing.T) waitingSide {
		clock := &sim.VirtualClock{}
		dev := virtualDevice(t, clock)
		h, err := remote.Serve(context.Background(), remote.HostConfig{Name: "gpu0", Scheduler: actors.Config{Devices: []cuda.Device{dev}, HangTimeout: -1}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Stop(context.Background()) })
		srv, err := lanes.Start(context.Background(), lanes.Config{Hosts: &remote.FrontConfig{Hosts: []string{h.Address()}, Logf: func(string, ...any) {}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stopRunning(srv, clock) })
		return waitingSide{srv: srv, sched: h.Scheduler(), clock: clock}
	}},
}

func virtualDevice(t *testing.T, clock *sim.VirtualClock) lanes.Device {
	t.Helper()
	dev, err := sim.New(sim.Config{Clock: sim.ClockVirtual, Virtual: clock})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dev.Close() })
	return dev
}

// stopRunning stops a server with its device's clock running.
func stopRunning(srv *lanes.Server, clock *sim.VirtualClock) {
	stop := run(clock)
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = srv.Stop(ctx)
}

// run lets the clock run (a second of device time a millisecond) until
// the returned func is called.
func run(clock *sim.VirtualClock) func() {
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				clock.Advance(time.Second)
			}
		}
	}()
	return func() { close(done); <-ended }
}

// fillStream submits, for tenant "blocker", a batch as large as a batch
// may be: while the clock stands still, the lane's stream has no room for
// another batch, which waits in the lane's queue.
func fillStream(t *testing.T, w waitingSide) lanes.Pending {
	t.Helper()
	ctx := context.Background()
	b, err := w.srv.Alloc(ctx, "blocker", lanes.BufferSpec{Size: 64, Elem: lanes.I32})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(w.clock) // its upload runs
	err = w.srv.Upload(ctx, "blocker", b.Whole(), make([]byte, 64))
	stop()
	if err != nil {
		t.Fatal(err)
	}
	inc, err := lanes.Launch(w.srv.Kernels(), kernels.Inc, lanes.Linear(16, 16), lanes.BufferArg(b.Whole()), lanes.I32Arg(16))
	if err != nil {
		t.Fatal(err)
	}
	entries := make([]lanes.Entry, 1024) // actors.Config.MaxBatchEntries's default
	for i := range entries {
		entries[i] = core.Eager(0, inc)
	}
	before := lane0(w).Received
	p, err := w.srv.SubmitAsync(ctx, "blocker", lanes.Batch{Entries: entries})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the blocker on the stream", func() bool { st := lane0(w); return st.Received > before && st.Queued == 0 })
	return p
}

func lane0(w waitingSide) actors.LaneStatus { return w.sched.Lanes()[0] }

// waitFor waits (up to a minute) for cond, which the test's own calls make
// true soon.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited a minute for %s", what)
		}
	}
}

// queuedOneMore runs start and waits until the lane holds one batch more in
// its fair queue than before.
func queuedOneMore(t *testing.T, w waitingSide, start func()) {
	t.Helper()
	before := lane0(w).Queued
	start()
	waitFor(t, "a batch in the lane's queue", func() bool { return lane0(w).Queued > before })
}

// TestWhileWorkWaits: on both sides alike, an Upload and a Free whose
// context ends while they wait go on to their end (the write lands, the
// memory is freed); a batch whose context ends while it waits for its
// lane is withdrawn at once, never run; one its lane took runs; Forget
// of a tenant with work waiting is refused and frees nothing.
func TestWhileWorkWaits(t *testing.T) {
	for _, side := range waitingSides {
		t.Run(side.name, func(t *testing.T) {
			w := side.start(t)
			ctx := context.Background()
			srv := w.srv
			alloc := func(tenant string, size uint64) lanes.Buffer {
				b, err := srv.Alloc(ctx, tenant, lanes.BufferSpec{Size: size, Elem: lanes.I32})
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
			scratch := alloc("quitter", 64)
			stop := run(w.clock) // its zeros land before the stream fills
			if err := srv.Upload(ctx, "quitter", scratch.Whole(), make([]byte, 64)); err != nil {
				t.Fatal(err)
			}
			stop()
			blocker := fillStream(t, w)

			// An Upload of two pieces (9 MiB) waits behind the blocker;
			// its context ends: it detaches, and the write goes on.
			big := alloc("writer", 9<<20)
			data := bytes.Repeat([]byte{0x5a}, 9<<20)
			upCtx, cancelUp := context.WithCancel(ctx)
			uploaded := make(chan error, 1)
			queuedOneMore(t, w, func() { go func() { uploaded <- srv.Upload(upCtx, "writer", big.Whole(), data) }() })
			cancelUp()
			err := <-uploaded
			var detached *actors.DetachedError
			if !errors.As(err, &detached) || lanes.Classify(err).Code != codes.Detached {
				t.Fatalf("Upload whose context ended while it waited: got %v, want a *actors.DetachedError (code detached)", err)
			}

			// A batch waiting for its lane whose context ends is
			// withdrawn at once, with the clock still held.
			inc, err := lanes.Launch(srv.Kernels(), kernels.Inc, lanes.Linear(16, 16), lanes.BufferArg(scratch.Whole()), lanes.I32Arg(16))
			if err != nil {
				t.Fatal(err)
			}
			subCtx, cancelSub := context.WithCancel(ctx)
			var quit lanes.Pending
			queuedOneMore(t, w, func() {
				if quit, err = srv.SubmitAsync(subCtx, "quitter", lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("waits", 0, inc)}}); err != nil {
					t.Fatalf("SubmitAsync: got err %v, want nil", err)
				}
			})
			cancelSub()
			select {
			case <-quit.Done():
			case <-time.After(time.Minute):
				t.Fatal("a waiting batch whose context ended: not withdrawn within a minute")
			}
			rc, err := quit.Result()
			if c := lanes.Classify(err); !errors.Is(err, actors.ErrWithdrawn) || c.Code != codes.Withdrawn || !c.NotSubmitted || rc.Outcome != core.OutcomeRefused {
				t.Errorf("a waiting batch whose context ended: got %v (outcome %v), want withdrawn, not submitted", err, rc.Outcome)
			}

			// Forget of a tenant with work waiting is refused.
			if err := srv.Forget(ctx, "writer"); !errors.Is(err, actors.ErrTenantBusy) || !lanes.Classify(err).Retryable {
				t.Errorf("Forget with an upload waiting: got %v, want ErrTenantBusy, retryable", err)
			}
			// A Free behind the detached upload queues behind it, and
			// detaches in turn when its context ends (a context ended
			// before the Free even began frees nothing instead).
			spare := alloc("writer", 64)
			behindCtx, cancelBehind := context.WithTimeout(ctx, 300*time.Millisecond)
			behind := srv.Free(behindCtx, "writer", spare)
			cancelBehind()
			var behindDetached *actors.DetachedError
			queuedFree := errors.As(behind, &behindDetached)
			if !queuedFree && !lanes.Classify(behind).NotSubmitted {
				t.Fatalf("Free behind a detached Upload, its context ending: got %v, want a *actors.DetachedError", behind)
			}

			// A Free waiting for the tenant's earlier work detaches when
			// its context ends; the free goes on.
			doomed := alloc("freer", 64)
			queuedOneMore(t, w, func() {
				if _, err := srv.SubmitAsync(ctx, "freer", lanes.Batch{Entries: []lanes.Entry{lanes.Input(mustUpload(t, doomed.Whole(), make([]byte, 64)))}}); err != nil {
					t.Fatal(err)
				}
			})
			freeCtx, cancelFree := context.WithCancel(ctx)
			freed := make(chan error, 1)
			queuedOneMore(t, w, func() { go func() { freed <- srv.Free(freeCtx, "freer", doomed) }() }) // its barrier, behind the upload
			cancelFree()
			if err := <-freed; !errors.As(err, &detached) {
				t.Fatalf("Free whose context ended while it waited: got %v, want a *actors.DetachedError", err)
			}

			// A batch the lane took runs, whatever its context does.
			stop = run(w.clock)
			defer stop()
			if _, err := blocker.Result(); err != nil {
				t.Fatalf("the blocker: got err %v, want nil", err)
			}
			takenCtx, cancelTaken := context.WithCancel(ctx)
			taken, err := srv.SubmitAsync(takenCtx, "quitter", lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("waits", 0, inc)}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := taken.Result(); err != nil {
				t.Fatalf("a batch the lane took: got err %v, want nil", err)
			}
			cancelTaken()

			// The detached write landed, whole; the detached free freed.
			if _, err := detached.Pending.Result(); err != nil {
				t.Errorf("the detached Free's end: got err %v, want nil", err)
			}
			got, err := srv.Read(ctx, "writer", big.Whole())
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("after a detached Upload: got %d of %d bytes written (err %v), want all", countEqual(got, data), len(data), err)
			}
			if err := srv.Free(ctx, "freer", doomed); !errors.Is(err, cuda.ErrStaleHandle) {
				t.Errorf("Free after a detached Free: got %v, want ErrStaleHandle (it was freed)", err)
			}
			if _, err := srv.Read(ctx, "freer", doomed.Whole()); !errors.Is(err, cuda.ErrStaleHandle) {
				t.Errorf("Read after a detached Free: got %v, want ErrStaleHandle", err)
			}
			if queuedFree {
				if _, err := behindDetached.Pending.Result(); err != nil {
					t.Errorf("the Free queued behind the detached Upload: got err %v, want nil", err)
				}
				if _, err := srv.Read(ctx, "writer", spare.Whole()); !errors.Is(err, cuda.ErrStaleHandle) {
					t.Errorf("Read after the queued Free: got %v, want ErrStaleHandle (it was freed)", err)
				}
			}
			if err := srv.Forget(ctx, "writer"); err != nil {
				t.Errorf("Forget once the work ended: got %v, want nil", err)
			}
		})
	}
}

func mustUpload(t *testing.T, dst lanes.Region, data []byte) lanes.Command {
	t.Helper()
	c, err := lanes.Upload(dst, data)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func countEqual(a, b []byte) int {
	n := 0
	for i := range min(len(a), len(b)) {
		if a[i] == b[i] {
			n++
		}
	}
	return n
}

// TestAnUploadWaitingForRoomDetaches: an Upload whose piece waits to be
// admitted (behind 64 MiB of other tenants' uploads, the most a front
// keeps on its way to a host; in process, behind them in the lane's
// queue) and whose context ends meanwhile returns detached at once, on
// both sides, and its write lands once the device runs.
func TestAnUploadWaitingForRoomDetaches(t *testing.T) {
	for _, side := range waitingSides {
		t.Run(side.name, func(t *testing.T) {
			w := side.start(t)
			ctx := context.Background()
			blocker := fillStream(t, w)
			const fillers = 8
			filled := make(chan error, fillers)
			for i := range fillers {
				tenant := "filler-" + string(rune('a'+i))
				b, err := w.srv.Alloc(ctx, tenant, lanes.BufferSpec{Size: 8 << 20, Elem: lanes.U8})
				if err != nil {
					t.Fatal(err)
				}
				queuedOneMore(t, w, func() { go func() { filled <- w.srv.Upload(ctx, tenant, b.Whole(), make([]byte, 8<<20)) }() })
			}
			late, err := w.srv.Alloc(ctx, "late", lanes.BufferSpec{Size: 1 << 20, Elem: lanes.U8})
			if err != nil {
				t.Fatal(err)
			}
			data := bytes.Repeat([]byte{7}, 1<<20)
			upCtx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			defer cancel()
			uploaded := make(chan error, 1)
			go func() { uploaded <- w.srv.Upload(upCtx, "late", late.Whole(), data) }()
			var detached *actors.DetachedError
			select {
			case err := <-uploaded:
				if !errors.As(err, &detached) {
					t.Fatalf("Upload waiting for room, its context ended: got %v, want a *actors.DetachedError", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("Upload waiting for room, its context ended: still waiting a minute later, with the device held")
			}
			stop := run(w.clock)
			defer stop()
			if _, err := blocker.Result(); err != nil {
				t.Fatal(err)
			}
			for range fillers {
				if err := <-filled; err != nil {
					t.Errorf("a filler's upload: got %v, want nil", err)
				}
			}
			if _, err := detached.Pending.Result(); err != nil {
				t.Errorf("the detached Upload's end: got %v, want nil", err)
			}
			if got, err := w.srv.Read(ctx, "late", late.Whole()); err != nil || !bytes.Equal(got, data) {
				t.Errorf("after the detached Upload: got %d of %d bytes written (err %v), want all", countEqual(got, data), len(data), err)
			}
		})
	}
}

// TestStopLetsDetachedWorkEnd: Stop waits for a detached Upload of two
// pieces and a detached Free to end as they would have (both ok), on both
// sides, before it drains.
func TestStopLetsDetachedWorkEnd(t *testing.T) {
	for _, side := range waitingSides {
		t.Run(side.name, func(t *testing.T) {
			w := side.start(t)
			ctx := context.Background()
			big := twoPieces(t, w, "v")
			doomed, err := w.srv.Alloc(ctx, "w", lanes.BufferSpec{Size: 64, Elem: lanes.U8})
			if err != nil {
				t.Fatal(err)
			}
			fillStream(t, w)
			upload := detachWhileQueued(t, w, "Upload", func(c context.Context) error {
				return w.srv.Upload(c, "v", big.Whole(), bytes.Repeat([]byte{3}, 9<<20))
			})
			free := detachWhileQueued(t, w, "Free", func(c context.Context) error { return w.srv.Free(c, "w", doomed) })
			stop := run(w.clock)
			defer stop()
			if err := w.srv.Stop(ctx); err != nil {
				t.Fatalf("Stop: got err %v, want nil", err)
			}
			for what, p := range map[string]lanes.Pending{"Upload": upload, "Free": free} {
				select {
				case <-p.Done():
				default:
					t.Errorf("the detached %s: not ended when Stop returned", what)
					continue
				}
				if _, err := p.Result(); err != nil {
					t.Errorf("the detached %s, Stop called meanwhile: got %v, want it to end as it would have (nil)", what, err)
				}
			}
		})
	}
}

// TestAStopCutShortLeavesAnUploadIndeterminate: a Stop whose context ends
// while a detached Upload of two pieces still waits cuts it short; the
// Upload then ends indeterminate (its first piece may have been written),
// never "not submitted", on both sides.
func TestAStopCutShortLeavesAnUploadIndeterminate(t *testing.T) {
	for _, side := range waitingSides {
		t.Run(side.name, func(t *testing.T) {
			w := side.start(t)
			ctx := context.Background()
			big := twoPieces(t, w, "v")
			fillStream(t, w)
			upload := detachWhileQueued(t, w, "Upload", func(c context.Context) error {
				return w.srv.Upload(c, "v", big.Whole(), bytes.Repeat([]byte{3}, 9<<20))
			})
			short, cancelStop := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancelStop()
			if err := w.srv.Stop(short); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Stop whose context ended with the device held: got %v, want context.DeadlineExceeded", err)
			}
			stop := run(w.clock)
			defer stop()
			_, err := upload.Result()
			if c := lanes.Classify(err); c.Code != codes.Indeterminate || c.NotSubmitted {
				t.Errorf("the Upload a short Stop cut: got %v (%+v), want indeterminate, not 'not submitted'", err, c)
			}
			// The lanes drain while the clock runs (a lane host's go on
			// after its front stopped).
			if err := w.sched.Stop(ctx); err != nil {
				t.Errorf("the lanes' Stop: got %v, want nil", err)
			}
		})
	}
}

// twoPieces allocates, for tenant, a buffer an Upload fills in two
// pieces (9 MiB).
func twoPieces(t *testing.T, w waitingSide, tenant string) lanes.Buffer {
	t.Helper()
	b, err := w.srv.Alloc(context.Background(), tenant, lanes.BufferSpec{Size: 9 << 20, Elem: lanes.U8})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// detachWhileQueued runs call (an Upload or a Free) until it adds a batch
// to the lane's queue, then ends its context: it must return a
// *actors.DetachedError, whose Pending it returns.
func detachWhileQueued(t *testing.T, w waitingSide, what string, call func(context.Context) error) lanes.Pending {
	t.Helper()
	c, cancel := context.WithCancel(context.Background())
	ended := make(chan error, 1)
	queuedOneMore(t, w, func() { go func() { ended <- call(c) }() })
	cancel()
	var d *actors.DetachedError
	if err := <-ended; !errors.As(err, &d) {
		t.Fatalf("%s whose context ended while it waited: got %v, want a *actors.DetachedError", what, err)
	}
	return d.Pending
}
