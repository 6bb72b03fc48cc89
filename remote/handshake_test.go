// What a stranger's connections cost an endpoint, and what a front says of
// an address where no lane host answers as one.

package remote_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/remote"
)

// TestStrangersConnectionsAreClosedAndCounted: a connection that sends
// garbage, and one that sends nothing, are closed at their handshake (the
// silent one within the handshake's bound, not the two minutes gRPC gives
// by default), counted in Wire().Handshakes, and the endpoint serves on.
func TestStrangersConnectionsAreClosedAndCounted(t *testing.T) {
	v := startVictim(t)
	addr := v.f.Address() // the front's own listener: its counts are this process's
	before := v.f.Wire().Handshakes
	garbage, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer garbage.Close()
	_, _ = garbage.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	start := time.Now()
	for _, c := range []net.Conn{garbage, silent} {
		_ = c.SetReadDeadline(time.Now().Add(within(30 * time.Second)))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Fatalf("a stranger's connection: got %v, want it closed by the endpoint", err)
		}
	}
	if took := time.Since(start); took > within(6*time.Second) {
		t.Errorf("a silent connection: closed after %v, want within the handshake's bound (5 s)", took)
	}
	for deadline := time.Now().Add(5 * time.Second); v.f.Wire().Handshakes < before+2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if got := v.f.Wire().Handshakes - before; got < 2 {
		t.Errorf("Wire().Handshakes: got %d more, want 2 (%v)", got, v.f.Wire())
	}
	v.untouched(t, 3)
}

// TestAnAddressThatIsNoLaneHost: a front whose host's address is held by
// something that is not a lane host fails StartFront with the reason, on
// time: what answers garbage or closes at once does not hold the
// credential (ErrUnauthenticated, classified so, long before
// JoinTimeout); what takes connections and says nothing leaves StartFront
// ErrNoHost at JoinTimeout, not later.
func TestAnAddressThatIsNoLaneHost(t *testing.T) {
	serve := func(answer func(net.Conn)) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return acceptEach(t, ln, answer)
	}
	const join = 3 * time.Second
	for name, answer := range map[string]func(net.Conn){
		"garbage": func(c net.Conn) {
			_, _ = c.Write([]byte("SSH-2.0-OpenSSH_9.6\r\n"))
			time.Sleep(time.Second)
			_ = c.Close()
		},
		"closes": func(c net.Conn) { _ = c.Close() },
	} {
		start := time.Now()
		_, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{serve(answer)}, JoinTimeout: join, Logf: t.Logf})
		if !errors.Is(err, remote.ErrUnauthenticated) || cuda.Classify(err).Code != cuda.CodeUnauthenticated {
			t.Errorf("%s: got %v (%v), want ErrUnauthenticated, classified so", name, err, cuda.Classify(err).Code)
		}
		if took := time.Since(start); took >= join {
			t.Errorf("%s: refused after %v, want before JoinTimeout (%v)", name, took, join)
		}
	}
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			_ = c.Close()
		}
	})
	hangs := make(chan net.Conn, 64)
	addr := serve(func(c net.Conn) { hangs <- c })
	start := time.Now()
	_, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{addr}, JoinTimeout: join, Logf: t.Logf})
	took := time.Since(start)
	for len(hangs) > 0 {
		held = append(held, <-hangs)
	}
	if !errors.Is(err, remote.ErrNoHost) || !strings.Contains(err.Error(), "did not register") {
		t.Errorf("a listener that says nothing: got %v, want ErrNoHost", err)
	}
	if took > join+within(2*time.Second) {
		t.Errorf("a listener that says nothing: StartFront returned after %v, want at JoinTimeout (%v)", took, join)
	}
}
