package remote_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
)

// TestStopKeepsItsDeadlineAndLeavesNoProcess: Stop with a short context
// returns near its end even when launched hosts are stopped (SIGSTOP) and
// cannot stop themselves, and a Stop while a killed host is being
// restarted leaves no host process behind.
func TestStopKeepsItsDeadlineAndLeavesNoProcess(t *testing.T) {
	f, _ := launchTwo(t, time.Second)
	var pids []int
	for _, h := range f.Hosts() {
		pids = append(pids, h.PID)
		if err := syscall.Kill(h.PID, syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP %d: got err %v, want nil", h.PID, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	begin := time.Now()
	_ = f.Stop(ctx)
	if took := time.Since(begin); took > 2*time.Second {
		t.Fatalf("Stop with a 100 ms context and two stopped hosts: took %v, want it near 100 ms (each host killed at the context's end)", took)
	}
	for _, pid := range pids {
		assertGone(t, pid)
	}

	g, err := remote.StartFront(context.Background(), remote.FrontConfig{Logf: t.Logf, RestartBackoff: 50 * time.Millisecond,
		Processes: []remote.HostProcess{{Name: "r", Path: lanehostBin, Args: []string{"--heartbeat", "50ms"}}}})
	if err != nil {
		t.Fatalf("StartFront: got err %v, want nil", err)
	}
	first := g.Hosts()[0].PID
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: got err %v, want nil", first, err)
	}
	var restarted int
	deadline := time.Now().Add(10 * time.Second)
	for restarted == 0 || restarted == first {
		if time.Now().After(deadline) {
			t.Fatalf("the killed host was not started again within 10 s")
		}
		time.Sleep(time.Millisecond)
		restarted = g.Hosts()[0].PID
	}
	_ = g.Stop(context.Background()) // while the new process starts and joins
	if st := g.Hosts()[0]; st.Health != remote.HostStopped {
		t.Fatalf("after Stop: got state %v, want stopped", st.Health)
	}
	assertGone(t, restarted)
}

// assertGone fails unless process pid is gone within a second (reaped by
// its parent: a zombie counts as gone only once reaped).
func assertGone(t *testing.T, pid int) {
	t.Helper()
	for range 100 {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("host process %d still runs after Stop: want it stopped", pid)
}

// TestForgetAfterARestartKeepsTheCount: tenants of a host that was lost
// and came back forget and set up again; the host's tenant count is that
// of the tenants on it now, never negative, and new tenants are placed on
// the host with fewer.
func TestForgetAfterARestartKeepsTheCount(t *testing.T) {
	f, _ := launchTwo(t, 3*time.Second) // tenant-0..3, two on each host; a wide bound: this counts tenants, a starved machine must not lose a host
	var killed remote.HostStatus
	for _, h := range f.Hosts() {
		if h.Name == "a" {
			killed = h
		}
	}
	if err := syscall.Kill(killed.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9: got err %v, want nil", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := hostNamed(f, "a")
		if st.Health == remote.HostServing && st.Epoch != killed.Epoch {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("host a did not serve again within 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := range 4 {
		tenant := fmt.Sprintf("tenant-%d", i)
		if h, _ := f.Placement(tenant); h == "a" {
			if err := f.Forget(context.Background(), tenant); err != nil {
				t.Fatalf("Forget %s: got err %v, want nil", tenant, err)
			}
			setUp(t, f, tenant)
		}
	}
	if got := hostNamed(f, "a").Tenants; got != 2 {
		t.Fatalf("host a's tenants after its two set up again: got %d, want 2", got)
	}
	for i := range 4 {
		setUp(t, f, fmt.Sprintf("new-%d", i))
	}
	a, b := hostNamed(f, "a").Tenants, hostNamed(f, "b").Tenants
	if a != 4 || b != 4 {
		t.Fatalf("tenants after four new ones: got a %d, b %d; want 4 and 4 (placed on the host with fewer)", a, b)
	}
}

// TestARefusedFrontAsksAgain: a host restarted at its address takes
// another front first and is full (--max-fronts 1): the front that served
// it before is refused for now, asks again, and serves once the other
// front is gone.
func TestARefusedFrontAsksAgain(t *testing.T) {
	host, addr := startHostProcess(t, "--max-fronts", "1", "--heartbeat", "50ms")
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{addr}, LostAfter: 300 * time.Millisecond, Logf: t.Logf})
	if err != nil {
		t.Fatalf("StartFront: got err %v, want nil", err)
	}
	t.Cleanup(func() { _ = f.Stop(context.Background()) })
	first := hostNamed(f, addr)
	_ = host.Process.Kill()
	_ = host.Wait()
	for hostNamed(f, addr).Health == remote.HostServing {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // its first join went to no one: the next is a second away
	startHostProcess(t, "--max-fronts", "1", "--heartbeat", "50ms", "--listen", addr)
	other := holdFront(t, addr) // takes the one place before f asks again
	deadline := time.Now().Add(10 * time.Second)
	for hostNamed(f, addr).Health != remote.HostRefused {
		if time.Now().After(deadline) {
			t.Fatalf("the first front while another holds the host: got %+v, want refused for now", hostNamed(f, addr))
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = other.Process.Kill()
	_ = other.Wait()
	st := waitServing(t, f, addr, first.Epoch, 15*time.Second)
	if _, err := f.Alloc(context.Background(), "after", cuda.BufferSpec{Size: 64, Elem: cuda.I32}); err != nil {
		t.Fatalf("Alloc once the first front serves again (%+v): got err %v, want nil", st, err)
	}
}

// holdFront starts a front in a child process that joins addr and holds
// it until killed.
func holdFront(t *testing.T, addr string) *exec.Cmd {
	t.Helper()
	hold := exec.Command(os.Args[0], "-test.run", "^$")
	hold.Env = append(os.Environ(), "LANES_CHILD=front-hold", "LANES_HOST="+addr)
	out, _ := hold.StdoutPipe()
	if err := hold.Start(); err != nil {
		t.Fatalf("start a holding front: got err %v, want nil", err)
	}
	t.Cleanup(func() { _ = hold.Process.Kill(); _ = hold.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); !strings.Contains(line, "joined") {
		t.Fatalf("the holding front: got %q, want it joined", line)
	}
	return hold
}

// TestForgetWaitsForTheTenantsSubmissions: Forget right after SubmitAsync
// is refused as busy (retryable) and frees nothing: the submission runs
// on its buffers and ends well; once it ended, Forget goes through.
func TestForgetWaitsForTheTenantsSubmissions(t *testing.T) {
	_, addr := startHostProcess(t)
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{addr}, Logf: t.Logf})
	if err != nil {
		t.Fatalf("StartFront: got err %v, want nil", err)
	}
	t.Cleanup(func() { _ = f.Stop(context.Background()) })
	refused := 0
	for i := range 50 {
		tenant := fmt.Sprintf("tenant-%d", i)
		c := setUp(t, f, tenant)
		p, err := f.SubmitAsync(context.Background(), tenant, c.step(t, 4))
		if err != nil {
			t.Fatalf("SubmitAsync: got err %v, want nil", err)
		}
		busy := f.Forget(context.Background(), tenant)
		if _, err := p.Result(); err != nil {
			t.Fatalf("%s's step beside a Forget (Forget said %v): got err %v, want nil (its buffers kept)", tenant, busy, err)
		}
		if busy == nil {
			continue // the step ended before Forget came (a descheduled test): nothing to check
		}
		refused++
		if !errors.Is(busy, actors.ErrTenantBusy) {
			t.Fatalf("%s: Forget with a submission in flight: got %v, want actors.ErrTenantBusy", tenant, busy)
		}
		if got := c.value(t, f); got != 4 {
			t.Fatalf("%s's counter: got %d, want 4", tenant, got)
		}
		if err := f.Forget(context.Background(), tenant); err != nil {
			t.Fatalf("%s: Forget once its step ended: got %v, want nil", tenant, err)
		}
	}
	if refused < 25 {
		t.Fatalf("Forget right after SubmitAsync: got %d of 50 refused as busy, want most (the step takes a round trip)", refused)
	}
}

// TestAStoppedFrontAnswersStoppedFirst: after Stop, every call of a front
// answers stopped before it looks at its context or its tenant, as the
// scheduler does; before Stop, a nil context is an invalid argument
// (errors.Is actors.ErrInvalidArgument, as in one process).
func TestAStoppedFrontAnswersStoppedFirst(t *testing.T) {
	ctx := context.Background()
	_, addr := startHostProcess(t, "--sim-clock", "zero", "--lanes", "1")
	f, err := remote.StartFront(ctx, remote.FrontConfig{Hosts: []string{addr}, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	//lint:ignore SA1012 the mistake under test
	if _, err := f.Alloc(nil, "a", cuda.BufferSpec{Size: 64, Elem: cuda.I32}); !errors.Is(err, actors.ErrInvalidArgument) || !errors.Is(err, remote.ErrConfig) {
		t.Errorf("Alloc with a nil context: got %v, want ErrInvalidArgument and ErrConfig", err)
	}
	if err := f.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	var b cuda.Buffer
	for what, err := range map[string]error{
		//lint:ignore SA1012 the mistake under test
		"Alloc": func() error { _, err := f.Alloc(nil, "", cuda.BufferSpec{}); return err }(),
		//lint:ignore SA1012 the mistake under test
		"Read": func() error { _, err := f.Read(nil, "\xff", b.Whole()); return err }(),
		//lint:ignore SA1012 the mistake under test
		"Free": f.Free(nil, "", b),
		//lint:ignore SA1012 the mistake under test
		"Forget": f.Forget(nil, ""),
		//lint:ignore SA1012 the mistake under test
		"Seal": func() error { _, err := f.Seal(nil, ""); return err }(),
		//lint:ignore SA1012 the mistake under test
		"Replay": func() error { _, err := f.Replay(nil, "", nil, nil, false); return err }(),
		//lint:ignore SA1012 the mistake under test
		"Repeat": func() error { _, err := f.Repeat(nil, "", nil, nil); return err }(),
		//lint:ignore SA1012 the mistake under test
		"SubmitAsync": func() error { _, err := f.SubmitAsync(nil, "", lanes.Batch{}); return err }(),
	} {
		if !errors.Is(err, actors.ErrStopped) {
			t.Errorf("%s after Stop, with a nil context and a bad tenant: got %v, want stopped first", what, err)
		}
	}
}
