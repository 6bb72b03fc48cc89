// The front: a scheduler whose lanes live in lane host processes. It
// places tenants on hosts, sends their batches and device-state calls, and
// ends every call exactly once: by its host's answer, or when the host is
// lost.

package remote

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/shmring"
	"github.com/lanesched/lanes/internal/wirepb"
)

// frontActorName is the name of a front's actor: hosts answer it at the
// front's address and this name.
const frontActorName = "lanefront"

// FrontConfig configures a front.
type FrontConfig struct {
	// Hosts are addresses (host:port) of lane hosts already running; the
	// front joins each and keeps joining it after a loss.
	Hosts []string
	// Processes are lane host processes the front starts itself, one per
	// entry, and restarts when they die or hang.
	Processes []HostProcess
	// Cluster names a cluster whose hosts the front finds itself: it joins
	// each host that becomes a member (which takes new tenants at once),
	// places no new tenants on a host that left the membership, and
	// rejoins a lost host only while it is a member. The cluster's word
	// is checked by the front's own: a member is routed to only while its
	// heartbeats say it serves. May be given alone or with Hosts and
	// Processes.
	Cluster *ClusterConfig
	// PruneAfter is how long a host found in the cluster stays in Hosts
	// after it left the membership, while it serves no one and holds no
	// tenant of the front's (Forget frees a tenant's place): then the
	// front forgets it, so a fleet whose hosts come and go at new
	// addresses does not grow the front. 0: DefaultPruneAfter.
	PruneAfter time.Duration
	// Address is where the front listens for its hosts' answers; empty:
	// DefaultAddress. Any address that is not loopback requires TLS.
	Address string
	// Advertise is the address hosts reach the front at when it is not
	// Address (a NAT, a port mapping, a proxy); empty: Address. Not
	// loopback requires TLS.
	Advertise string
	// TLS secures and authenticates every connection both ways with the
	// certificates of your CA (LoadTLS); nil: with certificates rooted in
	// the token (TokenFile), and every host address must be loopback.
	TLS *tls.Config
	// TokenFile is the token this front and its hosts derive their
	// credentials from when TLS is nil: a file only this user can read
	// (DefaultTokenFile when empty; created when missing). It is never
	// sent. A launched host is given the same file.
	TokenFile string
	// LostAfter is how long a registered host may stay silent (no
	// heartbeat, no answer) before the front treats it as lost; 0:
	// DefaultLostAfter. Detection takes at most LostAfter plus a fifth of it.
	LostAfter time.Duration
	// JoinTimeout bounds how long a host may take to register (a launched
	// one: to start and register) before the front gives up on that try;
	// 0: 30 s. StartFront waits at most this long for every host.
	JoinTimeout time.Duration
	// RestartBackoff is the first wait before a launched host is started
	// again; it doubles to 5 s while restarts keep failing. 0: 100 ms.
	RestartBackoff time.Duration
	// NoDataPlane keeps the front's traffic on the remote even with a
	// host on this machine that offers a same-host data plane (to compare
	// the two, or where shared memory misbehaves).
	NoDataPlane bool
	// Modules are modules of one's own kernels the front's batches launch
	// (kernels.Module: a kernel's spec is what cuda.Launch builds a launch
	// from). The front sends each host their images and kernel
	// declarations when it registers, and the host loads them on its
	// devices before it serves the front, or refuses the front saying why
	// (HostStatus.Refusal; the front does not join it again): a module the
	// device cannot load (on the simulated device, a kernel without a Go
	// reference, which does not cross: serve such modules from a lane
	// host of your own, HostConfig.Modules, hostcmd.Options.Modules), or
	// one that differs from the module of that name the host has loaded.
	// A kernel's extent check (KernelSpec.Check) is the front's own: the
	// front runs it as it builds a launch, and the host's devices check
	// the kernels' parameters against the image (the real device) and
	// their launch limits. At most MaxModules modules of MaxModuleBytes.
	Modules []kernels.Module
	// Logf hears what no call answers (a host lost, restarted, refused);
	// nil: standard error.
	Logf func(format string, args ...any)
}

