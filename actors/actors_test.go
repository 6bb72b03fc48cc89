package actors_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/cachetest"
	"github.com/lanesched/lanes/internal/testdev"
	"github.com/lanesched/lanes/lanes"
	"go.uber.org/goleak"
)

// protoactor's dead-letter throttle parks a goroutine for its one-second
// interval; it ends by itself.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}

// device is a simulated device with one zeroed counter per tenant slot.
type device struct {
	testdev.Device
	bufs []cuda.Buffer
}

func newDevice(t testing.TB, cfg sim.Config, counters int) *device {
	t.Helper()
	d, err := sim.New(cfg)
	if err != nil {
		t.Fatalf("sim.New: got err %v, want nil", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	unbind, _ := d.BindThread()
	defer unbind()
	st, _ := backend.Must(d).NewStream()
	dev := &device{Device: testdev.Sim(d), bufs: cachetest.Counters(t, d, st, counters)}
	_ = st.Synchronize()
	_ = st.Destroy()
	return dev
}

// batch is k replayable increments of counter i.
func (d *device) batch(i, k int) lanes.Batch {
	var b lanes.Batch
	for n := range k {
		c, _ := cuda.Launch(d.Registry().MustSpec(kernels.Inc), cuda.Linear(16, 16), cuda.BufferArg(d.bufs[i].Whole()), cuda.I32Arg(16))
		b.Entries = append(b.Entries, lanes.Replayed("actors-test", n, c))
	}
	return b
}

func start(t testing.TB, cfg actors.Config) *actors.Scheduler {
	t.Helper()
	s, err := actors.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("actors.Start: got err %v, want nil", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("Stop: got err %v, want nil", err)
		}
	})
	return s
}

// TestReceiveRunsBoundOnAnyThread: a lane's mailbox runs are bound to the
// device per run (issue 56): its Receive is recorded on the threads it ran
// on, and every submission of four tenants on three lanes ends well.
func TestReceiveRunsBoundOnAnyThread(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.ClockZeroCost}, 4)
	s := start(t, actors.Config{Devices: []cuda.Device{dev}, LanesPerDevice: 3, ThreadCheck: true})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if _, err := s.Submit(context.Background(), string(rune('a'+g)), dev.batch(g, 3)); err != nil {
					t.Errorf("Submit(tenant %c): got err %v, want nil", 'a'+g, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, l := range s.Lanes() {
		if len(l.Threads) == 0 {
			t.Fatalf("lane %d: got Receive on no thread, want at least the one it opened on", l.ID)
		}
	}
}

func TestOverloadIsRetryableAndLosesNothing(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.ClockVirtual}, 1)
	s := start(t, actors.Config{Devices: []cuda.Device{dev}, MaxInFlightPerTenant: 3, CacheCapacity: -1, PollMax: 200 * time.Microsecond})
	var ps []lanes.Pending
	for i := range 3 {
		p, err := s.SubmitAsync(context.Background(), "t", dev.batch(0, 1))
		if err != nil {
			t.Fatalf("submission %d of 3: got err %v, want nil", i, err)
		}
		ps = append(ps, p)
	}
	if _, err := s.SubmitAsync(context.Background(), "t", dev.batch(0, 1)); !errors.Is(err, actors.ErrOverloaded) {
		t.Fatalf("fourth submission: got err %v, want actors.ErrOverloaded", err)
	}
	other, err := s.SubmitAsync(context.Background(), "other", dev.batch(0, 1))
	if err != nil {
		t.Fatalf("another tenant: got err %v, want nil (t's bound does not limit it)", err)
	}
	ps = append(ps, other)
	waitSubmitted(t, s, 4) // the virtual clock must move after the lane enqueued them
	dev.Clock().Advance(time.Second)
	for i, p := range ps {
		r, err := p.Result()
		if err != nil || r.Outcome != lanes.OutcomeSucceeded {
			t.Fatalf("submission %d: got outcome %v, err %v; want succeeded, no error", i, r.Outcome, err)
		}
	}
	p, err := s.SubmitAsync(context.Background(), "t", dev.batch(0, 1))
	if err != nil {
		t.Fatalf("after the backlog drained: got err %v, want nil", err)
	}
	waitSubmitted(t, s, 5)
	dev.Clock().Advance(time.Second)
	if _, err := p.Result(); err != nil {
		t.Fatalf("the submission after the backlog: got err %v, want nil", err)
	}
}

