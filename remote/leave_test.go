package remote_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/remote"
)

// TestALeavingHostFinishesItsWorkFirst: under load on two hosts, one is
// asked to leave (SIGTERM): it takes no new submissions (refused,
// ErrHostLeaving, definitely not submitted), finishes the ones it has, and
// only then tells the front it left; nothing ends indeterminate, the
// process exits 0, its tenants are told to move (DeviceStateLostError,
// Left) and start over on the other host, and the other host's tenants
// keep exactly their steps.
func TestALeavingHostFinishesItsWorkFirst(t *testing.T) {
	hostA, addrA := startHostProcess(t, "--lanes", "2", "--heartbeat", "50ms")
	_, addrB := startHostProcess(t, "--lanes", "2", "--heartbeat", "50ms")
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{addrA, addrB}, Logf: t.Logf})
	if err != nil {
		t.Fatalf("StartFront: got err %v, want nil", err)
	}
	t.Cleanup(func() { _ = f.Stop(context.Background()) })
	var cs []counter
	for _, tenant := range []string{"t0", "t1", "t2", "t3"} {
		cs = append(cs, setUp(t, f, tenant))
	}
	ok := make([]atomic.Int64, len(cs))
	var refused, indeterminate, other atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, c := range cs {
		step, err := f.Encode(c.step(t, 4))
		if err != nil {
			t.Fatalf("Encode: got err %v, want nil", err)
		}
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					p, err := f.SubmitEncoded(context.Background(), c.tenant, step)
					if err == nil {
						_, err = p.Result()
					}
					switch {
					case err == nil:
						ok[i].Add(1)
						continue
					case errors.Is(err, remote.ErrHostLeaving):
						refused.Add(1)
					case errors.Is(err, remote.ErrDeviceStateLost):
					case errors.Is(err, actors.ErrIndeterminate):
						indeterminate.Add(1)
					default:
						other.Add(1)
						t.Errorf("%s: got err %v, want nil, ErrHostLeaving or ErrDeviceStateLost", c.tenant, err)
					}
					return
				}
			}()
		}
	}
	time.Sleep(300 * time.Millisecond)
	if err := hostA.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM: got err %v, want nil", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- hostA.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the leaving host's process: got %v, want exit status 0", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("the leaving host did not exit within 15 s")
	}
	time.Sleep(100 * time.Millisecond) // the other host's loops keep going meanwhile
	close(stop)
	wg.Wait()
	if n := indeterminate.Load(); n != 0 {
		t.Fatalf("a host that left well: got %d submissions ended indeterminate, want none", n)
	}
	var left remote.HostStatus
	for _, h := range f.Hosts() {
		if h.Address == addrA {
			left = h
		}
	}
	if left.LostHow != "it left" || left.Losses != 0 {
		t.Fatalf("the host that left: got %+v, want LostHow \"it left\" and no loss", left)
	}
	t.Logf("%d submissions refused while the host was leaving", refused.Load())
	for i, c := range cs {
		host, _ := f.Placement(c.tenant)
		if host != left.Name {
			if got := c.value(t, f); got != int32(4*ok[i].Load()) {
				t.Fatalf("%s on the host that stayed: got counter %d, want %d (every step once)", c.tenant, got, 4*ok[i].Load())
			}
			continue
		}
		_, err := f.Submit(context.Background(), c.tenant, c.step(t, 1))
		var lost *remote.DeviceStateLostError
		if !errors.As(err, &lost) || !lost.Left {
			t.Fatalf("%s, whose host left: got err %v, want a *DeviceStateLostError with Left (move)", c.tenant, err)
		}
		if err := f.Forget(context.Background(), c.tenant); err != nil {
			t.Fatalf("Forget %s: got err %v, want nil", c.tenant, err)
		}
		again := setUp(t, f, c.tenant)
		if host, _ := f.Placement(c.tenant); host == left.Name {
			t.Fatalf("%s after moving: got placed on the host that left, want the other", c.tenant)
		}
		if _, err := f.Submit(context.Background(), c.tenant, again.step(t, 4)); err != nil || again.value(t, f) != 4 {
			t.Fatalf("%s after moving: got err %v, counter %d; want nil and 4", c.tenant, err, again.value(t, f))
		}
	}
	if n := f.InFlight(); n != 0 {
		t.Fatalf("in flight after every loop stopped: got %d, want 0", n)
	}
}
