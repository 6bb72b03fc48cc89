package remote_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
)

// lanehostBin is the lanehost binary TestMain builds for the tests that
// run hosts as processes.
var lanehostBin string

func TestMain(m *testing.M) {
	if os.Getenv("LANES_TLS_CHILD") == "1" {
		os.Exit(tlsFrontChild())
	}
	if child, ok := children[os.Getenv("LANES_CHILD")]; ok {
		os.Exit(child())
	}
	switch os.Getenv("LANES_CHILD") {
	case "front":
		os.Exit(frontChild())
	case "front-load":
		os.Exit(loadChild())
	case "front-partition":
		os.Exit(partitionChild())
	case "front-hold":
		if _, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{os.Getenv("LANES_HOST")}}); err != nil {
			fmt.Println("StartFront:", err)
			os.Exit(1)
		}
		time.Sleep(300 * time.Millisecond) // the host has the Welcome: it serves this front
		fmt.Println("joined")
		select {} // until killed
	}
	dir, err := os.MkdirTemp("", "lanehost")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// One token for this test binary, its children and their hosts (every
	// front and host it starts reads it), kept out of the user's own.
	_ = os.Setenv(remote.TokenFileEnv, filepath.Join(dir, "token"))
	lanehostBin = filepath.Join(dir, "lanehost")
	if !fuzzing() {
		if out, err := exec.Command("go", "build", "-o", lanehostBin, "github.com/lanesched/lanes/cmd/lanehost").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build lanehost: %v\n%s", err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// fuzzing reports whether this process fuzzes (the coordinator or one of
// its workers, each of which runs TestMain): no test of this package runs
// then, so no lanehost is built (it took ten seconds a worker).
func fuzzing() bool {
	for _, a := range os.Args[1:] {
		if strings.HasPrefix(a, "-test.fuzzworker") || strings.HasPrefix(a, "-test.fuzz=") {
			return true
		}
	}
	return false
}

// counter is a tenant's buffer of 16 int32 on its host.
type counter struct {
	tenant string
	buf    cuda.Buffer
}

// setUp allocates the tenant's counter and zeroes it.
func setUp(t testing.TB, f *remote.Front, tenant string) counter {
	t.Helper()
	ctx := context.Background()
	b, err := f.Alloc(ctx, tenant, cuda.BufferSpec{Size: 64, Elem: cuda.I32})
	if err != nil {
		t.Fatalf("Alloc for %s: got err %v, want nil", tenant, err)
	}
	up, err := cuda.Upload(b.Whole(), make([]byte, 64))
	if err != nil {
		t.Fatalf("Upload: got err %v, want nil", err)
	}
	if _, err := f.Submit(ctx, tenant, lanes.Batch{Entries: []lanes.Entry{lanes.Eager(cache.PhaseDynamicBinding, up)}}); err != nil {
		t.Fatalf("zeroing %s's counter: got err %v, want nil", tenant, err)
	}
	return counter{tenant: tenant, buf: b}
}

// step is k launches adding 1 to every element of the counter, replayed.
func (c counter) step(t testing.TB, k int) lanes.Batch {
	t.Helper()
	spec := kernels.Builtin().MustSpec(kernels.Inc)
	var b lanes.Batch
	for i := range k {
		cmd, err := cuda.Launch(spec, cuda.Linear(16, 16), cuda.BufferArg(c.buf.Whole()), cuda.I32Arg(16))
		if err != nil {
			t.Fatalf("Launch: got err %v, want nil", err)
		}
		b.Entries = append(b.Entries, lanes.Replayed("remote-test", i, cmd))
	}
	return b
}

// value reads element 0 of the counter back.
func (c counter) value(t testing.TB, f *remote.Front) int32 {
	t.Helper()
	data, err := f.Read(context.Background(), c.tenant, c.buf.Whole())
	if err != nil {
		t.Fatalf("Read %s: got err %v, want nil", c.tenant, err)
	}
	if len(data) != 64 {
		t.Fatalf("Read %s: got %d bytes, want 64", c.tenant, len(data))
	}
	return int32(binary.LittleEndian.Uint32(data))
}

// TestFrontServesTenantsOnTwoHosts: tenants are placed across two hosts,
// allocate, upload, run steps and read back through the front; each
// tenant's counter holds exactly its own steps. (One host's --heartbeat 0
// is the default, as HostConfig's 0 is.)
func TestFrontServesTenantsOnTwoHosts(t *testing.T) {
	_, a := startHostProcess(t, "--lanes", "2")
	_, b := startHostProcess(t, "--lanes", "2", "--heartbeat", "0")
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{a, b}, Logf: t.Logf})
	if err != nil {
		t.Fatalf("StartFront: got err %v, want nil", err)
	}
	defer f.Stop(context.Background())
	var cs []counter
	for i := range 4 {
		cs = append(cs, setUp(t, f, fmt.Sprintf("tenant-%d", i)))
	}
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 + i {
				if _, err := f.Submit(context.Background(), c.tenant, c.step(t, 4)); err != nil {
					t.Errorf("step of %s: got err %v, want nil", c.tenant, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i, c := range cs {
		if got, want := c.value(t, f), int32(4*(5+i)); got != want {
			t.Errorf("%s's counter: got %d, want %d", c.tenant, got, want)
		}
	}
	hosts := f.Hosts()
	for _, h := range hosts {
		if h.Health != remote.HostServing || h.Tenants != 2 {
			t.Errorf("host %s: got %v with %d tenants, want serving with 2", h.Name, h.Health, h.Tenants)
		}
	}
}

// TestStartFrontRefusesBadConfig: refused before anything starts.
func TestStartFrontRefusesBadConfig(t *testing.T) {
	//lint:ignore SA1012 a nil context is what is being refused
	if _, err := remote.StartFront(nil, remote.FrontConfig{Hosts: []string{"127.0.0.1:1"}}); !errors.Is(err, remote.ErrConfig) {
		t.Errorf("StartFront(nil, ...): got err %v, want remote.ErrConfig", err)
	}
	for _, cfg := range []remote.FrontConfig{
		{},
		{Hosts: []string{"10.1.2.3:9000"}},
		{Hosts: []string{"nonsense"}},
		{Hosts: []string{"127.0.0.1:1"}, Address: "0.0.0.0:0"},
		{Hosts: []string{"127.0.0.1:1"}, LostAfter: time.Millisecond},
		{Processes: []remote.HostProcess{{Name: "x"}}},
		{Hosts: []string{"127.0.0.1:1", "127.0.0.1:1"}},
	} {
		f, err := remote.StartFront(context.Background(), cfg)
		if err == nil {
			_ = f.Stop(context.Background())
		}
		if !errors.Is(err, remote.ErrConfig) {
			t.Errorf("StartFront(%+v): got err %v, want remote.ErrConfig", cfg, err)
		}
	}
}

func cudaSpec64() cuda.BufferSpec { return cuda.BufferSpec{Size: 64, Elem: cuda.I32} }

func errorsAs(err error, target any) bool { return errors.As(err, target) }

// TestEncodedBatches: encoded steps reach the host whole once, by id after
// that; a host that could not keep a template (it keeps one here) says so
// and gets it whole again; every step runs once, and the receipts' rows
// (left out when unchanged) are the full rows each time.
func TestEncodedBatches(t *testing.T) {
	_, addr := startHostProcess(t, "--max-templates", "1")
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{addr}, Logf: t.Logf})
	if err != nil {
		t.Fatalf("StartFront: got err %v, want nil", err)
	}
	defer f.Stop(context.Background())
	c := setUp(t, f, "tenant")
	one, err := f.Encode(c.step(t, 1))
	if err != nil {
		t.Fatalf("Encode: got err %v, want nil", err)
	}
	three, err := f.Encode(c.step(t, 3))
	if err != nil {
		t.Fatalf("Encode: got err %v, want nil", err)
	}
	want := int32(0)
	for i := range 20 {
		e, n := one, 1
		if i%2 == 1 {
			e, n = three, 3
		}
		p, err := f.SubmitEncoded(context.Background(), "tenant", e)
		if err != nil {
			t.Fatalf("SubmitEncoded %d: got err %v, want nil", i, err)
		}
		r, err := p.Result()
		if err != nil {
			t.Fatalf("step %d: got err %v, want nil", i, err)
		}
		if len(r.Attribution.Rows) != n {
			t.Fatalf("step %d: got %d rows, want %d", i, len(r.Attribution.Rows), n)
		}
		if len(r.Attribution.Rows) != n || r.Attribution.Rows[n-1].Index != n-1 {
			t.Fatalf("step %d: got rows %+v, want %d in order", i, r.Attribution.Rows, n)
		}
		want += int32(n)
	}
	if got := c.value(t, f); got != want {
		t.Fatalf("counter: got %d, want %d (every step once)", got, want)
	}
	if _, err := f.SubmitEncoded(context.Background(), "tenant", nil); !errors.Is(err, remote.ErrConfig) {
		t.Fatalf("SubmitEncoded(nil): got err %v, want remote.ErrConfig", err)
	}
}

