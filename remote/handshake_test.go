// What a stranger's connections cost an endpoint, and what a front says of
// an address where no lane host answers as one.

package remote_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/codes"
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
// time: what answers garbage (a line of another protocol, an HTTP answer,
// the front's own bytes echoed) or closes at once does not hold the
// credential and is no lane host (ErrUnauthenticated, classified so, and
// ErrNoHost, long before JoinTimeout); what takes connections and says
// nothing leaves StartFront ErrNoHost at JoinTimeout, not later, saying
// so.
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
		"http": func(c net.Conn) {
			_, _ = c.Read(make([]byte, 1024))
			_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"))
			_ = c.Close()
		},
		"echo":   func(c net.Conn) { _, _ = io.Copy(c, c); _ = c.Close() },
		"closes": func(c net.Conn) { _ = c.Close() },
	} {
		start := time.Now()
		_, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{serve(answer)}, JoinTimeout: join, Logf: t.Logf})
		if !errors.Is(err, remote.ErrUnauthenticated) || !errors.Is(err, remote.ErrNoHost) || cuda.Classify(err).Code != codes.Unauthenticated ||
			!strings.Contains(err.Error(), "does not speak TLS") {
			t.Errorf("%s: got %v (%v), want ErrUnauthenticated and ErrNoHost, classified unauthenticated, saying it does not speak TLS", name, err, cuda.Classify(err).Code)
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
	if !errors.Is(err, remote.ErrNoHost) || cuda.Classify(err).Code != codes.NoHost || !strings.Contains(err.Error(), "did not register") ||
		!strings.Contains(err.Error(), "took a connection but has not completed a TLS handshake") {
		t.Errorf("a listener that says nothing: got %v, want ErrNoHost, saying what listens there took a connection and no handshake", err)
	}
	if took > join+within(2*time.Second) {
		t.Errorf("a listener that says nothing: StartFront returned after %v, want at JoinTimeout (%v)", took, join)
	}
}

func init() {
	children["never-listens"] = neverListensChild
}

// neverListensChild is a process launched as a lane host that is none:
// it says nothing, or (with $LANES_LISTEN_AT) says it listens at an
// address where no lane host is, and goes on running whatever its
// standard input does, until it is killed.
func neverListensChild() int {
	if at := os.Getenv("LANES_LISTEN_AT"); at != "" {
		fmt.Println(remote.Listening{Address: at})
	}
	select {}
}

// TestALaunchedHostThatNeverListens: StartFront with a launched host that
// never serves fails within JoinTimeout (not JoinTimeout plus the grace a
// host that stops well gets), with ErrNoHost that says what it found: a
// process that never said where it listens, or one that named an address
// where what listens takes connections but is no lane host; and the
// process is killed, though it ignores its standard input closing.
func TestALaunchedHostThatNeverListens(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0") // held until the test ends: what the process names
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan net.Conn, 64)
	silent := acceptEach(t, ln, func(c net.Conn) { held <- c })
	t.Cleanup(func() {
		for len(held) > 0 {
			_ = (<-held).Close()
		}
	})
	const join = time.Second
	margin := 2500 * time.Millisecond // under the 3 s a launched host is given to stop well
	if timed {
		margin = 500 * time.Millisecond
	}
	for _, tc := range []struct {
		name, at, found string
	}{
		{"says nothing", "", "has not said where it listens"},
		{"names an address that is no lane host", silent, "said it listens at " + silent},
	} {
		start := time.Now()
		f, err := remote.StartFront(context.Background(), remote.FrontConfig{JoinTimeout: join, Logf: t.Logf,
			Processes: []remote.HostProcess{{Name: "none", Path: os.Args[0], Env: []string{"LANES_CHILD=never-listens", "LANES_LISTEN_AT=" + tc.at}}}})
		took := time.Since(start)
		if err == nil {
			_ = f.Stop(context.Background())
		}
		if !errors.Is(err, remote.ErrNoHost) || cuda.Classify(err).Code != codes.NoHost || !strings.Contains(err.Error(), tc.found) {
			t.Errorf("%s: got %v (%v), want ErrNoHost saying %q", tc.name, err, cuda.Classify(err).Code, tc.found)
		}
		if took > join+margin {
			t.Errorf("%s: StartFront returned after %v, want within JoinTimeout (%v) and %v", tc.name, took, join, margin)
		}
		t.Logf("%s: %v after %v", tc.name, err, took.Round(time.Millisecond))
	}
}
