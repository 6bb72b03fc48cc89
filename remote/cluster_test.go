package remote_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/automanaged"
	"github.com/labstack/echo"
	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
	lanescluster "github.com/lanesched/lanes/remote/internal/cluster"
)

// clusterHost starts lanehost as a member of the cluster name, serving
// its membership endpoint on a socket the test held, with every seed; more
// are lanehost's flags.
func clusterHost(t *testing.T, name, cluster string, membership *heldSocket, seeds []string, more ...string) (*exec.Cmd, remote.Listening) {
	t.Helper()
	args := append([]string{"--name", name, "--cluster", cluster, "--membership", membership.addr, "--membership-fd", "3", "--seeds", strings.Join(seeds, ","),
		"--cluster-refresh", "100ms", "--heartbeat", "50ms", "--lanes", "2"}, more...)
	return startHostWith(t, []*os.File{membership.file}, args...)
}

// hostByName is the front's status of the host that calls itself name.
func hostByName(f *remote.Front, name string) (remote.HostStatus, bool) {
	for _, h := range f.Hosts() {
		if h.HostName == name {
			return h, true
		}
	}
	return remote.HostStatus{}, false
}

// awaitHost waits until ok holds for the host that calls itself name.
func awaitHost(t *testing.T, f *remote.Front, name string, within time.Duration, ok func(remote.HostStatus) bool) remote.HostStatus {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		st, found := hostByName(f, name)
		if found && ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("host %s: got %+v (found %v) after %v, want otherwise", name, st, found, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestClusterConfigIsChecked: a cluster configuration that cannot work is
// refused before anything starts, saying what to fix.
func TestClusterConfigIsChecked(t *testing.T) {
	seeds := []string{"127.0.0.1:7001", "127.0.0.1:7002"}
	for _, c := range []struct {
		name string
		cfg  remote.ClusterConfig
		want string
	}{
		{"no name", remote.ClusterConfig{Seeds: seeds}, "give it a name"},
		{"no seeds", remote.ClusterConfig{Name: "c"}, "Seeds"},
		{"a seed with no port", remote.ClusterConfig{Name: "c", Seeds: []string{"127.0.0.1:0"}}, "give the port"},
		{"a seed off loopback", remote.ClusterConfig{Name: "c", Seeds: []string{"10.0.0.1:7001"}}, "not loopback"},
		{"a seed that is no address", remote.ClusterConfig{Name: "c", Seeds: []string{"nowhere"}}, "give host:port"},
		{"refresh too short", remote.ClusterConfig{Name: "c", Seeds: seeds, Refresh: time.Millisecond}, "Refresh"},
		{"a blank name", remote.ClusterConfig{Name: "  ", Seeds: seeds}, "without leading or trailing spaces"},
		{"a front with a membership endpoint", remote.ClusterConfig{Name: "c", Seeds: seeds, Membership: seeds[0]}, "a front is no member"},
		{"a seed twice", remote.ClusterConfig{Name: "c", Seeds: []string{seeds[0], seeds[0]}}, "listed twice"},
		{"seeds and a provider", remote.ClusterConfig{Name: "c", Seeds: seeds, Discovery: automanaged.New()}, "not both"},
	} {
		_, err := remote.StartFront(context.Background(), remote.FrontConfig{Cluster: &c.cfg})
		if !errors.Is(err, remote.ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: StartFront: got err %v, want ErrConfig saying %q", c.name, err, c.want)
		}
	}
	for _, c := range []struct {
		name, membership string
		want             string
	}{
		{"no membership endpoint", "", "give host:port"},
		{"a membership endpoint not in the seeds", "127.0.0.1:7003", "is not in Seeds"},
		{"a membership endpoint off loopback", "10.0.0.1:7001", "is not in Seeds"},
	} {
		dev, err := sim.New(sim.Config{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = remote.Serve(context.Background(), remote.HostConfig{Scheduler: actors.Config{Devices: []cuda.Device{dev}},
			Cluster: &remote.ClusterConfig{Name: "c", Seeds: seeds, Membership: c.membership}})
		_ = dev.Close()
		if !errors.Is(err, remote.ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Serve: got err %v, want ErrConfig saying %q", c.name, err, c.want)
		}
	}
}

// TestAMembershipBlipCostsNothing: a host whose membership endpoint the
// front cannot reach for a while (its work's connection fine) takes no
// new tenants meanwhile, but is not lost: its tenant's steps go on without
// an error; once the endpoint answers again it is listed again (the
// cluster package blocks a member that left for good: the front's view
// starts over to forget it) and takes new tenants.
func TestAMembershipBlipCostsNothing(t *testing.T) {
	a, b := holdSocket(t), holdSocket(t)
	clusterHost(t, "A", "blip", a, addrs(a, b))
	clusterHost(t, "B", "blip", b, addrs(a, b))
	toA := startProxy(t, a.addr)
	ctx := context.Background()
	f := clusterFront(t, "blip", []string{toA.addr(), b.addr}, 0)
	onA := twoTenantsOneOnA(t, f)
	toA.cut(true, true)
	steps := 0
	deadline := time.Now().Add(6 * time.Second)
	for st, _ := hostByName(f, "A"); st.Member; st, _ = hostByName(f, "A") {
		if time.Now().After(deadline) {
			t.Fatalf("A, its membership endpoint cut: still a member after 6 s")
		}
		if _, err := f.Submit(ctx, onA.tenant, onA.step(t, 1)); err != nil {
			t.Fatalf("a step on A before the blip was seen: got err %v, want nil", err)
		}
		steps++
	}
	c := setUp(t, f, "during")
	if st, _ := hostByName(f, "A"); at(f, c.tenant) == st.Name {
		t.Errorf("a tenant set up while A is out of the membership: placed on A, want B")
	}
	for range 20 {
		if _, err := f.Submit(ctx, onA.tenant, onA.step(t, 1)); err != nil {
			t.Fatalf("a step on A while it is out of the membership: got err %v, want nil (not lost)", err)
		}
		steps++
	}
	toA.heal()
	st := awaitHost(t, f, "A", 10*time.Second, func(st remote.HostStatus) bool { return st.Member })
	if st.Health != remote.HostServing || st.Losses != 0 {
		t.Errorf("A after the blip: got %v with %d losses, want serving, never lost", st.Health, st.Losses)
	}
	if got := onA.value(t, f); got != int32(steps) {
		t.Errorf("A's tenant's counter: got %d, want %d (each step once)", got, steps)
	}
	c = setUp(t, f, "after")
	if at(f, c.tenant) != st.Name {
		t.Errorf("a tenant set up after A is listed again: placed on %s, want A (the most headroom)", at(f, c.tenant))
	}
}

// at is where the tenant is placed.
func at(f *remote.Front, tenant string) string {
	h, _ := f.Placement(tenant)
	return h
}

// TestAPoisonedMemberIsNotJoinedAgain: a member whose device a kernel
// poisoned is lost once, refuses to register again while it lives (no
// tenant goes to it before it leaves the membership), and once it left
// the membership and holds no tenant the front forgets it (PruneAfter).
func TestAPoisonedMemberIsNotJoinedAgain(t *testing.T) {
	a, b := holdSocket(t), holdSocket(t)
	clusterHost(t, "A", "poison", a, addrs(a, b), "--fault-kernels")
	clusterHost(t, "B", "poison", b, addrs(a, b))
	ctx := context.Background()
	f := clusterFront(t, "poison", addrs(a, b), time.Second)
	victim := twoTenantsOneOnA(t, f)
	cmd, err := cuda.Launch(kernels.Builtin().With(kernels.FaultInjection()).MustSpec(kernels.Poke), cuda.Linear(1, 1), cuda.BufferArg(victim.buf.Whole()), cuda.U32Arg(1<<30), cuda.I32Arg(7))
	if err != nil {
		t.Fatalf("poke launch: got err %v, want nil", err)
	}
	_, _ = f.Submit(ctx, victim.tenant, lanes.Batch{Entries: []lanes.Entry{lanes.Eager(cache.PhaseCompute, cmd)}})
	st := awaitHost(t, f, "A", 10*time.Second, func(st remote.HostStatus) bool { return !st.Member })
	if st.Losses != 1 || st.Health == remote.HostServing {
		t.Errorf("A, poisoned, out of the membership: got %v after %d losses (%s), want lost once, never registered again", st.Health, st.Losses, st.LostHow)
	}
	if err := f.Forget(ctx, victim.tenant); err != nil {
		t.Fatalf("Forget: got err %v, want nil", err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, found := hostByName(f, "A"); !found {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("A, gone from the cluster and holding no tenant: still in Hosts after PruneAfter (1 s) and more: %+v", f.Hosts())
		}
	}
	if c := setUp(t, f, victim.tenant); c.value(t, f) != 0 {
		t.Errorf("the tenant set up again: want a zeroed counter on B")
	}
}

// TestAMemberOffLoopbackIsNotJoinedWithoutTLS: a membership endpoint that
// names a host off this machine is not followed by a front without TLS
// (which would otherwise dial it in the clear).
func TestAMemberOffLoopbackIsNotJoinedWithoutTLS(t *testing.T) {
	a := holdSocket(t)
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"id":"fake","address":"192.0.2.2","port":7009,"auto_manage_port":1,"kinds":["lanes.host"],"cluster_name":"offsite"}`))
	}))
	defer fake.Close()
	seeds := []string{a.addr, strings.TrimPrefix(fake.URL, "http://")}
	clusterHost(t, "A", "offsite", a, seeds)
	var logs syncWriter
	logs.b = &strings.Builder{}
	ctx := context.Background()
	f, err := remote.StartFront(ctx, remote.FrontConfig{Cluster: &remote.ClusterConfig{Name: "offsite", Seeds: seeds, Refresh: 100 * time.Millisecond},
		Logf: func(format string, a ...any) { fmt.Fprintf(&logs, format+"\n", a...) }})
	if err != nil {
		t.Fatalf("StartFront: got err %v, want nil", err)
	}
	defer f.Stop(ctx)
	time.Sleep(300 * time.Millisecond)
	for _, h := range f.Hosts() {
		if strings.HasPrefix(h.Name, "192.0.2.2") {
			t.Errorf("a member at 192.0.2.2:7009 without TLS: got it in Hosts (%v), want it not joined", h.Health)
		}
	}
	if got := logs.b.String(); !strings.Contains(got, "192.0.2.2:7009: not joined") || !strings.Contains(got, "FrontConfig.TLS") {
		t.Errorf("the front's log: got %q, want it to say the member was not joined and why", got)
	}
}

// TestTwoMembersAtOneAddressAreOneHost: a host's membership endpoint
// listed under two names, or a false answer naming a host's address, is
// one host to the front: joined once, never lost for it.
func TestTwoMembersAtOneAddressAreOneHost(t *testing.T) {
	a := holdSocket(t)
	_, said := clusterHost(t, "A", "alias", a, addrs(a))
	host, port, _ := net.SplitHostPort(said.Address)
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"id":"not-A","address":%q,"port":%s,"auto_manage_port":1,"kinds":["lanes.host"],"cluster_name":"alias"}`, host, port)
	}))
	defer fake.Close()
	_, aPort, _ := net.SplitHostPort(a.addr)
	seeds := []string{a.addr, "localhost:" + aPort, strings.TrimPrefix(fake.URL, "http://")}
	ctx := context.Background()
	began := time.Now()
	f, err := remote.StartFront(ctx, remote.FrontConfig{Cluster: &remote.ClusterConfig{Name: "alias", Seeds: seeds, Refresh: 100 * time.Millisecond},
		LostAfter: within(500 * time.Millisecond), JoinTimeout: 10 * time.Second, Logf: t.Logf})
	if err != nil {
		t.Fatalf("StartFront: got err %v, want nil", err)
	}
	defer f.Stop(ctx)
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("StartFront took %v, want it to return once the host serves", took)
	}
	c := setUp(t, f, "t")
	for range 40 {
		if _, err := f.Submit(ctx, "t", c.step(t, 1)); err != nil {
			t.Fatalf("a step: got err %v, want nil", err)
		}
		time.Sleep(25 * time.Millisecond)
	}
	hosts := f.Hosts()
	if len(hosts) != 1 || hosts[0].Health != remote.HostServing || hosts[0].Losses != 0 {
		t.Errorf("Hosts: got %+v, want one host, serving, never lost", hosts)
	}
}

