package remote_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
)

// fleetFront is a front's process in TestAFleetUnderLoad: it reads
// commands on standard input and answers on standard output.
type fleetFront struct {
	t     *testing.T
	name  string
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	err   *strings.Builder
}

func startFleetFront(t *testing.T, name, cluster string, seeds []string) *fleetFront {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), "LANES_CHILD=front-fleet", "LANES_CLUSTER="+cluster, "LANES_SEEDS="+strings.Join(seeds, ","), "LANES_FRONT="+name)
	ff := &fleetFront{t: t, name: name, cmd: cmd, lines: make(chan string, 64), err: &strings.Builder{}}
	cmd.Stderr = &syncWriter{b: ff.err}
	ff.in, _ = cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start front %s: got err %v, want nil", name, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	go func() {
		r := bufio.NewScanner(out)
		r.Buffer(nil, 1<<20)
		for r.Scan() {
			ff.lines <- r.Text()
		}
		close(ff.lines)
	}()
	return ff
}

// expect waits for the front's next line, which must start with prefix.
func (ff *fleetFront) expect(prefix string, within time.Duration) string {
	ff.t.Helper()
	select {
	case line, ok := <-ff.lines:
		if !ok || !strings.HasPrefix(line, prefix) {
			ff.t.Fatalf("front %s: got %q (open %v), want %q… (stderr: %s)", ff.name, line, ok, prefix, ff.err.String())
		}
		return strings.TrimSpace(strings.TrimPrefix(line, prefix))
	case <-time.After(within):
		ff.t.Fatalf("front %s said nothing within %v, want %q… (stderr: %s)", ff.name, within, prefix, ff.err.String())
		return ""
	}
}

func (ff *fleetFront) say(cmd string) { _, _ = fmt.Fprintln(ff.in, cmd) }

// fleetEnd is one error a tenant's loop met: the phases its step lived
// through (the one it was submitted in, the one it ended in), on which
// host, of which kind.
type fleetEnd struct {
	From, To, Host, Kind string // Kind: indeterminate, state-lost, left, leaving
}

// fleetPhases are TestAFleetUnderLoad's phases in their order.
var fleetPhases = []string{"start", "load", "join", "after-join", "cut", "heal", "after-heal", "leave", "after-leave", "kill", "after-kill"}

// fleetFails are the phases in which each host is failed: an error from
// it is charged to the first of them that its step lived through, and an
// error from a host in no phase of its own is a broken promise. Phases
// are told to both fronts, and acknowledged, before the test acts, so an
// error a host's failure caused ends in or after that failure's phase
// however slowly the machine runs.
var fleetFails = map[string][]string{"C": {"cut"}, "B": {"leave", "after-leave"}, "A": {"kill", "after-kill"}}

// charged is the phase an error is charged to: the first phase of its
// window in which its host failed; "" if none.
func (e fleetEnd) charged() string {
	from, to := slices.Index(fleetPhases, e.From), slices.Index(fleetPhases, e.To)
	for _, p := range fleetPhases[max(from, 0) : max(to, from, 0)+1] {
		if slices.Contains(fleetFails[e.Host], p) {
			return p
		}
	}
	return ""
}

// fleetResult is what a front's process reports when stopped.
type fleetResult struct {
	Accepted, Ended, OK int64
	InFlight            int
	Ends                []fleetEnd
	Wrong               []string // broken promises the front saw itself
	Hosts               []remote.HostStatus
}