// TestLargeUploadsAndReads: uploads and reads of several MiB (past gRPC's
// default 4 MiB message) cross the wire, and many at once wait for room
// instead of breaking the connection.
func TestLargeUploadsAndReads(t *testing.T) {
	_, addr := startHostProcess(t, "--sim-clock", "zero")
	// Heartbeats queue behind up to 64 MiB of bulk bytes on the connection:
	// under the race detector the front reads them slowly.
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{addr}, LostAfter: 5 * time.Second, Logf: t.Logf})
	if err != nil {
		t.Fatalf("StartFront: got err %v, want nil", err)
	}
	defer f.Stop(context.Background())
	ctx := context.Background()
	const size = 8 << 20
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tenant := fmt.Sprintf("big-%d", i)
			b, err := f.Alloc(ctx, tenant, cuda.BufferSpec{Size: size, Elem: cuda.U8})
			if err != nil {
				t.Errorf("Alloc 8 MiB: got err %v, want nil", err)
				return
			}
			data := make([]byte, size)
			for j := range data {
				data[j] = byte(i + j)
			}
			up, err := cuda.Upload(b.Whole(), data)
			if err != nil {
				t.Errorf("Upload: got err %v, want nil", err)
				return
			}
			if _, err := f.Submit(ctx, tenant, lanes.Batch{Entries: []lanes.Entry{lanes.Eager(cache.PhaseDynamicBinding, up)}}); err != nil {
				t.Errorf("an 8 MiB upload: got err %v, want nil", err)
				return
			}
			back, err := f.Read(ctx, tenant, b.Whole())
			if err != nil || !bytes.Equal(back, data) {
				t.Errorf("an 8 MiB read: got %d bytes (equal %v), err %v; want the bytes uploaded", len(back), bytes.Equal(back, data), err)
			}
		}()
	}
	wg.Wait()
	h := f.Hosts()[0]
	if h.Losses != 0 {
		t.Fatalf("host after large messages: got %d losses (%s), want none", h.Losses, h.LostHow)
	}
	// The first upload at least found the 16 MiB upload area empty; every
	// span came back with its call's end.
	if !h.DataPlane || h.AreaUploads == 0 || h.AreaBytesInUse != 0 {
		t.Fatalf("host after 8 MiB uploads: got DataPlane %v, %d through the upload area, %d of its bytes in use; want some through it and none in use", h.DataPlane, h.AreaUploads, h.AreaBytesInUse)
	}
}