// clusterFront starts a front following the cluster name over seeds
// (refreshed every 100 ms, hosts lost after 500 ms), stopped at the
// test's end.
func clusterFront(t *testing.T, name string, seeds []string, pruneAfter time.Duration) *remote.Front {
	t.Helper()
	// These tests are about membership, not liveness: a late heartbeat on
	// a loaded machine (a host silent for 562 ms under the race detector)
	// must not lose a host mid-test, so the bound is within's.
	f, err := remote.StartFront(context.Background(), remote.FrontConfig{Cluster: &remote.ClusterConfig{Name: name, Seeds: seeds, Refresh: 100 * time.Millisecond},
		LostAfter: within(500 * time.Millisecond), PruneAfter: pruneAfter, Logf: t.Logf})
	if err != nil {
		t.Fatalf("StartFront: got err %v, want nil", err)
	}
	t.Cleanup(func() { _ = f.Stop(context.Background()) })
	return f
}

// twoTenantsOneOnA sets up two tenants (one a host, by headroom)
// and returns the one on the host that calls itself A.
func twoTenantsOneOnA(t *testing.T, f *remote.Front) counter {
	t.Helper()
	var onA counter
	for i := range 2 {
		c := setUp(t, f, fmt.Sprintf("t%d", i))
		if st, _ := hostByName(f, "A"); at(f, c.tenant) == st.Name {
			onA = c
		}
	}
	if onA.tenant == "" {
		t.Fatalf("no tenant of two placed on A: %+v", f.Hosts())
	}
	return onA
}