// TestAFleetUnderLoad is the fleet's must-show: three lane host processes
// join a cluster, two front processes find them there and share them
// under one load; a host joins and takes new tenants; the way to one is
// cut and healed; one leaves well (nothing indeterminate); one is killed
// (its calls in flight end indeterminate once, the others' unaffected);
// accepted = ended at every front, every counter exact.
func TestAFleetUnderLoad(t *testing.T) {
	seeds := []*heldSocket{holdSocket(t), holdSocket(t), holdSocket(t)}
	const cluster = "fleet"
	a, _ := clusterHost(t, "A", cluster, seeds[0], addrs(seeds...))
	b, _ := clusterHost(t, "B", cluster, seeds[1], addrs(seeds...))
	fronts := []*fleetFront{startFleetFront(t, "F1", cluster, addrs(seeds...)), startFleetFront(t, "F2", cluster, addrs(seeds...))}
	for _, ff := range fronts {
		ff.expect("serving", 30*time.Second)
	}
	// Each phase is acknowledged by both fronts before the test acts.
	phase := func(p string, d time.Duration) {
		t.Helper()
		for _, ff := range fronts {
			ff.say("phase " + p)
		}
		for _, ff := range fronts {
			ff.expect("phase "+p, 20*time.Second)
		}
		time.Sleep(d) // load in this phase; nothing is charged by the clock
	}
	// await waits until both fronts see the host in that state.
	await := func(host, state string, member bool) {
		t.Helper()
		want := fmt.Sprintf("%s %s %v", host, state, member)
		for _, ff := range fronts {
			ff.say("await " + want)
		}
		for _, ff := range fronts {
			ff.expect("reached "+want, 60*time.Second)
		}
	}
	add := func(want string) {
		t.Helper()
		for _, ff := range fronts {
			ff.say("add 2 " + want)
			got := ff.expect("added", 20*time.Second)
			t.Logf("front %s, %s joined: %s", ff.name, want, got)
			for _, h := range strings.Fields(got) {
				if !strings.HasSuffix(h, "@"+want) {
					t.Errorf("front %s: new tenants placed %s, want on %s (the most headroom)", ff.name, got, want)
				}
			}
		}
	}
	phase("load", 500*time.Millisecond)

	// C joins (its work reached through a proxy, for the cut) and takes
	// the new tenants.
	toC := startProxy(t, "")
	_, said := clusterHost(t, "C", cluster, seeds[2], addrs(seeds...), "--advertise", toC.addr())
	toC.forward(said.Bound)
	phase("join", 0)
	add("C")
	phase("after-join", 700*time.Millisecond)

	// Cut the way to C under load until both fronts lost it, then heal
	// it: registered again, new tenants back on it.
	phase("cut", 0)
	toC.cut(true, true)
	await("C", "lost", true)
	toC.heal()
	phase("heal", 0)
	add("C")
	phase("after-heal", 500*time.Millisecond)

	// B leaves well: nothing indeterminate, its tenants told to move.
	phase("leave", 0)
	_ = b.Process.Signal(syscall.SIGTERM)
	if err := waitExit(b, 10*time.Second); err != nil {
		t.Errorf("B, asked to leave: got %v, want exit 0", err)
	}
	await("B", "left", false)
	phase("after-leave", 500*time.Millisecond)

	// A is killed: its calls in flight end indeterminate, once.
	phase("kill", 0)
	_ = a.Process.Signal(syscall.SIGKILL)
	await("A", "lost", false)
	phase("after-kill", 700*time.Millisecond)

	for _, ff := range fronts {
		ff.say("stop")
	}
	for _, ff := range fronts {
		var r fleetResult
		if err := json.Unmarshal([]byte(ff.expect("result", 60*time.Second)), &r); err != nil {
			t.Fatalf("front %s's result: %v", ff.name, err)
		}
		checkFleetFront(t, ff.name, r)
	}
}

// checkFleetFront holds one front's result to the must-show.
func checkFleetFront(t *testing.T, name string, r fleetResult) {
	t.Helper()
	for _, w := range r.Wrong {
		t.Errorf("front %s: %s", name, w)
	}
	if r.Accepted != r.Ended || r.InFlight != 0 {
		t.Errorf("front %s: accepted %d, ended %d, in flight %d: want every accepted call ended once", name, r.Accepted, r.Ended, r.InFlight)
	}
	count := map[string]int{}
	for _, e := range r.Ends {
		phase := e.charged()
		count[phase+" "+e.Host+" "+e.Kind]++
		switch {
		case phase == "":
			t.Errorf("front %s: a step submitted in phase %s and ended in %s met %s on %s: want errors only from the host a phase it lived through fails", name, e.From, e.To, e.Kind, e.Host)
		case e.Host == "B" && e.Kind != "left" && e.Kind != "leaving":
			t.Errorf("front %s: a tenant on B, which left well, met %s: want only refusals while it left, then left", name, e.Kind)
		case e.Host != "B" && (e.Kind == "left" || e.Kind == "leaving"):
			t.Errorf("front %s: a tenant on %s met %s: only B left", name, e.Host, e.Kind)
		}
	}
	t.Logf("front %s: %d steps ok, %d accepted = %d ended; errors by phase, host and kind: %v", name, r.OK, r.Accepted, r.Ended, count)
	for _, want := range []string{"cut C indeterminate", "kill A indeterminate"} {
		if count[want] == 0 {
			t.Errorf("front %s: no %q: want the failed host's calls in flight ended indeterminate", name, want)
		}
	}
	// Found in the cluster, each; the two gone are out of it and not
	// joined again (the killed one is not restarted by anyone).
	states := map[string]string{}
	for _, h := range r.Hosts {
		if !h.FromCluster {
			t.Errorf("front %s: host %s: not from the cluster, want every host found there", name, h.HostName)
		}
		states[h.HostName] = fmt.Sprintf("%v member=%v", h.Health, h.Member)
	}
	want := map[string]string{"A": "lost member=false", "B": "left member=false", "C": "serving member=true"}
	for h, w := range want {
		if states[h] != w {
			t.Errorf("front %s: host %s at the end: got %q, want %q", name, h, states[h], w)
		}
	}
	if count["leave B left"]+count["after-leave B left"] == 0 {
		t.Errorf("front %s: no tenant of B told it left: want its tenants moved", name)
	}
}