// HostProcess is a lane host process a front starts: Path with Args, to which
// the front adds --name Name and --exit-with-stdin. The process must print
// ListeningLine and its address as its first line on standard output
// (cmd/lanehost does).
//
// On a machine of 4 CPUs or fewer, a launched host runs with GOMAXPROCS at
// half the CPUs (rounded down, at least 1) unless the front's environment
// or Env sets GOMAXPROCS (to any value: it is passed on as it is): the
// front's process and the host share the cores, and a process each with a
// P per CPU made a lane host serve 0.65-0.73 of one process's steps at 2
// in flight on 2 cores (docs/lane-hosts.md, "Same-host data plane",
// "Measured"). Give the front's process the other half.
type HostProcess struct {
	Name string
	Path string
	Args []string
	Env  []string // added to the front's environment
}

// DefaultLostAfter is how long a host may stay silent by default: ten of
// its default heartbeats.
const DefaultLostAfter = time.Second

// Front routes tenants' work to lane hosts. It is safe for concurrent use.
type Front struct {
	cfg       FrontConfig
	sys       *system
	pid       *actor.PID
	calls     callTable[*pending]
	tokenFile string           // the token's file, for the hosts it launches
	modules   []*wirepb.Module // cfg.Modules as every Welcome carries them

	linksMu        sync.Mutex              // adding links (the cluster's hosts)
	links          atomic.Pointer[[]*link] // every host, fixed, launched or the cluster's: copied on add
	member         *membership             // the cluster it follows; nil: none
	refusedMembers map[string]bool         // members not joined, said once (under linksMu)
	unwatch        func()                  // stops hearing the cluster's topology

	stopped atomic.Bool

	mu      sync.RWMutex
	tenants map[string]*placement
	last    map[string]*link // where a forgotten tenant was: placed there again while it serves

	quit chan struct{}
	wg   sync.WaitGroup
}

// placement is where a tenant's device state lives: one host, under one
// epoch.
type placement struct {
	link  *link
	epoch uint64
	calls atomic.Int64 // submissions in flight: Forget refuses while there are any
}

// StartFront starts a front, joins (or launches) its hosts and returns
// once every host registered, within JoinTimeout. Every error it returns
// classifies (cuda.Classify) and says what it found: a host that refuses
// or is refused (another protocol version; a host full of fronts, or
// leaving) fails the start with ErrRefused, even when the others serve:
// start it again, or leave a host out while it drains; one that does not
// register within JoinTimeout (nothing at its address, something there
// that is no lane host, a launched process that does not say where it
// listens) fails it with ErrNoHost; a configuration refused (a launch
// that cannot start, say) with ErrConfig. Hosts it launched are stopped
// by then.
func StartFront(ctx context.Context, cfg FrontConfig) (*Front, error) {
	f, err := startFront(ctx, cfg)
	if err != nil && cuda.Classify(err).Code == cuda.CodeUnclassified {
		// What no check above named (a provider's own failure, a file
		// system's): the front could not be set up as configured.
		err = fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return f, err
}

func startFront(ctx context.Context, cfg FrontConfig) (*Front, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	modules, err := modulesToWire(cfg.Modules)
	if err != nil {
		return nil, err
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	until := time.Now().Add(cfg.JoinTimeout) // every wait below ends by then
	if err := shmring.CheckSpinEnv(); err != nil && !cfg.NoDataPlane {
		cfg.Logf("%v", err)
	}
	var member *membership
	if cfg.Cluster != nil {
		var err error
		joinCtx, cancel := context.WithDeadline(ctx, until)
		member, err = followCluster(joinCtx, cfg.Cluster)
		cancel()
		switch {
		case errors.Is(err, errProviderLate):
			return nil, fmt.Errorf("%w: %w", ErrNoHost, err)
		case err != nil && cuda.Classify(err).Code == cuda.CodeUnclassified:
			return nil, fmt.Errorf("%w: cluster %s: its provider: %w", ErrNoHost, cfg.Cluster.Name, err)
		case err != nil:
			return nil, err
		}
	}
	sys, err := acquireSystem(ctx, endpointConfig{address: cfg.Address, advertise: cfg.Advertise, tls: cfg.TLS, tokenFile: cfg.TokenFile, logf: cfg.Logf}, frontActorName)
	if err != nil {
		if member != nil {
			unfollow(member)
		}
		return nil, err
	}
	if sys.bound != sys.addr {
		// Whoever maps the advertised address here needs the port.
		cfg.Logf("listening on %s, advertised to hosts as %s", sys.bound, sys.addr)
	}
	tokenFile := cfg.TokenFile
	if tokenFile == "" {
		tokenFile, _ = DefaultTokenFile() // the endpoint found it already
	}
	f := &Front{cfg: cfg, sys: sys, tokenFile: tokenFile, modules: modules, member: member, refusedMembers: map[string]bool{}, tenants: map[string]*placement{}, last: map[string]*link{}, quit: make(chan struct{})}
	var fixed []*link
	for _, a := range cfg.Hosts {
		fixed = append(fixed, newLink(f, a, nil))
	}
	for i := range cfg.Processes {
		fixed = append(fixed, newLink(f, cfg.Processes[i].Name, &cfg.Processes[i]))
	}
	f.links.Store(&fixed)
	f.pid, err = sys.actors.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return &frontActor{f: f} }), frontActorName)
	if err != nil {
		releaseSystem(sys, frontActorName, nil)
		if member != nil {
			unfollow(member)
		}
		return nil, fmt.Errorf("%w: spawn the front actor: %v", ErrConfig, err)
	}
	for _, l := range fixed {
		f.wg.Add(1)
		go l.supervise()
	}
	f.wg.Add(1)
	go f.watchSilence()
	if cfg.Cluster != nil {
		f.unwatch = member.watch(f.clusterHosts)
	}
	if err := f.awaitRegistration(ctx, until); err != nil {
		f.stopBy(until)
		return nil, err
	}
	return f, nil
}