// stuckProvider is a cluster provider whose service never answers (etcd
// down, say): its starts wait until it is shut down.
type stuckProvider struct{ done chan struct{} }

func (p *stuckProvider) StartMember(*cluster.Cluster) error { <-p.done; return nil }
func (p *stuckProvider) StartClient(*cluster.Cluster) error { <-p.done; return nil }
func (p *stuckProvider) Shutdown(bool) error {
	select {
	case <-p.done:
	default:
		close(p.done)
	}
	return nil
}

// TestAProviderThatNeverAnswersIsBounded: a front whose cluster provider
// waits for its service forever fails StartFront with ErrNoHost within
// JoinTimeout, saying what to check, and a front with another cluster
// starts in the same process after it.
func TestAProviderThatNeverAnswersIsBounded(t *testing.T) {
	p := &stuckProvider{done: make(chan struct{})}
	defer p.Shutdown(false)
	began := time.Now()
	_, err := remote.StartFront(context.Background(), remote.FrontConfig{Cluster: &remote.ClusterConfig{Name: "stuck", Discovery: p}, JoinTimeout: 300 * time.Millisecond})
	if !errors.Is(err, remote.ErrNoHost) || !strings.Contains(err.Error(), "provider did not start") {
		t.Errorf("StartFront with a provider that never answers: got err %v, want ErrNoHost saying its provider did not start", err)
	}
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("StartFront took %v, want about JoinTimeout (300ms)", took)
	}
	a := holdSocket(t)
	clusterHost(t, "A", "after-stuck", a, addrs(a))
	f := clusterFront(t, "after-stuck", addrs(a), 0)
	setUp(t, f, "t")
}