func waitSubmitted(t *testing.T, s *actors.Scheduler, n uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.Lanes()[0].Counters.Submissions < n {
		if time.Now().After(deadline) {
			t.Fatalf("lane 0 after 5s: got %d submissions taken, want %d", s.Lanes()[0].Counters.Submissions, n)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func TestCanceledSubmitKeepsItsAccounting(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.ClockVirtual}, 1)
	s := start(t, actors.Config{Devices: []cuda.Device{dev}, CacheCapacity: -1, PollMax: 200 * time.Microsecond})
	// The deadline passes once the lane has taken the batch onto its
	// stream (waitSubmitted: the lane counts a submission only after it
	// checked the batch's context and enqueued it). A lane that had not
	// taken it yet would end it at once, not submitted, and the accounting
	// checked here would be gone; taken, it cannot end before the virtual
	// clock moves.
	ctx := newDeadline()
	submitted := make(chan error, 1)
	go func() {
		_, err := s.Submit(ctx, "t", dev.batch(0, 1))
		submitted <- err
	}()
	waitSubmitted(t, s, 1)
	ctx.pass()
	if err := <-submitted; !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Submit past its deadline: got err %v, want one wrapping context.DeadlineExceeded", err)
	}
	if n := s.Lanes()[0].InFlight; n != 1 {
		t.Fatalf("lane 0 after the caller's deadline: got %d in flight, want 1 (the detached submission is still accounted)", n)
	}
	dev.Clock().Advance(time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for s.Lanes()[0].InFlight != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("lane 0 5s after the clock moved: got %d in flight, want 0 (the detached submission ended)", s.Lanes()[0].InFlight)
		}
		time.Sleep(time.Millisecond)
	}
}

// deadlineCtx is a context whose deadline passes when the test says so
// (pass) rather than after a wall-clock duration; from then on it is done
// and its Err is context.DeadlineExceeded, as an expired deadline's is.
type deadlineCtx struct {
	context.Context // Background: no values, no deadline of its own
	done            chan struct{}
}

func newDeadline() *deadlineCtx {
	return &deadlineCtx{Context: context.Background(), done: make(chan struct{})}
}

func (c *deadlineCtx) pass() { close(c.done) }

func (c *deadlineCtx) Done() <-chan struct{} { return c.done }

func (c *deadlineCtx) Err() error {
	select {
	case <-c.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

func TestStopUnderLoadEndsEverySubmissionOnce(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.ClockRealTime}, 8)
	s, err := actors.Start(context.Background(), actors.Config{Devices: []cuda.Device{dev}, LanesPerDevice: 4})
	if err != nil {
		t.Fatalf("actors.Start: got err %v, want nil", err)
	}
	var accepted, ended, refused atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				p, err := s.SubmitAsync(context.Background(), string(rune('a'+g)), dev.batch(g, 4))
				if err != nil {
					refused.Add(1)
					if errors.Is(err, actors.ErrStopped) {
						return
					}
					continue
				}
				accepted.Add(1)
				go func() {
					<-p.Done()
					ended.Add(1)
				}()
			}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("Stop under load: got err %v, want nil", err)
	}
	close(stop)
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for ended.Load() != accepted.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if accepted.Load() == 0 {
		t.Fatalf("got 0 submissions accepted before Stop (%d refused), want some", refused.Load())
	}
	if ended.Load() != accepted.Load() {
		t.Fatalf("got %d of %d accepted submissions ended within 5s of Stop, want every one, once", ended.Load(), accepted.Load())
	}
	t.Logf("accepted %d, ended %d, refused %d", accepted.Load(), ended.Load(), refused.Load())
}