// stopBy stops a front whose start failed, its launched hosts by the
// start's deadline (at once, past it: killed, a process that ignores its
// closed standard input included), so that StartFront keeps JoinTimeout.
func (f *Front) stopBy(until time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), until)
	defer cancel()
	_ = f.Stop(ctx)
}

func (c *FrontConfig) check() error {
	if len(c.Hosts)+len(c.Processes) == 0 && c.Cluster == nil {
		return fmt.Errorf("%w: no hosts: give host addresses, processes to launch or a cluster", ErrConfig)
	}
	if c.Cluster != nil {
		cl := *c.Cluster
		if err := cl.check(false, c.TLS != nil); err != nil {
			return err
		}
		c.Cluster = &cl
	}
	if c.LostAfter == 0 {
		c.LostAfter = DefaultLostAfter
	}
	if c.JoinTimeout == 0 {
		c.JoinTimeout = 30 * time.Second
	}
	if c.RestartBackoff == 0 {
		c.RestartBackoff = 100 * time.Millisecond
	}
	if c.PruneAfter == 0 {
		c.PruneAfter = DefaultPruneAfter
	}
	if c.Logf == nil {
		c.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, "lanes front: "+format+"\n", args...) }
	}
	switch {
	case c.LostAfter < 10*time.Millisecond || c.LostAfter > time.Minute:
		return fmt.Errorf("%w: LostAfter %v: give 10ms to 1m (a few of the hosts' heartbeats)", ErrConfig, c.LostAfter)
	case c.JoinTimeout < 0 || c.RestartBackoff < 0 || c.PruneAfter < 0:
		return fmt.Errorf("%w: negative JoinTimeout, RestartBackoff or PruneAfter", ErrConfig)
	}
	names := map[string]bool{}
	for _, a := range c.Hosts {
		host, _, err := splitAddress(a)
		if err != nil {
			return err
		}
		if c.TLS == nil && !isLoopback(host) {
			return fmt.Errorf("%w: host %s is not loopback: give a mutual TLS configuration (LoadTLS) to reach it", ErrConfig, a)
		}
		if names[a] {
			return fmt.Errorf("%w: host %s listed twice: a front joins a host once", ErrConfig, a)
		}
		names[a] = true
	}
	for _, l := range c.Processes {
		if l.Name == "" || l.Path == "" || names[l.Name] {
			return fmt.Errorf("%w: launch %q: give each launched host a distinct name and a path", ErrConfig, l.Name)
		}
		names[l.Name] = true
	}
	return nil
}