// children are the test binary's child processes by LANES_CHILD (TestMain
// runs them).
var children = map[string]func() int{"front-fleet": fleetChild, "serve-stuck": serveStuckChild, "serve-provider": serveProviderChild}

// serveStuckChild serves a cluster host whose provider never answers,
// with a deadline: Serve must give up then, and the process's endpoint
// with it.
func serveStuckChild() int {
	dev, err := sim.New(sim.Config{})
	if err != nil {
		return 1
	}
	p := &stuckProvider{done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	cfg := remote.HostConfig{Scheduler: actors.Config{Devices: []cuda.Device{dev}}, Cluster: &remote.ClusterConfig{Name: "stuck", Discovery: p}}
	began := time.Now()
	_, err = remote.Serve(ctx, cfg)
	fmt.Printf("serve: %v after %v\n", err, time.Since(began).Round(100*time.Millisecond))
	dev2, _ := sim.New(sim.Config{})
	cfg.Scheduler.Devices = []cuda.Device{dev2}
	_, err = remote.Serve(context.Background(), cfg)
	fmt.Printf("again: %v\n", err)
	return 0
}

// TestServeWithAProviderThatNeverAnswersIsBounded: Serve gives up at its
// context's end when its cluster provider never answers, and refuses a
// second host in that process (its endpoint may still start).
func TestServeWithAProviderThatNeverAnswersIsBounded(t *testing.T) {
	child := exec.Command(os.Args[0], "-test.run", "^$")
	child.Env = append(os.Environ(), "LANES_CHILD=serve-stuck")
	out, err := child.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "serve: remote: cluster provider late") || !strings.Contains(string(out), "context deadline exceeded") ||
		!strings.Contains(string(out), "again: remote: bad configuration: a cluster host's start was given up") {
		t.Fatalf("Serve with a provider that never answers: got %q (%v), want it given up at the deadline, then a second Serve refused", out, err)
	}
	t.Log(strings.TrimSpace(string(out)))
}

