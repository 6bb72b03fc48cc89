package remote

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/lanes"
	front "github.com/lanesched/lanes/remote/internal/front"

	host "github.com/lanesched/lanes/remote/internal/host"

	wire "github.com/lanesched/lanes/remote/internal/wire"
)

// TestALeavingHostAnswersWhatWasSentBeforeTheFrontHeard: a tenant's call
// is recorded in flight, then held up before it is sent (a submitting
// goroutine descheduled under load) while the host leaves and the front
// hears it left. The call is still sent, the host refuses it (leaving:
// definitely not submitted), and Leave returns only once the front said
// it has nothing more in flight on the host: no timer decides, and
// nothing ends indeterminate. Before, the front's sender dropped a
// submission queued before it heard (it ended indeterminate when the host
// went), and the host went 500 ms after it left whatever was on the way.
func TestALeavingHostAnswersWhatWasSentBeforeTheFrontHeard(t *testing.T) {
	onBothPaths(t, leaveAnswersHeldCall)
}

// holdFirst is a hook that holds its first caller until gate is closed,
// and closes held once it does.
func holdFirst() (hold func(), held, gate chan struct{}) {
	held, gate = make(chan struct{}), make(chan struct{})
	var once sync.Once
	return func() {
		once.Do(func() {
			close(held)
			<-gate
		})
	}, held, gate
}

// leaveHeard starts the host's Leave and waits until the front hears it
// left (while says what the test holds meanwhile); Leave's error comes on
// the channel.
func leaveHeard(t *testing.T, h *host.Host, f *front.Front, while string) <-chan error {
	t.Helper()
	left := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		left <- h.Leave(ctx)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for f.Hosts()[0].Health != front.HostLeft {
		if time.Now().After(deadline) {
			t.Fatalf("the front: got %v %s, want it to hear the host left", f.Hosts()[0].Health, while)
		}
		time.Sleep(time.Millisecond)
	}
	return left
}

func leaveAnswersHeldCall(t *testing.T, noDataPlane bool) {
	h := serveHere(t)
	f := startFrontHere(t, h, &logLines{t: t}, noDataPlane)
	ctx := context.Background()
	b := allocOK(t, f, "t") // its zeros are a submission too: before the hook holds the first
	hold, held, gate := holdFirst()
	front.BeforeEnqueue = func(*wirepb.Submit) { hold() }
	t.Cleanup(func() { front.BeforeEnqueue = nil })
	up, err := cuda.Upload(b.Whole(), make([]byte, 64))
	if err != nil {
		t.Fatalf("Upload: got err %v, want nil", err)
	}
	step := lanes.Batch{Entries: []lanes.Entry{lanes.Eager(cache.PhaseDynamicBinding, up)}}
	result := make(chan error, 1)
	go func() {
		p, err := f.SubmitAsync(ctx, "t", step) // held before it is sent
		if err == nil {
			_, err = p.Result()
		}
		result <- err
	}()
	<-held
	left := leaveHeard(t, h, f, "with a call held before it was sent")
	select {
	case err := <-left:
		t.Fatalf("Leave returned (err %v) with a call still in flight on the front, want it to wait for the front's word", err)
	case <-time.After(700 * time.Millisecond): // past the 500 ms the host used to linger
	}
	close(gate)
	err = <-result
	var leaving *wire.HostLeavingError
	if !errors.As(err, &leaving) || errors.Is(err, actors.ErrIndeterminate) {
		t.Fatalf("the call held up while the host left: got err %v, want a *HostLeavingError (refused, definitely not submitted)", err)
	}
	if err := <-left; err != nil {
		t.Fatalf("Leave: got err %v, want nil once the front has nothing in flight", err)
	}
}

// TestAReadInFlightDoesNotHoldUpALeave: a tenant's Read is held up on the
// host while the host leaves. The host still says it left once its
// submissions ended (the front hears it with the Read in flight), answers
// the Read (the bytes, not indeterminate), and goes once the front has
// nothing more in flight. Before, a leave waited for a moment with no
// operation in flight on the host at all: steady reads from two fronts
// held it for its whole timeout, and then ended indeterminate.
func TestAReadInFlightDoesNotHoldUpALeave(t *testing.T) { onBothPaths(t, readDoesNotHoldUpLeave) }

func readDoesNotHoldUpLeave(t *testing.T, noDataPlane bool) {
	hold, held, gate := holdFirst()
	host.BeforeOp = func(msg any) {
		if _, read := msg.(*wirepb.Read); read {
			hold()
		}
	}
	t.Cleanup(func() { host.BeforeOp = nil })
	h := serveHere(t)
	f := startFrontHere(t, h, &logLines{t: t}, noDataPlane)
	b := allocOK(t, f, "t")
	read := make(chan error, 1)
	go func() {
		data, err := f.Read(context.Background(), "t", b.Whole())
		if err == nil && len(data) != 64 {
			err = fmt.Errorf("%d bytes, want 64", len(data))
		}
		read <- err
	}()
	<-held
	left := leaveHeard(t, h, f, "with a Read held on the host")
	select {
	case err := <-left:
		t.Fatalf("Leave returned (err %v) with a Read in flight, want it to wait for the front's word", err)
	default:
	}
	close(gate)
	if err := <-read; err != nil {
		t.Fatalf("the Read in flight while the host left: got err %v, want the buffer's bytes", err)
	}
	if err := <-left; err != nil {
		t.Fatalf("Leave: got err %v, want nil", err)
	}
}

// TestAnAllocationALeavingHostRefusesIsAHostLeavingError: an allocation
// that reaches a host once it is leaving, sent before its front heard, is
// refused as a submission is: a *HostLeavingError naming the tenant and
// the host, definitely not submitted (it was a bare PeerError).
func TestAnAllocationALeavingHostRefusesIsAHostLeavingError(t *testing.T) {
	h := serveHere(t)
	f := startFrontHere(t, h, &logLines{t: t}, false)
	allocOK(t, f, "t")
	h.Leaving.Store(true) // as startLeaving, before the front hears
	_, err := f.Alloc(context.Background(), "t", cuda.BufferSpec{Size: 64, Elem: cuda.I32})
	var leaving *wire.HostLeavingError
	if !errors.As(err, &leaving) || leaving.Tenant != "t" || leaving.Host != f.Hosts()[0].Name || !errors.Is(err, wire.ErrHostLeaving) {
		t.Fatalf("Alloc on a leaving host: got err %v (%T), want a *HostLeavingError for tenant t on %s", err, err, f.Hosts()[0].Name)
	}
}

// TestAStoppedHostStaysStopped: once its front stopped, a host's state is
// for good: a supervisor that joins it again as the front stops (a killed
// host restarted meanwhile) does not make it joining (after Stop, the
// state read "joining" under load).
func TestAStoppedHostStaysStopped(t *testing.T) {
	l := &front.Link{Epoch: 7}
	l.SetState(front.HostServing)
	l.SetState(front.HostStopped)
	for _, s := range []front.HostHealth{front.HostJoining, front.HostServing, front.HostLost, front.HostLeft} {
		l.SetState(s)
		if l.State != front.HostStopped || l.Serving.Load() != 0 {
			t.Fatalf("a stopped host set %v: got %v, serving epoch %d; want stopped, serving none", s, l.State, l.Serving.Load())
		}
	}
}