// TestFrontsShareAHost: two fronts in two processes serve their tenants
// on one host at once; the host, not either front, enforces its lanes'
// admission across both (each front alone stays under it; together they
// are answered overloaded, retryably, by the host); every call each front
// accepted ends once and each tenant's counter holds exactly its steps; a
// front past the host's --max-fronts is refused with the reason.
func TestFrontsShareAHost(t *testing.T) {
	_, addr := startHostProcess(t, "--lanes", "1", "--max-in-flight-per-lane", "8", "--max-fronts", "2")
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{addr}, Logf: t.Logf})
	if err != nil {
		t.Fatalf("StartFront: got err %v, want nil", err)
	}
	t.Cleanup(func() { _ = f.Stop(context.Background()) })
	alone := runSharedLoad(f, "alone", 6, 300)
	if alone.err != nil || alone.overloaded != 0 {
		t.Fatalf("one front alone, 6 in flight under the lane's 8: got %+v, want no refusal", alone)
	}
	child := exec.Command(os.Args[0], "-test.run", "^$")
	child.Env = append(os.Environ(), "LANES_CHILD=front-load", "LANES_HOST="+addr)
	childPipe, _ := child.StdoutPipe()
	if err := child.Start(); err != nil {
		t.Fatalf("start the other front: got err %v, want nil", err)
	}
	childLines := bufio.NewReader(childPipe)
	if line, _ := childLines.ReadString('\n'); !strings.Contains(line, "loading") {
		_ = child.Process.Kill()
		_ = child.Wait()
		t.Fatalf("the other front: got %q, want it loading", line)
	}
	mine := runSharedLoad(f, "parent", 6, 1500) // while the other front loads the same lane
	childOut, _ := io.ReadAll(childLines)
	if err := child.Wait(); err != nil {
		t.Fatalf("the other front's process: got err %v, want it to finish (%s)", err, childOut)
	}
	if mine.err != nil {
		t.Fatalf("this front beside the other: got %v, want every accepted call ended and its counter right", mine.err)
	}
	var theirs loadResult
	if _, err := fmt.Sscanf(string(childOut[strings.Index(string(childOut), "load "):]), "load ok=%d overloaded=%d", &theirs.ok, &theirs.overloaded); err != nil {
		t.Fatalf("the other front's report: got %q, want \"load ok=N overloaded=N\"", childOut)
	}
	t.Logf("this front: %d ended, %d refused overloaded; the other: %d ended, %d refused overloaded", mine.ok, mine.overloaded, theirs.ok, theirs.overloaded)
	if mine.overloaded+theirs.overloaded == 0 {
		t.Fatalf("12 in flight from two fronts on a lane that admits 8: got no overload refusal, want the host to answer overload")
	}
	hold := exec.Command(os.Args[0], "-test.run", "^$")
	hold.Env = append(os.Environ(), "LANES_CHILD=front-hold", "LANES_HOST="+addr)
	holdOut, _ := hold.StdoutPipe()
	if err := hold.Start(); err != nil {
		t.Fatalf("start a holding front: got err %v, want nil", err)
	}
	defer func() { _ = hold.Process.Kill(); _ = hold.Wait() }()
	if line, _ := bufio.NewReader(holdOut).ReadString('\n'); !strings.Contains(line, "joined") {
		t.Fatalf("a second front once the other stopped: got %q, want it joined", line)
	}
	if out, _ := childFront(t, addr); !strings.Contains(out, "registration refused") || !strings.Contains(out, "serves 2 fronts") {
		t.Fatalf("a third front on a host of --max-fronts 2: got %q, want ErrRefused saying it serves its most", out)
	}
	if after := runSharedLoad(f, "after", 2, 20); after.err != nil {
		t.Fatalf("the first front after a third was refused: got %v, want it served still", after.err)
	}
}

