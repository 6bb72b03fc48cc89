package remote_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
)

// proxy forwards TCP connections on loopback to an address, given at its
// start or later by forward (a proxy listens before the process it
// forwards to has said where it listens: connections wait for it); a
// cut drops every byte one way (from the dialler, or to it) from then on
// (the peers hear silence, no error); heal forwards again on new
// connections (the old ones are closed, as a partition that heals leaves
// them broken).
type proxy struct {
	ln              net.Listener
	known           chan struct{} // closed once to is set
	mu              sync.Mutex
	to              string
	cutOut, cutBack bool // bytes from the dialler, bytes to it
	conns           []net.Conn
}

func startProxy(t *testing.T, to string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: listen: got err %v, want nil", err)
	}
	p := &proxy{ln: ln, known: make(chan struct{})}
	if to != "" {
		p.forward(to)
	}
	closed := make(chan struct{})
	t.Cleanup(func() { _ = ln.Close(); close(closed); p.closeAll() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				select {
				case <-p.known:
				case <-closed:
					_ = c.Close()
					return
				}
				p.mu.Lock()
				to := p.to
				p.mu.Unlock()
				d, err := net.Dial("tcp", to)
				if err != nil {
					_ = c.Close()
					return
				}
				p.mu.Lock()
				p.conns = append(p.conns, c, d)
				p.mu.Unlock()
				go p.pipe(c, d, true)
				go p.pipe(d, c, false)
			}()
		}
	}()
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

// forward sends the connections accepted from now on, and those waiting,
// to addr; it is given once.
func (p *proxy) forward(addr string) {
	p.mu.Lock()
	p.to = addr
	p.mu.Unlock()
	close(p.known)
}

func (p *proxy) pipe(from, to net.Conn, out bool) {
	buf := make([]byte, 64<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			p.mu.Lock()
			cut := p.cutBack
			if out {
				cut = p.cutOut
			}
			p.mu.Unlock()
			if !cut {
				if _, err := to.Write(buf[:n]); err != nil {
					return
				}
			}
		}
		if err != nil {
			_ = to.Close()
			return
		}
	}
}

func (p *proxy) cut(out, back bool) {
	p.mu.Lock()
	p.cutOut, p.cutBack = out, back
	p.mu.Unlock()
}

func (p *proxy) heal() {
	p.cut(false, false)
	p.closeAll()
}

func (p *proxy) closeAll() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// TestAPartitionThatHeals: a front (in a process of its own) reaches its
// host, and the host the front, only through proxies; cutting both ways,
// or either one, under load, the front loses the host within its bound
// (every call in flight ends indeterminate, once: a cut towards the host
// is seen by the host's heartbeats no longer echoing the front's probes);
// healing, the host registers again under a new epoch and the tenants
// start over and serve.
func TestAPartitionThatHeals(t *testing.T) {
	for _, c := range []struct {
		name            string
		toHost, toFront bool
	}{{"both ways", true, true}, {"towards the host", true, false}, {"towards the front", false, true}} {
		t.Run(c.name, func(t *testing.T) { partition(t, c.toHost, c.toFront) })
	}
}

