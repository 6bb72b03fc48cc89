package remote

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/lanes"
	front "github.com/lanesched/lanes/remote/internal/front"

	host "github.com/lanesched/lanes/remote/internal/host"

	wire "github.com/lanesched/lanes/remote/internal/wire"
)

// logLines keeps what a front or host logs, for tests that look for a line.
type logLines struct {
	t     *testing.T
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.t.Helper()
	l.t.Logf(format, args...)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, format)
}

func (l *logLines) said(part string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.lines {
		if strings.Contains(s, part) {
			return true
		}
	}
	return false
}

// serveHere serves a host in this process on a sim device: the front of
// the same process reaches it at its own address.
func serveHere(t *testing.T) *host.Host {
	t.Helper()
	dev, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.Serve(context.Background(), host.Config{Name: "here", Scheduler: actors.Config{Devices: []cuda.Device{dev}}, Logf: t.Logf})
	if err != nil {
		t.Fatalf("Serve: got err %v, want nil", err)
	}
	t.Cleanup(func() { _ = h.Stop(context.Background()) })
	return h
}

// startFrontHere starts a front on the host of this process. Its bound is
// long: a loss by silence would say so, and the tests here look for the
// host's own word.
func startFrontHere(t *testing.T, h *host.Host, log *logLines, noDataPlane bool) *front.Front {
	t.Helper()
	f, err := front.Start(context.Background(), front.Config{Hosts: []string{h.Address()}, LostAfter: 30 * time.Second, Logf: log.logf, NoDataPlane: noDataPlane})
	if err != nil {
		t.Fatalf("StartFront: got err %v, want nil", err)
	}
	t.Cleanup(func() { _ = f.Stop(context.Background()) })
	return f
}

// allocOK allocates a buffer of 64 bytes for the tenant, or fails.
func allocOK(t *testing.T, f *front.Front, tenant string) cuda.Buffer {
	t.Helper()
	b, err := f.Alloc(context.Background(), tenant, cuda.BufferSpec{Size: 64, Elem: cuda.I32})
	if err != nil {
		t.Fatalf("Alloc for %s: got err %v, want nil", tenant, err)
	}
	up, err := cuda.Upload(b.Whole(), make([]byte, b.Size)) // written before anything reads it
	if err == nil {
		_, err = f.Submit(context.Background(), tenant, lanes.Batch{Entries: []lanes.Entry{lanes.Eager(0, up)}})
	}
	if err != nil {
		t.Fatalf("zeroing %s's buffer: got err %v, want nil", tenant, err)
	}
	return b
}

// onBothPaths runs a test through the remote alone and through the data
// plane.
func onBothPaths(t *testing.T, test func(t *testing.T, noDataPlane bool)) {
	for _, noDataPlane := range []bool{true, false} {
		t.Run(fmt.Sprintf("NoDataPlane=%v", noDataPlane), func(t *testing.T) { test(t, noDataPlane) })
	}
}

// TestARegistrationDroppedBeforeItServesIsJoinedAgain: the host drops a
// registration between its Hello and the front's Welcome (the connection
// from the front ended meanwhile). The front serves only once the host
// shows it holds the registration, so it joins again, and no call is sent
// to the one dropped: the first Alloc succeeds, and the host was never
// lost.
func TestARegistrationDroppedBeforeItServesIsJoinedAgain(t *testing.T) {
	var dropped uint64
	var once sync.Once
	host.AfterHello = func(h *host.Host, front *actor.PID) {
		once.Do(func() {
			dropped = h.Epoch()
			h.FrontGone(front)
		})
	}
	t.Cleanup(func() { host.AfterHello = nil })
	h := serveHere(t)
	log := &logLines{t: t}
	f := startFrontHere(t, h, log, false)
	allocOK(t, f, "t")
	st := f.Hosts()[0]
	if st.Health != front.HostServing || st.Epoch == dropped || st.Losses != 0 {
		t.Errorf("the host: got %v under epoch %d with %d losses, want serving under another epoch than the dropped %d, never lost", st.Health, st.Epoch, st.Losses, dropped)
	}
	if !log.said("before it served") {
		t.Errorf("the front's log: want it to say the host dropped its registration before it served")
	}
}

// TestADroppedRegistrationIsLostAtOnce: a host drops a serving
// registration while its front lives (the connection from the front
// ended). Through the remote alone, the front's next message under it is
// answered with the host's word; through the data plane, the plane's last
// record says it. Either way the front loses the host now, saying why,
// not at its silence (30 s here), and joins it again as it is.
func TestADroppedRegistrationIsLostAtOnce(t *testing.T) { onBothPaths(t, droppedIsLostAtOnce) }