func TestAdministration(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.ClockZeroCost}, 1)
	s := start(t, actors.Config{Devices: []cuda.Device{dev}, CacheCapacity: 8})
	ctx := context.Background()
	for i := range 3 {
		if _, err := s.Submit(ctx, "t", dev.batch(0, 4)); err != nil {
			t.Fatalf("Submit %d: got err %v, want nil", i, err)
		}
	}
	p, err := s.Seal(ctx, 0)
	if err != nil || p.State != cache.PrepSealed || p.Resident != 1 {
		t.Fatalf("Seal(lane 0): got %+v, err %v; want sealed with 1 resident executable, no error", p, err)
	}
	if c := s.Lanes()[0].Counters; c.Hits < 2 || c.Captured != 1 {
		t.Fatalf("lane 0 counters: got %d hits, %d captured; want at least 2 hits, 1 captured (%+v)", c.Hits, c.Captured, c)
	}
	if _, err := s.Catalog(ctx, 0); err != nil {
		t.Fatalf("Catalog(lane 0): got err %v, want nil", err)
	}
	if tr, err := s.Trim(ctx, 0); err != nil || tr.Executables != 1 {
		t.Fatalf("Trim(lane 0): got %+v, err %v; want 1 executable released, no error", tr, err)
	}
	if _, err := s.Seal(ctx, 9); !errors.Is(err, actors.ErrUnknownLane) {
		t.Fatalf("Seal(lane 9): got err %v, want actors.ErrUnknownLane", err)
	}
}

// prepareStagedInc prepares, for tenant "t" on lane 0, a staged program
// that increments a 4-element counter staged in from 16 bytes and back.
func prepareStagedInc(t *testing.T, s *actors.Scheduler, dev *device) *actors.StagedProgram {
	t.Helper()
	return prepareStagedIncN(t, s, dev, 4)
}

// prepareStagedIncN is prepareStagedInc over n int32.
func prepareStagedIncN(t *testing.T, s *actors.Scheduler, dev *device, n uint32) *actors.StagedProgram {
	t.Helper()
	st, err := s.PrepareStaged(context.Background(), "t", 0, stagedIncSpec(dev, n))
	if err != nil {
		t.Fatalf("PrepareStaged(lane 0): got err %v, want nil", err)
	}
	return st
}

// stagedIncSpec is a staged program that increments n int32 in place.
func stagedIncSpec(dev *device, n uint32) lanes.StagedSpec {
	a, _ := dev.Alloc(cuda.BufferSpec{Size: 4 * uint64(n), Elem: cuda.I32})
	h, _ := dev.AllocHost(4 * uint64(n))
	o, _ := dev.AllocHost(4 * uint64(n))
	inc, _ := cuda.Launch(dev.Registry().MustSpec(kernels.Inc), cuda.Linear(n, min(n, 256)), cuda.BufferArg(a.Whole()), cuda.I32Arg(int32(n)))
	return lanes.StagedSpec{Inputs: []lanes.Slot{{Staging: h.Whole(), Device: a.Whole()}}, InputMap: []int{0}, Outputs: []lanes.Slot{{Staging: o.Whole(), Device: a.Whole()}}, OutputMap: []int{0},
		Compute: []lanes.Entry{{Phase: cache.PhaseCompute, Node: 0, Command: inc, Replay: lanes.Replayable(inc, cache.LaunchKey("t", inc), cache.PlanScope())}}}
}