// TestPlacementFollowsLanes: new tenants go to the host with the fewest
// tenants per lane: a host of three lanes takes three times the tenants
// of a host of one; a tenant that starts over stays where it was.
func TestPlacementFollowsLanes(t *testing.T) {
	_, one := startHostProcess(t, "--lanes", "1")
	_, three := startHostProcess(t, "--lanes", "3")
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{one, three}, Logf: t.Logf})
	if err != nil {
		t.Fatalf("StartFront: got err %v, want nil", err)
	}
	t.Cleanup(func() { _ = f.Stop(context.Background()) })
	for i := range 8 {
		setUp(t, f, fmt.Sprintf("tenant-%d", i))
	}
	got := map[string]int{}
	for _, h := range f.Hosts() {
		got[h.Address] = h.Tenants
	}
	if got[one] != 2 || got[three] != 6 {
		t.Fatalf("8 tenants on hosts of 1 and 3 lanes: got %d and %d, want 2 and 6", got[one], got[three])
	}
	host, _ := f.Placement("tenant-0")
	if err := f.Forget(context.Background(), "tenant-0"); err != nil {
		t.Fatalf("Forget: got err %v, want nil", err)
	}
	setUp(t, f, "tenant-0")
	if again, _ := f.Placement("tenant-0"); again != host {
		t.Fatalf("a tenant that starts over: got placed on %s, want %s where it was", again, host)
	}
}