// awaitRegistration waits until every host registered, one refused, or
// until passed (JoinTimeout from the start); with a cluster, until a host
// of it serves and every member known by then answered.
func (f *Front) awaitRegistration(ctx context.Context, until time.Time) error {
	if f.cfg.Cluster != nil {
		if err := f.awaitCluster(ctx, until); err != nil {
			return err
		}
	}
	deadline := time.NewTimer(time.Until(until))
	defer deadline.Stop()
	for _, l := range f.allLinks() {
		if l.fromCluster {
			continue
		}
		// A host slow to answer is asked whether the two admit each other:
		// one that refuses this front's credential (or has none of its own)
		// fails the start now, not at JoinTimeout.
		ask := time.NewTicker(250 * time.Millisecond)
	wait:
		for {
			select {
			case <-l.firstAnswer:
				break wait
			case <-ctx.Done():
				ask.Stop()
				return ctx.Err()
			case <-ask.C:
				l.checkCredential() // its verdict by the next tick: the deadline is kept
				if err := l.credentialRefused(); err != nil {
					ask.Stop()
					return fmt.Errorf("host %s: %w", l.name, err)
				}
			case <-deadline.C:
				ask.Stop()
				return fmt.Errorf("%w: host %s did not register within %v: %s (is it up at that address, named as it prints its address, character for character, and can it reach this front at %s? see Advertise on both sides)", ErrNoHost, l.name, f.cfg.JoinTimeout, l.whyNoHost(), f.sys.addr)
			}
		}
		ask.Stop()
		if st := l.status(); st.Health == HostRefused {
			l.mu.Lock()
			forNow := l.refusedForNow
			l.mu.Unlock()
			return &RefusedError{Host: l.name, Reason: st.Refusal, ForNow: forNow}
		}
		if err := l.launchFailure(); err != nil {
			return fmt.Errorf("host %s would not start: %w", l.name, err)
		}
	}
	return nil
}

// Address is where hosts reach the front: FrontConfig.Advertise if given,
// else where it listens ("" for a Front StartFront did not return).
func (f *Front) Address() string {
	if f == nil || f.sys == nil {
		return ""
	}
	return f.sys.addr
}

// tell sends a host a message from the front's actor: the host takes a
// registration's messages only from the front that registered (the
// sender's address), and the endpoint's guard drops a sender that is not
// the connection's own.
func (f *Front) tell(host *actor.PID, msg any) {
	f.sys.actors.Root.RequestWithCustomSender(host, msg, f.pid)
}

// Wire is what the process's endpoint refused (see WireStats); zero for
// a Front StartFront did not return.
func (f *Front) Wire() WireStats {
	if f == nil || f.sys == nil {
		return WireStats{}
	}
	return f.sys.guard.stats()
}

// ListenAddress is where the front listens: Address, unless it advertises
// another ("" for a Front StartFront did not return).
func (f *Front) ListenAddress() string {
	if f == nil || f.sys == nil {
		return ""
	}
	return f.sys.bound
}

// InFlight is the number of calls in flight on every host: each ends once,
// by its host's answer or by the host's loss.
func (f *Front) InFlight() int { return f.calls.Len() }

// Placement names the host a tenant was placed on, if it was.
func (f *Front) Placement(tenant string) (host string, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	pl, ok := f.tenants[tenant]
	if !ok {
		return "", false
	}
	return pl.link.name, true
}

// Stop stops the front: new calls are refused with ErrStopped; calls in
// flight get until ctx ends to finish, then end indeterminate
// (actors.ErrIndeterminate: the front stopped with them in flight, not a
// host lost); launched hosts are stopped. Unlike a scheduler's drain, a
// front's does not go on after ctx ends: its hosts' answers need it.
func (f *Front) Stop(ctx context.Context) error {
	if f == nil || f.quit == nil {
		return ErrStopped // not a front StartFront returned
	}
	if ctx == nil {
		return errNilContext
	}
	if f.stopped.Swap(true) {
		return nil
	}
	for f.calls.Len() > 0 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	if f.unwatch != nil {
		// Under linksMu: a topology being taken ends first, and none adds
		// a link after (stopped).
		f.linksMu.Lock()
		f.unwatch()
		f.linksMu.Unlock()
		unfollow(f.member)
	}
	close(f.quit)
	for _, l := range f.allLinks() {
		l.stopLink()
	}
	f.wg.Wait() // the supervisors: no host process is started after this
	var procs sync.WaitGroup
	for _, l := range f.allLinks() {
		procs.Go(func() { l.stopProcess(ctx) })
	}
	procs.Wait()
	releaseSystem(f.sys, frontActorName, f.pid)
	if ctx.Err() != nil {
		return fmt.Errorf("remote: stop: %w (calls still in flight ended indeterminate)", ctx.Err())
	}
	return nil
}