func TestStagedReplayThroughTheScheduler(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.ClockZeroCost}, 0)
	s := start(t, actors.Config{Devices: []cuda.Device{dev}, CacheCapacity: 8})
	st := prepareStagedInc(t, s, dev)
	ctx := context.Background()
	res, err := s.Replay(ctx, "t", st, [][]byte{{7, 0, 0, 0}}, true)
	if err != nil {
		t.Fatalf("Replay: got err %v, want nil", err)
	}
	if got := res.Outputs[0][0]; got != 8 {
		t.Fatalf("Replay of input 7: got output %d, want 8 (the input incremented) (result %+v)", got, res)
	}
	if st := s.Lanes()[0].Staged; st.Uploads != 1 || st.GraphLaunches != 1 || st.Readbacks != 1 {
		t.Fatalf("lane 0 staged counters: got %d uploads, %d graph launches, %d readbacks; want 1 of each (%+v)", st.Uploads, st.GraphLaunches, st.Readbacks, st)
	}
	// The same input again is an output-cache hit; after ForgetOutputs it
	// runs the graph again (what a program whose weights changed needs).
	if res, err := s.Replay(ctx, "t", st, [][]byte{{7, 0, 0, 0}}, true); err != nil || !res.OutputCache || res.Outputs[0][0] != 8 {
		t.Fatalf("the same input again: err %v, output cache %v, output %v; want a hit of 8", err, res.OutputCache, res.Outputs)
	}
	st.ForgetOutputs()
	if res, err := s.Replay(ctx, "t", st, [][]byte{{7, 0, 0, 0}}, true); err != nil || res.OutputCache || res.Outputs[0][0] != 8 {
		t.Fatalf("after ForgetOutputs: err %v, output cache %v, output %v; want the graph run again, 8", err, res.OutputCache, res.Outputs)
	}
	if got := s.Lanes()[0].Staged.GraphLaunches; got != 2 {
		t.Fatalf("graph launches after a hit and a forgotten replay: %d, want 2", got)
	}
	// A program is its scheduler's: another scheduler refuses it, saying
	// so, before anything runs.
	other := start(t, actors.Config{Devices: []cuda.Device{newDevice(t, sim.Config{Clock: sim.ClockZeroCost}, 0)}, CacheCapacity: 8})
	if _, err := other.Replay(ctx, "t", st, [][]byte{{7, 0, 0, 0}}, true); !errors.Is(err, lanes.ErrStagedInput) || !strings.Contains(err.Error(), "another scheduler") || !cuda.Classify(err).NotSubmitted {
		t.Fatalf("another scheduler's program: got %v, want lanes.ErrStagedInput naming another scheduler, not submitted", err)
	}
	// An empty spec says what it lacks.
	if _, err := s.PrepareStaged(ctx, "t", 0, lanes.StagedSpec{}); !errors.Is(err, lanes.ErrStagedInput) || !strings.Contains(err.Error(), "no slots and no compute") {
		t.Fatalf("an empty spec: got %v, want lanes.ErrStagedInput saying it has no slots and no compute", err)
	}
}