func droppedIsLostAtOnce(t *testing.T, noDataPlane bool) {
	h := serveHere(t)
	log := &logLines{t: t}
	f := startFrontHere(t, h, log, noDataPlane)
	allocOK(t, f, "t")
	first := f.Hosts()[0].Epoch
	h.FrontGone(actor.NewPID(f.Sys.Addr, FrontActor))
	_, err := f.Alloc(context.Background(), "u", cuda.BufferSpec{Size: 64, Elem: cuda.I32})
	var lost *wire.HostLostError
	switch {
	case errors.As(err, &lost) && strings.Contains(lost.Cause, "dropped the registration"):
	case !noDataPlane && (errors.Is(err, wire.ErrNoHost) || errors.Is(err, wire.ErrDeviceStateLost)):
		// The plane's last record came first: the host was lost before
		// the call was sent (before it was placed, or after).
	default:
		t.Fatalf("Alloc under the dropped registration: got err %v, want a HostLostError saying the host dropped the registration", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for st := f.Hosts()[0]; st.Health != front.HostServing || st.Epoch == first; st = f.Hosts()[0] {
		if time.Now().After(deadline) {
			t.Fatalf("the host after its drop: got %v under epoch %d (lost: %s), want serving again under a new epoch", st.Health, st.Epoch, st.LostHow)
		}
		time.Sleep(5 * time.Millisecond)
	}
	st := f.Hosts()[0]
	if st.Losses != 1 || !strings.Contains(st.LostHow, "the connection from its front ended") {
		t.Errorf("the host's status: got %d losses, last %q; want 1, saying the connection from its front ended", st.Losses, st.LostHow)
	}
	if err := f.Forget(context.Background(), "u"); err != nil {
		t.Fatalf("Forget u (its state went with the registration): got err %v, want nil", err)
	}
	allocOK(t, f, "u")
}

// TestABusyFrontKeepsItsPlace: a front whose probes are far apart (its
// LostAfter is long) but whose calls keep coming is alive to the host:
// a new front that finds the host full does not take its place however
// short SilentFront is.
func TestABusyFrontKeepsItsPlace(t *testing.T) {
	dev, err := sim.New(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.Serve(context.Background(), host.Config{Name: "here", Scheduler: actors.Config{Devices: []cuda.Device{dev}}, Logf: t.Logf,
		MaxFronts: 1, SilentFront: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("Serve: got err %v, want nil", err)
	}
	t.Cleanup(func() { _ = h.Stop(context.Background()) })
	f := startFrontHere(t, h, &logLines{t: t}, false) // probes every 6 s
	allocOK(t, f, "t")
	for end := time.Now().Add(600 * time.Millisecond); time.Now().Before(end); {
		if err := f.Forget(context.Background(), "t"); err != nil {
			t.Fatalf("Forget: got err %v, want nil", err)
		}
		allocOK(t, f, "t")
	}
	if front := h.Join(&wirepb.Join{Protocol: wire.Protocol, Front: "127.0.0.1:9", Attempt: 1}); front != nil {
		t.Fatalf("a second front's join on a full host: got a registration, want it refused while the first front's calls keep coming")
	}
	if st := f.Hosts()[0]; st.Health != front.HostServing || st.Losses != 0 {
		t.Errorf("the busy front's host: got %v with %d losses, want serving, never lost", st.Health, st.Losses)
	}
}

// TestALossAtTheFirstHeartbeatIsJoinedAgain: the host drops a
// registration the moment it begins to serve, and the front's loss of it
// comes before the front's actor has finished taking the first heartbeat
// (found under load: the supervisor then ignored the loss and served a
// lost host for good). The front joins the host again as it is.
func TestALossAtTheFirstHeartbeatIsJoinedAgain(t *testing.T) {
	h := serveHere(t)
	log := &logLines{t: t}
	var once sync.Once
	var first uint64
	front.AfterRegistered = func(l *front.Link) {
		once.Do(func() {
			first = l.Status().Epoch
			h.FrontGone(actor.NewPID(l.F.Sys.Addr, FrontActor))
			// The plane's last record loses it on the plane's reader.
			for deadline := time.Now().Add(10 * time.Second); l.Status().Health != front.HostLost && time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
		})
	}
	t.Cleanup(func() { front.AfterRegistered = nil })
	f := startFrontHere(t, h, log, false)
	deadline := time.Now().Add(20 * time.Second)
	for st := f.Hosts()[0]; st.Health != front.HostServing || st.Epoch == first; st = f.Hosts()[0] {
		if time.Now().After(deadline) {
			t.Fatalf("the host after its drop: got %v under epoch %d (first %d, lost: %s), want serving again under a new epoch", st.Health, st.Epoch, first, st.LostHow)
		}
		time.Sleep(5 * time.Millisecond)
	}
	allocOK(t, f, "t")
}