// waitExit waits for a host process to exit by itself.
func waitExit(cmd *exec.Cmd, within time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(within):
		return fmt.Errorf("still running after %v", within)
	}
}

// fleetTenant is one tenant's loop in a fleet front.
type fleetTenant struct {
	name string
	buf  cuda.Buffer
	enc  *remote.Encoded
	ok   int64 // steps ended well since it was last set up
}

// fleetChild is a front of TestAFleetUnderLoad: four tenants in closed
// loops, more on "add N HOST", the phase named on "phase P", its result
// on "stop".
func fleetChild() int {
	ctx := context.Background()
	// LostAfter: a host must be lost by silence only when cut or killed;
	// on a loaded machine a live host's beats may be late by far more
	// than 500 ms (a heal phase once lost A and B so).
	f, err := remote.StartFront(ctx, remote.FrontConfig{Cluster: &remote.ClusterConfig{Name: os.Getenv("LANES_CLUSTER"), Seeds: strings.Split(os.Getenv("LANES_SEEDS"), ","),
		Refresh: 100 * time.Millisecond}, LostAfter: within(500 * time.Millisecond), JoinTimeout: 20 * time.Second,
		// Hosts that stand for other machines, reached as a cluster's are:
		// through the remote alone (a cut of it is a partition).
		NoDataPlane: true,
		Logf:        func(format string, a ...any) { fmt.Fprintf(os.Stderr, format+"\n", a...) }})
	if err != nil {
		fmt.Println("StartFront:", err)
		return 1
	}
	defer f.Stop(ctx)
	fl := &fleet{f: f, stop: make(chan struct{})}
	fl.phase.Store(new("start"))
	for range 4 {
		if err := fl.start(); err != nil {
			fmt.Println("set up:", err)
			return 1
		}
	}
	fmt.Println("serving")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		words := strings.Fields(in.Text())
		switch {
		case len(words) == 2 && words[0] == "phase":
			fl.phase.Store(&words[1])
			fmt.Println("phase", words[1])
		case len(words) == 4 && words[0] == "await":
			fmt.Println(fl.await(words[1], words[2], words[3]))
		case len(words) == 3 && words[0] == "add":
			n, _ := strconv.Atoi(words[1])
			fmt.Println("added", fl.add(n, words[2]))
		case len(words) == 1 && words[0] == "stop":
			close(fl.stop)
			fl.wg.Wait()
			out, _ := json.Marshal(fl.result())
			fmt.Println("result", string(out))
			return 0
		}
	}
	return 1
}

// fleet is a front's tenants and what they met.
type fleet struct {
	f     *remote.Front
	phase atomic.Pointer[string]
	stop  chan struct{}
	wg    sync.WaitGroup
	n     atomic.Int64

	mu                     sync.Mutex
	tenants                []*fleetTenant
	accepted, ended, steps int64
	ends                   []fleetEnd
	wrong                  []string
}

// hostOf names the host a tenant is placed on by the name it gave itself.
func (fl *fleet) hostOf(tenant string) string {
	at, _ := fl.f.Placement(tenant)
	for _, h := range fl.f.Hosts() {
		if h.Name == at {
			return h.HostName
		}
	}
	return at
}

// start sets up a new tenant and starts its loop.
func (fl *fleet) start() error {
	t := &fleetTenant{name: fmt.Sprintf("%s-t%d", os.Getenv("LANES_FRONT"), fl.n.Add(1))}
	if err := fl.setUp(t); err != nil {
		return err
	}
	fl.mu.Lock()
	fl.tenants = append(fl.tenants, t)
	fl.mu.Unlock()
	fl.wg.Go(func() { fl.loop(t) })
	return nil
}

// add sets up n new tenants once a host named host serves, and names
// where each was placed.
func (fl *fleet) add(n int, host string) string {
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if h, ok := hostServing(fl.f, host); ok && h.Member {
			break
		}
	}
	var placed []string
	for range n {
		if err := fl.start(); err != nil {
			fl.broken("add: %v", err)
			continue
		}
		fl.mu.Lock()
		t := fl.tenants[len(fl.tenants)-1]
		fl.mu.Unlock()
		placed = append(placed, t.name+"@"+fl.hostOf(t.name))
	}
	return strings.Join(placed, " ")
}