// TestStagedReplayIntoAndRepeatThroughTheScheduler: outputs land in the
// caller's buffers, Repeat answers from the output cache without a launch,
// and buffers that do not fit are refused before anything runs.
func TestStagedReplayIntoAndRepeatThroughTheScheduler(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.ClockZeroCost}, 0)
	s := start(t, actors.Config{Devices: []cuda.Device{dev}, CacheCapacity: 8})
	st := prepareStagedInc(t, s, dev)
	ctx := context.Background()
	if _, err := s.ReplayInto(ctx, "t", st, [][]byte{{7, 0, 0, 0}}, [][]byte{make([]byte, 15)}); !errors.Is(err, lanes.ErrStagedInput) {
		t.Fatalf("ReplayInto with a 15-byte buffer for a 16-byte output: got err %v, want lanes.ErrStagedInput", err)
	}
	if _, err := s.ReplayInto(ctx, "t", st, [][]byte{{7, 0, 0, 0}}, nil); !errors.Is(err, lanes.ErrStagedInput) {
		t.Fatalf("ReplayInto with no buffers: got err %v, want lanes.ErrStagedInput", err)
	}
	if c := s.Lanes()[0].Staged; c.GraphLaunches != 0 {
		t.Fatalf("after refused replays: got %d graph launches, want 0", c.GraphLaunches)
	}
	outs := st.MakeOutputs()
	if res, err := s.ReplayInto(ctx, "t", st, [][]byte{{7, 0, 0, 0}}, outs); err != nil || outs[0][0] != 8 || &res.Outputs[0][0] != &outs[0][0] {
		t.Fatalf("ReplayInto of input 7: got output %d, err %v; want 8 in the caller's buffer, nil", outs[0][0], err)
	}
	clear(outs[0])
	res, err := s.Repeat(ctx, "t", st, outs)
	if err != nil || !res.OutputCache || outs[0][0] != 8 {
		t.Fatalf("Repeat: got output %d, output cache %v, err %v; want 8 from the cache, nil", outs[0][0], res.OutputCache, err)
	}
	if c := s.Lanes()[0].Staged; c.GraphLaunches != 1 || c.OutputCacheHits != 1 {
		t.Fatalf("lane 0 staged counters: got %d graph launches, %d output-cache hits; want 1, 1 (%+v)", c.GraphLaunches, c.OutputCacheHits, c)
	}
}

// TestStagedProgramNeverReplayableIsRefused: a program whose inputs alone
// move more than MaxBatchBytes is refused when it is prepared, not at
// every replay.
func TestStagedProgramNeverReplayableIsRefused(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.ClockZeroCost}, 0)
	s := start(t, actors.Config{Devices: []cuda.Device{dev}, CacheCapacity: 8, MaxBatchBytes: 8})
	a, _ := dev.Alloc(cuda.BufferSpec{Size: 16, Elem: cuda.I32})
	h, _ := dev.AllocHost(16)
	inc, _ := cuda.Launch(dev.Registry().MustSpec(kernels.Inc), cuda.Linear(4, 4), cuda.BufferArg(a.Whole()), cuda.I32Arg(4))
	spec := lanes.StagedSpec{Inputs: []lanes.Slot{{Staging: h.Whole(), Device: a.Whole()}}, InputMap: []int{0},
		Compute: []lanes.Entry{{Phase: cache.PhaseCompute, Node: 0, Command: inc, Replay: lanes.Replayable(inc, cache.LaunchKey("t", inc), cache.PlanScope())}}}
	var big *actors.BatchTooLargeError
	if _, err := s.PrepareStaged(context.Background(), "t", 0, spec); !errors.As(err, &big) || big.Bytes != 16 || !cuda.Classify(err).NotSubmitted {
		t.Fatalf("PrepareStaged of 16 input bytes against MaxBatchBytes 8: got err %v, want a *actors.BatchTooLargeError of 16 bytes, not submitted", err)
	}
}

// TestSpinningLanesEndEverySubmission: lanes that spin for their polls
// (Config.Spin) end every submission exactly once, with its work done, on
// a real-time device where fences take device time.
func TestSpinningLanesEndEverySubmission(t *testing.T) {
	dev := newDevice(t, sim.Config{Clock: sim.ClockRealTime}, 4)
	s := start(t, actors.Config{Devices: []cuda.Device{dev}, LanesPerDevice: 2, Spin: time.Millisecond})
	var wg sync.WaitGroup
	var ended atomic.Int64
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := dev.batch(c, 3)
			for range 50 {
				if _, err := s.Submit(context.Background(), fmt.Sprintf("t%d", c), batch); err != nil {
					t.Errorf("Submit(tenant t%d): got err %v, want nil", c, err)
					return
				}
				ended.Add(1)
			}
		}()
	}
	wg.Wait()
	if n := ended.Load(); n != 200 {
		t.Fatalf("got %d submissions ended, want 200", n)
	}
	for c := range 4 {
		if got := dev.count(t, c); got != 150 {
			t.Fatalf("counter %d after 50 batches of 3 increments: got %d, want 150", c, got)
		}
	}
}

