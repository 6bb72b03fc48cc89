package actors_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
)

// panicky is a device whose streams' Enqueue panics on demand: "capture"
// while capturing, "eager" otherwise, as a provider bug would.
type panicky struct {
	*device
	mode atomic.Value // string
	// hold, while set, stops every enqueue and launch on the device's
	// streams until it is closed: in the overload cell the tenant's first
	// batch holds its lane, so its in-flight bound is met whatever the
	// machine's speed.
	hold atomic.Pointer[chan struct{}]
}

func (d *panicky) NewStream() (backend.Stream, error) {
	s, err := d.device.NewStream()
	return &panickyStream{Stream: s, d: d}, err
}

type panickyStream struct {
	backend.Stream
	d *panicky
}

func (s *panickyStream) Unwrap() backend.Stream { return s.Stream }

func (s *panickyStream) Enqueue(c cuda.Command) error {
	s.wait()
	mode, _ := s.d.mode.Load().(string)
	capturing := s.Capture() != backend.CaptureNone
	if mode == "capture" && capturing || mode == "eager" && !capturing {
		panic("provider bug during " + mode)
	}
	return s.Stream.Enqueue(c)
}

func (s *panickyStream) Launch(e backend.Exec) error {
	s.wait()
	return s.Stream.Launch(e)
}

// wait waits while the device is held.
func (s *panickyStream) wait() {
	if h := s.d.hold.Load(); h != nil {
		<-*h
	}
}

type matrixPath string

const (
	pathEager      matrixPath = "eager"
	pathReplayed   matrixPath = "replayed"
	pathInvocation matrixPath = "invocation"
	pathCall       matrixPath = "library-call" // the compute is library calls, replayed
)

// cell is one fault on one path.
type cell struct {
	fault string
	path  matrixPath
}

// outcome collects how the faulty tenant's submissions ended.
type outcome struct {
	mu                       sync.Mutex
	accepted, ended, refused int
	codes                    map[string]int
	reasons                  map[cache.Reason]int
}

func (o *outcome) end(r lanes.Receipt, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ended++
	code := "ok"
	if err != nil {
		code = cuda.Classify(err).Code.String()
	}
	o.codes[code]++
	for _, row := range r.Attribution.Rows {
		if !row.Replayed {
			o.reasons[row.Reason]++
		}
	}
}

// TestFaultMatrix runs every fault on every path: the faulty tenant's
// device fails as the fault says while a healthy tenant on another device
// keeps submitting. Every accepted submission must end exactly once with an
// outcome the fault explains (and the fault's signature must show where it
// applies), the healthy tenant must be served throughout, and after Stop the
// devices' memory is back at its baseline and no goroutine is left
// (goleak, in TestMain).
func TestFaultMatrix(t *testing.T) {
	faults := []string{"launch", "capture", "oom", "sticky", "hang", "panic-capture", "panic-eager", "overload", "cancel", "stop",
		"freed", "forged", "not-yours", "retain-other"}
	paths := []matrixPath{pathEager, pathReplayed, pathInvocation, pathCall}
	for _, f := range faults {
		for _, p := range paths {
			c := cell{fault: f, path: p}
			t.Run(fmt.Sprintf("%s/%s", f, p), func(t *testing.T) { runCell(t, c) })
		}
	}
	t.Logf("fault matrix: %d faults x %d paths = %d cells", len(faults), len(paths), len(faults)*len(paths))
}