// await answers once the front sees the host in that state, membership
// as given ("true" or "false"), or after a minute, saying what it saw.
func (fl *fleet) await(host, state, member string) string {
	var st remote.HostStatus
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		st, _ = hostByName(fl.f, host)
		if st.Health.String() == state && strconv.FormatBool(st.Member) == member {
			return fmt.Sprintf("reached %s %s %s", host, state, member)
		}
	}
	return fmt.Sprintf("gave up waiting for %s %s member=%s: got %+v", host, state, member, st)
}

func hostServing(f *remote.Front, name string) (remote.HostStatus, bool) {
	h, ok := hostByName(f, name)
	return h, ok && h.Health == remote.HostServing
}

func (fl *fleet) broken(format string, a ...any) {
	fl.mu.Lock()
	fl.wrong = append(fl.wrong, fmt.Sprintf(format, a...))
	fl.mu.Unlock()
}

// setUp places the tenant (again), zeroes its counter and encodes its step.
func (fl *fleet) setUp(t *fleetTenant) error {
	ctx := context.Background()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		b, err := fl.f.Alloc(ctx, t.name, cuda.BufferSpec{Size: 64, Elem: cuda.I32})
		if err == nil {
			up, _ := cuda.Upload(b.Whole(), make([]byte, 64))
			_, err = fl.f.Submit(ctx, t.name, lanes.Batch{Entries: []lanes.Entry{lanes.Eager(cache.PhaseDynamicBinding, up)}})
			if err == nil {
				cmd, _ := cuda.Launch(kernels.Builtin().MustSpec(kernels.Inc), cuda.Linear(16, 16), cuda.BufferArg(b.Whole()), cuda.I32Arg(16))
				t.enc, err = fl.f.Encode(lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("fleet", 0, cmd)}})
				t.buf, t.ok = b, 0
				return err
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		_ = fl.f.Forget(ctx, t.name) // its host went meanwhile: start over
	}
}

// loop runs the tenant's steps until stop; a tenant whose host is lost
// or left starts over on another.
func (fl *fleet) loop(t *fleetTenant) {
	ctx := context.Background()
	for {
		select {
		case <-fl.stop:
			fl.check(t)
			return
		default:
		}
		host, from := fl.hostOf(t.name), *fl.phase.Load()
		p, err := fl.f.SubmitEncoded(ctx, t.name, t.enc)
		if err == nil {
			fl.mu.Lock()
			fl.accepted++
			fl.mu.Unlock()
			_, err = p.Result()
			fl.mu.Lock()
			fl.ended++
			if err == nil {
				fl.steps++
			}
			fl.mu.Unlock()
			if err == nil {
				t.ok++
				continue
			}
		}
		var left *remote.DeviceStateLostError
		kind := ""
		switch {
		case errors.Is(err, actors.ErrIndeterminate):
			kind = "indeterminate"
		case errors.As(err, &left) && left.Left:
			kind = "left"
		case errors.As(err, &left):
			kind = "state-lost"
		case errors.Is(err, remote.ErrHostLeaving):
			kind = "leaving"
		case errors.Is(err, actors.ErrOverloaded), errors.Is(err, remote.ErrNoHost):
			time.Sleep(5 * time.Millisecond)
			continue
		default:
			fl.broken("%s on %s: %v", t.name, host, err)
			<-fl.stop
			return
		}
		fl.mu.Lock()
		fl.ends = append(fl.ends, fleetEnd{From: from, To: *fl.phase.Load(), Host: host, Kind: kind})
		fl.mu.Unlock()
		if kind == "leaving" {
			time.Sleep(5 * time.Millisecond) // it finishes what it has, then says it left
			continue
		}
		for fl.f.Forget(ctx, t.name) != nil {
			time.Sleep(time.Millisecond) // busy until its calls in flight end
		}
		if err := fl.setUp(t); err != nil {
			fl.broken("starting over: %v", err)
			<-fl.stop
			return
		}
	}
}

// check reads the tenant's counter: every step that ended well, once.
func (fl *fleet) check(t *fleetTenant) {
	data, err := fl.f.Read(context.Background(), t.name, t.buf.Whole())
	if err != nil {
		fl.broken("%s: read its counter: %v", t.name, err)
		return
	}
	if got := int64(int32(binary.LittleEndian.Uint32(data))); got != t.ok {
		fl.broken("%s on %s: counter %d after %d steps that ended well: want each once", t.name, fl.hostOf(t.name), got, t.ok)
	}
}

func (fl *fleet) result() fleetResult {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fleetResult{Accepted: fl.accepted, Ended: fl.ended, OK: fl.steps, InFlight: fl.f.InFlight(), Ends: fl.ends, Wrong: fl.wrong, Hosts: fl.f.Hosts()}
}