func partition(t *testing.T, cutToHost, cutToFront bool) {
	toHost, toFront := startProxy(t, ""), startProxy(t, "")
	_, said := startHostWith(t, nil, "--heartbeat", "50ms", "--advertise", toHost.addr())
	toHost.forward(said.Bound)
	child := exec.Command(os.Args[0], "-test.run", "^$")
	child.Env = append(os.Environ(), "LANES_CHILD=front-partition", "LANES_HOST="+toHost.addr(), "LANES_ADVERTISE="+toFront.addr())
	var stderr strings.Builder
	child.Stderr = &syncWriter{b: &stderr}
	out, _ := child.StdoutPipe()
	if err := child.Start(); err != nil {
		t.Fatalf("start the front's process: got err %v, want nil", err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	lines := bufio.NewReader(out)
	expect := func(prefix string, within time.Duration) string {
		t.Helper()
		got := make(chan string, 1)
		go func() { line, _ := lines.ReadString('\n'); got <- strings.TrimSpace(line) }()
		select {
		case line := <-got:
			if !strings.HasPrefix(line, prefix) {
				t.Fatalf("the front's process: got %q, want %q… (stderr: %s)", line, prefix, stderr.String())
			}
			return line
		case <-time.After(within):
			t.Fatalf("the front's process said nothing within %v, want %q… (stderr: %s)", within, prefix, stderr.String())
			return ""
		}
	}
	toFront.forward(strings.TrimPrefix(expect("bound ", 30*time.Second), "bound "))
	expect("serving", 30*time.Second)
	time.Sleep(300 * time.Millisecond)
	// Bytes towards the host: out on the front's connection to it, back on
	// the host's connection to the front; towards the front the other two.
	toHost.cut(cutToHost, cutToFront)
	toFront.cut(cutToFront, cutToHost)
	cutAt := time.Now()
	expect("lost", 20*time.Second)
	if took := time.Since(cutAt); took > within(500*time.Millisecond+100*time.Millisecond+300*time.Millisecond) {
		t.Errorf("the front lost the host %v after the cut, want within LostAfter 500ms + 1/5 (+ scheduling)", took)
	}
	time.Sleep(time.Second)
	toHost.heal()
	toFront.heal()
	t.Log(expect("ok", 30*time.Second))
	if err := child.Wait(); err != nil {
		t.Fatalf("the front's process: got %v, want exit 0 (stderr: %s)", err, stderr.String())
	}
}

// partitionChild is TestAPartitionThatHeals's front: load until the host is
// lost, then wait for it and start over. It prints serving, lost, and ok
// with its counts, and exits 1 on any broken promise.
func partitionChild() int {
	fail := func(format string, a ...any) int { fmt.Fprintf(os.Stderr, format+"\n", a...); return 1 }
	ctx := context.Background()
	logf := func(format string, a ...any) {
		msg := fmt.Sprintf(format, a...)
		if addr, ok := strings.CutPrefix(msg, "listening on "); ok { // where the proxy to the front forwards
			fmt.Println("bound", strings.TrimSuffix(strings.Fields(addr)[0], ","))
		}
		fmt.Fprintln(os.Stderr, msg)
	}
	// The host stands for one on another machine: reached through the
	// remote alone, which the test's proxy cuts (a partition).
	f, err := remote.StartFront(ctx, remote.FrontConfig{Hosts: []string{os.Getenv("LANES_HOST")}, Advertise: os.Getenv("LANES_ADVERTISE"),
		LostAfter: 500 * time.Millisecond, NoDataPlane: true, Logf: logf})
	if err != nil {
		return fail("StartFront: %v", err)
	}
	defer f.Stop(ctx)
	first := f.Hosts()[0].Epoch
	setUp := func(tenant string) (cuda.Buffer, *remote.Encoded, error) {
		b, err := f.Alloc(ctx, tenant, cuda.BufferSpec{Size: 64, Elem: cuda.I32})
		if err != nil {
			return b, nil, err
		}
		up, _ := cuda.Upload(b.Whole(), make([]byte, 64))
		if _, err := f.Submit(ctx, tenant, lanes.Batch{Entries: []lanes.Entry{lanes.Eager(cache.PhaseDynamicBinding, up)}}); err != nil {
			return b, nil, err
		}
		cmd, _ := cuda.Launch(kernels.Builtin().MustSpec(kernels.Inc), cuda.Linear(16, 16), cuda.BufferArg(b.Whole()), cuda.I32Arg(16))
		enc, err := f.Encode(lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("partition", 0, cmd)}})
		return b, enc, err
	}
	var accepted, ended, ok, indeterminate atomic.Int64
	var wg sync.WaitGroup
	for i := range 2 {
		tenant := fmt.Sprintf("tenant-%d", i)
		_, enc, err := setUp(tenant)
		if err != nil {
			return fail("set up %s: %v", tenant, err)
		}
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					p, err := f.SubmitEncoded(ctx, tenant, enc)
					if err != nil {
						return // refused (the host lost): definitely not submitted
					}
					accepted.Add(1)
					_, err = p.Result()
					ended.Add(1)
					switch {
					case err == nil:
						ok.Add(1)
					case errors.Is(err, remote.ErrHostLost) && errors.Is(err, actors.ErrIndeterminate):
						indeterminate.Add(1)
						return
					default:
						fmt.Fprintf(os.Stderr, "a step: %v\n", err)
						return
					}
				}
			}()
		}
	}
	fmt.Println("serving")
	wg.Wait()
	fmt.Println("lost")
	if accepted.Load() != ended.Load() || f.InFlight() != 0 {
		return fail("accepted %d, ended %d, in flight %d: want every call ended once", accepted.Load(), ended.Load(), f.InFlight())
	}
	deadline := time.Now().Add(25 * time.Second)
	for st := f.Hosts()[0]; st.Health != remote.HostServing || st.Epoch == first; st = f.Hosts()[0] {
		if time.Now().After(deadline) {
			return fail("the host after the partition healed: %+v, want serving under a new epoch", st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i := range 2 {
		tenant := fmt.Sprintf("tenant-%d", i)
		if _, err := f.SubmitEncoded(ctx, tenant, nil); err == nil {
			return fail("a nil step: want refused")
		}
		_ = f.Forget(ctx, tenant)
		b, enc, err := setUp(tenant)
		if err != nil {
			return fail("%s starting over: %v", tenant, err)
		}
		p, err := f.SubmitEncoded(ctx, tenant, enc)
		if err == nil {
			_, err = p.Result()
		}
		if err != nil {
			return fail("%s's step after starting over: %v", tenant, err)
		}
		data, err := f.Read(ctx, tenant, b.Whole())
		if err != nil || int32(binary.LittleEndian.Uint32(data)) != 1 {
			return fail("%s's counter after one step: %v %v, want 1", tenant, data, err)
		}
	}
	st := f.Hosts()[0]
	fmt.Printf("ok: %d steps, %d ended indeterminate with the cut, %d stale dropped, epoch %d -> %d\n", ok.Load(), indeterminate.Load(), st.Stale, first, st.Epoch)
	return 0
}