// count reads counter buffer i's first element, on a stream of its own.
func (d *device) count(t *testing.T, i int) int32 {
	t.Helper()
	unbind, err := d.BindThread()
	if err != nil {
		t.Fatalf("BindThread: got err %v, want nil", err)
	}
	defer unbind()
	st, err := d.NewStream()
	if err != nil {
		t.Fatalf("NewStream: got err %v, want nil", err)
	}
	defer st.Destroy()
	if err := d.Synchronize(); err != nil {
		t.Fatalf("device Synchronize: got err %v, want nil", err)
	}
	return cachetest.ReadCounter(t, st, d.bufs[i])
}

// TestStartRefusesAnUnboundedSpin: a spin window past a second would hold a
// core per busy lane for no gain; Start says so instead of starting.
func TestStartRefusesAnUnboundedSpin(t *testing.T) {
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost})
	if err != nil {
		t.Fatalf("sim.New: got err %v, want nil", err)
	}
	defer dev.Close()
	s, err := actors.Start(context.Background(), actors.Config{Devices: []cuda.Device{dev}, Spin: time.Hour})
	if err == nil {
		_ = s.Stop(context.Background())
	}
	if !errors.Is(err, actors.ErrInvalidArgument) || !strings.Contains(err.Error(), "Spin") {
		t.Fatalf("Start with Spin 1h: got err %v, want actors.ErrInvalidArgument naming Spin", err)
	}
}

// panickyDevice panics when a lane opens its stream.
type panickyDevice struct{ backend.Device }

func (panickyDevice) NewStream() (backend.Stream, error) { panic("no streams today") }

// TestStartReturnsWhenALaneActorPanicsWhileOpening: a panic while a lane
// opens takes that lane out for good; Start returns at once with the lane
// quarantined, instead of waiting for its context.
func TestStartReturnsWhenALaneActorPanicsWhileOpening(t *testing.T) {
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost})
	if err != nil {
		t.Fatalf("sim.New: got err %v, want nil", err)
	}
	defer dev.Close()
	done := make(chan struct{})
	var s *actors.Scheduler
	go func() {
		defer close(done)
		s, err = actors.Start(context.Background(), actors.Config{Devices: []cuda.Device{panickyDevice{backend.Must(dev)}}, LanesPerDevice: 2})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Start with lanes panicking while opening: got no return in 10s, want it to return")
	}
	if err != nil {
		t.Fatalf("Start: got err %v, want nil (the lanes are out, the scheduler up)", err)
	}
	defer s.Stop(context.Background())
	for _, l := range s.Lanes() {
		if l.Health != actors.HealthQuarantined {
			t.Errorf("lane %d: got health %v, want %v", l.ID, l.Health, actors.HealthQuarantined)
		}
	}
}

// foreignDevice is a cuda.Device of no backend of lanes': it has no
// streams to give a lane.
type foreignDevice struct{ cuda.Device }

// TestStartRefusesADeviceOfNoBackend: a Device made elsewhere than
// sim.New or driver.Open is refused at start, the caller's error, saying
// how to make one.
func TestStartRefusesADeviceOfNoBackend(t *testing.T) {
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost})
	if err != nil {
		t.Fatalf("sim.New: got err %v, want nil", err)
	}
	defer dev.Close()
	s, err := actors.Start(context.Background(), actors.Config{Devices: []cuda.Device{foreignDevice{dev}}})
	if err == nil {
		s.Stop(context.Background())
		t.Fatal("Start with a foreign device: got nil, want ErrInvalidArgument")
	}
	if !errors.Is(err, actors.ErrInvalidArgument) || !strings.Contains(err.Error(), "sim.New or driver.Open") || cuda.Classify(err).Blame != cuda.BlameCaller {
		t.Fatalf("Start with a foreign device: got %v, want ErrInvalidArgument naming sim.New or driver.Open, the caller's", err)
	}
}