// loadResult is what a closed-loop load on one tenant saw.
type loadResult struct {
	ok, overloaded int
	err            error // a call that did not end once, or a counter that is not its steps
}

// runSharedLoad sets up tenant on f and keeps inFlight steps of 4 increments in
// flight until total were accepted; refusals for overload are retried. It
// checks that every accepted step ended once and the counter holds them.
func runSharedLoad(f *remote.Front, tenant string, inFlight, total int) loadResult {
	ctx := context.Background()
	var res loadResult
	b, err := f.Alloc(ctx, tenant, cuda.BufferSpec{Size: 64, Elem: cuda.I32})
	if err != nil {
		return loadResult{err: fmt.Errorf("Alloc: %w", err)}
	}
	up, _ := cuda.Upload(b.Whole(), make([]byte, 64))
	if _, err := f.Submit(ctx, tenant, lanes.Batch{Entries: []lanes.Entry{lanes.Eager(cache.PhaseDynamicBinding, up)}}); err != nil {
		return loadResult{err: fmt.Errorf("zero: %w", err)}
	}
	spec := kernels.Builtin().MustSpec(kernels.Inc)
	var step lanes.Batch
	for i := range 4 {
		cmd, _ := cuda.Launch(spec, cuda.Linear(16, 16), cuda.BufferArg(b.Whole()), cuda.I32Arg(16))
		step.Entries = append(step.Entries, lanes.Replayed("share", i, cmd))
	}
	enc, err := f.Encode(step)
	if err != nil {
		return loadResult{err: err}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	accepted := 0
	for range inFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if accepted >= total || res.err != nil {
					mu.Unlock()
					return
				}
				accepted++
				mu.Unlock()
				p, err := f.SubmitEncoded(ctx, tenant, enc)
				if err == nil {
					_, err = p.Result()
				}
				mu.Lock()
				switch {
				case err == nil:
					res.ok++
				case errors.Is(err, actors.ErrOverloaded):
					res.overloaded++
					accepted--
				default:
					res.err = fmt.Errorf("step: %w", err)
				}
				mu.Unlock()
				if errors.Is(err, actors.ErrOverloaded) {
					time.Sleep(200 * time.Microsecond)
				}
			}
		}()
	}
	wg.Wait()
	if res.err != nil {
		return res
	}
	data, err := f.Read(ctx, tenant, b.Whole())
	if err != nil {
		return loadResult{err: fmt.Errorf("Read: %w", err)}
	}
	if got := int(int32(binary.LittleEndian.Uint32(data))); got != 4*res.ok {
		res.err = fmt.Errorf("counter %d after %d steps of 4: want %d (each step once)", got, res.ok, 4*res.ok)
	}
	return res
}

// loadChild is the other front's process in TestFrontsShareAHost.
func loadChild() int {
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{os.Getenv("LANES_HOST")}})
	if err != nil {
		fmt.Println("StartFront:", err)
		return 1
	}
	defer f.Stop(context.Background())
	fmt.Println("loading")
	res := runSharedLoad(f, "child", 6, 1500)
	if res.err != nil {
		fmt.Println("load:", res.err)
		return 1
	}
	fmt.Printf("load ok=%d overloaded=%d\n", res.ok, res.overloaded)
	return 0
}

// childFront runs a front in a child test process (one endpoint per
// process) against the host at addr, and returns what it printed.
func childFront(t *testing.T, addr string) (string, error) {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run", "^$")
	child.Env = append(os.Environ(), "LANES_CHILD=front", "LANES_HOST="+addr)
	out, err := child.CombinedOutput()
	return string(out), err
}