func runCell(t *testing.T, c cell) {
	faulty := &panicky{device: newDevice(t, sim.Config{Clock: sim.ClockZeroCost}, 2)}
	healthy := newDevice(t, sim.Config{Clock: sim.ClockZeroCost}, 1)
	baseline := faulty.Memory().InUse
	cfg := actors.Config{Devices: []cuda.Device{faulty, healthy}, CacheCapacity: 8, HangTimeout: 300 * time.Millisecond}
	if c.fault == "overload" {
		cfg.MaxInFlightPerTenant = 2
	}
	s, err := actors.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("actors.Start: got err %v, want nil", err)
	}
	ctx := context.Background()
	batch := faulty.batch(0, 3)
	if c.path == pathEager {
		for i := range batch.Entries {
			batch.Entries[i].Replay = nil
		}
	}
	if c.path == pathCall {
		for i := range batch.Entries {
			batch.Entries[i] = lanes.Replayed("actors-test", i, incCall(t, faulty.bufs[0]))
		}
	}
	id := programs.ID{Runtime: "lanes/sim", Name: "step"}
	if c.path == pathInvocation {
		setup := batch
		setup.Program = &programs.Capture{ID: id, Nodes: 3}
		if _, err := s.Submit(ctx, "t", setup); err != nil {
			t.Fatalf("the program's capture: got err %v, want nil", err)
		}
		if _, err := s.Seal(ctx, 0); err != nil {
			t.Fatalf("Seal(lane 0): got err %v, want nil", err)
		}
		cat, err := s.Catalog(ctx, 0)
		if err != nil || len(cat) != 1 || len(cat[0].Segments) != 1 {
			t.Fatalf("Catalog(lane 0): got %v, err %v; want one program of one segment, no error", cat, err)
		}
		inv := programs.Invocation{Program: id, Segment: cat[0].Segments[0]}
		batch = lanes.Batch{Entries: []lanes.Entry{{Phase: cache.PhaseCompute, Node: cache.NoNode, Invoke: &inv}}}
	}
	if isCallerFault(c.fault) {
		batch = callerError(t, s, faulty, c, batch)
	}
	switch c.fault {
	case "launch":
		_ = faulty.InjectFault(sim.Fault{Kind: sim.FaultLaunch, Nth: 2})
	case "capture":
		_ = faulty.InjectFault(sim.Fault{Kind: sim.FaultCaptureReject, Nth: 1})
	case "oom":
		_ = faulty.InjectFault(sim.Fault{Kind: sim.FaultOutOfMemory, Nth: 1})
	case "sticky":
		_ = faulty.InjectFault(sim.Fault{Kind: sim.FaultSticky, Nth: 2})
	case "hang":
		_ = faulty.InjectFault(sim.Fault{Kind: sim.FaultHang, Nth: 2})
	case "panic-capture", "panic-eager":
		faulty.mode.Store(c.fault[len("panic-"):])
	}

	// The healthy tenant submits all along.
	var healthyErrs atomic.Int64
	var hwg sync.WaitGroup
	hwg.Add(1)
	go func() {
		defer hwg.Done()
		for range 20 {
			if _, err := s.Submit(ctx, "h", healthy.batch(0, 2)); err != nil {
				healthyErrs.Add(1)
			}
		}
	}()

	o := &outcome{codes: map[string]int{}, reasons: map[cache.Reason]int{}}
	var wg sync.WaitGroup
	release := func() {}
	if c.fault == "overload" {
		hold := make(chan struct{})
		faulty.hold.Store(&hold)
		release = func() { faulty.hold.Store(nil); close(hold) }
	}
	for i := range 8 {
		// cancel: every fourth submission's context is done before Submit
		// (refused, never run); every other one's ends right after it was
		// accepted (it runs, or ends not submitted if the lane had not
		// taken it yet), and its caller stops waiting (it still ends).
		sctx, submitCtx := ctx, ctx
		cancelAfter := func() {}
		if c.fault == "cancel" && i%2 == 0 {
			cctx, cancel := context.WithCancel(ctx)
			sctx, submitCtx = cctx, cctx
			if i%4 == 0 {
				cancel()
			} else {
				cancelAfter = cancel
			}
		}
		p, err := s.SubmitAsync(submitCtx, "t", batch)
		cancelAfter()
		if err != nil {
			o.mu.Lock()
			o.refused++
			o.codes["refused:"+refusal(err)]++
			o.mu.Unlock()
			continue
		}
		o.mu.Lock()
		o.accepted++
		o.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-sctx.Done(): // the caller gave up; the submission still ends
				<-p.Done()
			case <-p.Done():
			}
			r, err := p.Result()
			o.end(r, err)
		}()
		if c.fault == "stop" && i == 5 {
			break
		}
	}
	release()
	if c.fault != "stop" && c.fault != "overload" {
		wg.Wait()
	}
	hwg.Wait()
	health := s.Lanes()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.Stop(sctx); err != nil {
		t.Fatalf("Stop: got err %v, want nil", err)
	}
	wg.Wait()

	if o.accepted != o.ended {
		t.Fatalf("got %d of %d accepted submissions ended, want each ended exactly once (%v)", o.ended, o.accepted, o.codes)
	}
	if n := healthyErrs.Load(); n != 0 {
		t.Fatalf("the healthy tenant: got %d errors, want 0", n)
	}
	if got, want := faulty.Memory().InUse, baseline+callerBytes(c); got != want {
		t.Fatalf("the faulty device's memory after Stop: got %d bytes in use, want %d (its baseline %d and %d allocated on purpose)", got, want, baseline, callerBytes(c))
	}
	if isCallerFault(c.fault) {
		for _, l := range health {
			if l.Health != actors.HealthServing || l.Recoveries != 0 || l.Counters.Failures != 0 {
				t.Fatalf("%s on the %s path, lane %d: got %v, %d recoveries, %d failures; want untouched by the caller's error: healthy, none, none (%+v)",
					c.fault, c.path, l.ID, l.Health, l.Recoveries, l.Counters.Failures, l)
			}
		}
	}
	checkOutcome(t, c, o)
}