// serveProviderChild serves a cluster host with a provider of the caller's
// own (protoactor-go's automanaged, built by hand as one would build
// etcd's, serving its membership endpoint on the socket the test held,
// descriptor 3) until killed.
func serveProviderChild() int {
	dev, err := sim.New(sim.Config{})
	if err != nil {
		return 1
	}
	f := os.NewFile(3, "membership")
	ln, err := net.FileListener(f)
	if err != nil {
		fmt.Println("membership socket:", err)
		return 1
	}
	var node atomic.Pointer[automanaged.NodeModel]
	e := echo.New()
	e.HideBanner, e.HidePort, e.Listener = true, true, ln
	e.GET("/_health", func(c echo.Context) error {
		if n := node.Load(); n != nil {
			return c.JSON(http.StatusOK, n)
		}
		return c.NoContent(http.StatusServiceUnavailable)
	})
	port := ln.Addr().(*net.TCPAddr).Port
	p := automanaged.NewWithTesting(100*time.Millisecond, port, e, ln.Addr().String())
	h, err := remote.Serve(context.Background(), remote.HostConfig{Name: "P", Scheduler: actors.Config{Devices: []cuda.Device{dev}},
		Cluster: &remote.ClusterConfig{Name: "own", Discovery: p}})
	if err != nil {
		fmt.Println("Serve:", err)
		return 1
	}
	host, wport, _ := net.SplitHostPort(h.Address())
	n, _ := strconv.Atoi(wport)
	node.Store(automanaged.NewNode("own", "P", host, n, port, []string{lanescluster.HostKind}))
	fmt.Println(h.Listening())
	select {}
}

// TestAHostWithAProviderOfItsOwn: a host given any protoactor-go provider
// (ClusterConfig.Discovery) is a member that a front finds and is served by.
func TestAHostWithAProviderOfItsOwn(t *testing.T) {
	m := holdSocket(t)
	child := exec.Command(os.Args[0], "-test.run", "^$")
	child.Env = append(os.Environ(), "LANES_CHILD=serve-provider")
	child.ExtraFiles = []*os.File{m.file}
	out, _ := child.StdoutPipe()
	err := child.Start()
	_ = m.file.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if _, err := remote.ParseListening(line); err != nil {
		t.Fatalf("the host's process: got %v, want it serving", err)
	}
	f := clusterFront(t, "own", addrs(m), 0)
	c := setUp(t, f, "t")
	if _, err := f.Submit(context.Background(), "t", c.step(t, 3)); err != nil || c.value(t, f) != 3 {
		t.Fatalf("a step on the host with a provider of its own: got err %v, want it served", err)
	}
	if st, _ := hostByName(f, "P"); !st.FromCluster || !st.Member {
		t.Errorf("the host: got %+v, want found in the cluster, a member", st)
	}
}