// frontChild is the child's front: it joins LANES_HOST and says how it went.
func frontChild() int {
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{os.Getenv("LANES_HOST")}, JoinTimeout: 5 * time.Second})
	if err != nil {
		fmt.Println("StartFront:", err)
		return 1
	}
	fmt.Println("joined")
	_ = f.Stop(context.Background())
	return 0
}

// TestBadLaunchFailsAtOnce: a host that will not start fails StartFront at
// once with why, not after the join timeout.
func TestBadLaunchFailsAtOnce(t *testing.T) {
	for _, l := range []remote.HostProcess{{Name: "missing", Path: "/nonexistent/lanehost"}, {Name: "bad-flag", Path: lanehostBin, Args: []string{"--bogus"}}} {
		start := time.Now()
		f, err := remote.StartFront(context.Background(), remote.FrontConfig{Processes: []remote.HostProcess{l}, Logf: t.Logf})
		if err == nil {
			_ = f.Stop(context.Background())
		}
		if !errors.Is(err, remote.ErrConfig) || time.Since(start) > 5*time.Second {
			t.Errorf("StartFront with %s: got err %v after %v, want remote.ErrConfig at once", l.Name, err, time.Since(start).Round(time.Millisecond))
		}
	}
}

// TestABoundUnderTwoHeartbeatsIsRefused: a front whose LostAfter is under
// two of a host's heartbeats would lose it between beats over and over;
// it refuses the host at registration, saying what to give.
func TestABoundUnderTwoHeartbeatsIsRefused(t *testing.T) {
	_, addr := startHostProcess(t, "--heartbeat", "200ms")
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{addr}, LostAfter: 300 * time.Millisecond, Logf: t.Logf})
	if err == nil {
		_ = f.Stop(context.Background())
	}
	if !errors.Is(err, remote.ErrRefused) || !strings.Contains(err.Error(), "heartbeat every 200ms") || !strings.Contains(err.Error(), "at least 600ms") {
		t.Errorf("StartFront with LostAfter 300ms on a host beating every 200ms: got err %v, want remote.ErrRefused saying the heartbeat and LostAfter to give", err)
	}
}

// TestHandlesDifferAcrossHosts: two hosts' devices are different
// instances, so a buffer of one is never a buffer of the other.
func TestHandlesDifferAcrossHosts(t *testing.T) {
	_, a := startHostProcess(t)
	_, b := startHostProcess(t)
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{a, b}, Logf: t.Logf})
	if err != nil {
		t.Fatalf("StartFront: got err %v, want nil", err)
	}
	defer f.Stop(context.Background())
	x, y := setUp(t, f, "x"), setUp(t, f, "y")
	if hx, _ := f.Placement("x"); hx == func() string { h, _ := f.Placement("y"); return h }() {
		t.Fatalf("placement: got both tenants on %s, want one per host", hx)
	}
	if x.buf.Device == y.buf.Device {
		t.Fatalf("buffers of two hosts: got device instance %d for both, want different instances", x.buf.Device)
	}
}

// TestHostLetsADeadFrontGo: when the connection to its front breaks (here
// the front's process is killed), a host drops that registration, so
// another front joins it at once instead of being refused as busy.
func TestHostLetsADeadFrontGo(t *testing.T) {
	_, addr := startHostProcess(t)
	child := exec.Command(os.Args[0], "-test.run", "^$")
	child.Env = append(os.Environ(), "LANES_CHILD=front-hold", "LANES_HOST="+addr)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatalf("StdoutPipe: got err %v, want nil", err)
	}
	if err := child.Start(); err != nil {
		t.Fatalf("start the child front: got err %v, want nil", err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if !strings.Contains(line, "joined") {
		_ = child.Process.Kill()
		_ = child.Wait()
		t.Fatalf("the child front: got %q, want it joined", line)
	}
	_ = child.Process.Kill()
	_ = child.Wait()
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Hosts: []string{addr}, JoinTimeout: 5 * time.Second, Logf: t.Logf})
	if err != nil {
		t.Fatalf("a front after the host's front was killed: got err %v, want it to join", err)
	}
	_ = f.Stop(context.Background())
}