func refusal(err error) string {
	if c := cuda.Classify(err); c.NotSubmitted && c.Code != codes.Unclassified {
		return c.Code.String()
	}
	return err.Error()
}

// checkOutcome: every ended submission's code is one the fault explains,
// and the fault's signature shows where it applies.
func checkOutcome(t *testing.T, c cell, o *outcome) {
	t.Helper()
	// A batch waiting to move when its device's last lane went out ends
	// not submitted with no_healthy_lane.
	allowed := map[string]bool{"ok": true, "refused:no_healthy_lane": true, "no_healthy_lane": true}
	var signature string
	switch c.fault {
	case "launch":
		allowed["cuda_launch_out_of_resources"], allowed["lane_unavailable"] = true, true
		signature = "cuda_launch_out_of_resources"
	case "sticky":
		// A batch that reaches its lane after the device is poisoned, and
		// before the lane has seen its failed fence, is refused there with
		// the device's error, not submitted.
		allowed["cuda_illegal_address"], allowed["refused:cuda_illegal_address"], allowed["lane_unavailable"], allowed["lane_failed"] = true, true, true, true
		signature = "cuda_illegal_address"
	case "hang":
		allowed["lane_hung"], allowed["lane_unavailable"] = true, true
		signature = "lane_hung"
	case "panic-capture":
		// The tenant's own provider panics at every capture: its faults
		// per launch are far above its neighbours', so it may be
		// suspended before the cell ends (how soon depends on how many
		// launches the healthy tenant got in meanwhile: on a loaded
		// machine, fewer). The healthy tenant is checked apart.
		allowed["capture_failed"], allowed["lane_unavailable"], allowed["refused:tenant_suspended"] = true, true, true
		if c.path == pathReplayed || c.path == pathCall {
			signature = "capture_failed"
		}
	case "panic-eager":
		allowed["provider_panic"], allowed["lane_unavailable"], allowed["refused:tenant_suspended"] = true, true, true // as panic-capture
		if c.path == pathEager {
			signature = "provider_panic"
		}
	case "overload":
		allowed["refused:overloaded"] = true
		signature = "refused:overloaded"
	case "cancel":
		allowed["refused:canceled"], allowed["withdrawn"] = true, true // refused at admission, or admitted and withdrawn before its lane took it
		signature = "refused:canceled"
	case "stop":
		// Nothing is submitted after Stop: Stop drains the submissions in
		// flight, which end as usual; none is refused.
	case "freed", "forged":
		allowed = map[string]bool{"batch_invalid": true}
		signature = "batch_invalid"
	case "not-yours", "retain-other":
		allowed = map[string]bool{"refused:not_yours": true}
		signature = "refused:not_yours"
	}
	if c.path == pathInvocation && (allowed["lane_unavailable"] || c.fault == "sticky") {
		// A program lives in one lane's catalog: once that lane is out,
		// another lane answers that it does not hold the program.
		allowed["program_invalid"] = true
	}
	for code := range o.codes {
		if !allowed[code] {
			t.Fatalf("%s on the %s path: got an end %q, want one of %v (ends %v)", c.fault, c.path, code, slices.Sorted(maps.Keys(allowed)), o.codes)
		}
	}
	if signature != "" && o.codes[signature] == 0 {
		t.Fatalf("%s on the %s path: got no %s among the ends %v, want at least one", c.fault, c.path, signature, o.codes)
	}
	if (c.fault == "capture" || c.fault == "oom") && (c.path == pathReplayed || c.path == pathCall) && o.reasons[cache.ReasonCaptureRejected] == 0 {
		t.Fatalf("%s on the replayed path: got no eager fallback with capture_rejected (reasons %v), want at least one", c.fault, o.reasons)
	}
}
