// The front: a scheduler whose lanes live in lane host processes. It
// places tenants on hosts, sends their batches and device-state calls, and
// ends every call exactly once: by its host's answer, or when the host is
// lost.

package front

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
	"github.com/lanesched/lanes/internal/codes"
	"github.com/lanesched/lanes/internal/notstarted"
	"github.com/lanesched/lanes/internal/shmring"
	"github.com/lanesched/lanes/internal/wirepb"

	system "github.com/lanesched/lanes/remote/internal/system"

	cluster "github.com/lanesched/lanes/remote/internal/cluster"

	wire "github.com/lanesched/lanes/remote/internal/wire"
)

// Config is remote.FrontConfig as this package takes it: see there for
// what each field means.
type Config struct {
	Hosts          []string
	Processes      []Process
	Cluster        *cluster.Config
	PruneAfter     time.Duration
	Address        string
	Advertise      string
	TLS            *tls.Config
	TokenFile      string
	LostAfter      time.Duration
	JoinTimeout    time.Duration
	RestartBackoff time.Duration
	NoDataPlane    bool
	Modules        []kernels.Module
	Logf           func(format string, args ...any)
}

// Process is remote.HostProcess as this package takes it: see there for
// what each field means.
type Process struct {
	Name string
	Path string
	Args []string
	Env  []string
}

// DefaultLostAfter is how long a host may stay silent by default: ten of
// its default heartbeats.
const DefaultLostAfter = time.Second

// Front routes tenants' work to lane hosts. It is safe for concurrent use.
type Front struct {
	cfg       Config
	Sys       *system.System
	pid       *actor.PID
	calls     CallTable[*Pending]
	tokenFile string           // the token's file, for the hosts it launches
	modules   []*wirepb.Module // cfg.Modules as every Welcome carries them

	linksMu        sync.Mutex              // adding links (the cluster's hosts)
	links          atomic.Pointer[[]*Link] // every host, fixed, launched or the cluster's: copied on add
	member         *cluster.Membership     // the cluster it follows; nil: none
	refusedMembers map[string]bool         // members not joined, said once (under linksMu)
	unwatch        func()                  // stops hearing the cluster's topology

	stopped atomic.Bool

	mu      sync.RWMutex
	tenants map[string]*placement
	last    map[string]*Link // where a forgotten tenant was: placed there again while it serves

	quit chan struct{}
	wg   sync.WaitGroup
}

// placement is where a tenant's device state lives: one host, under one
// epoch.
type placement struct {
	link  *Link
	epoch uint64
	calls atomic.Int64 // submissions in flight: Forget refuses while there are any
}

// Start starts a front, joins (or launches) its hosts and returns
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
func Start(ctx context.Context, cfg Config) (*Front, error) {
	f, err := startFront(ctx, cfg)
	if err != nil && cuda.Classify(err).Code == codes.Unclassified {
		// What no check above named (a provider's own failure, a file
		// system's): the front could not be set up as configured.
		err = fmt.Errorf("%w: %w", wire.ErrConfig, err)
	}
	return f, err
}

func startFront(ctx context.Context, cfg Config) (*Front, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	modules, err := wire.ModulesToWire(cfg.Modules)
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
	var member *cluster.Membership
	if cfg.Cluster != nil {
		var err error
		joinCtx, cancel := context.WithDeadline(ctx, until)
		member, err = cluster.FollowCluster(joinCtx, cfg.Cluster)
		cancel()
		switch {
		case errors.Is(err, cluster.ErrProviderLate):
			return nil, fmt.Errorf("%w: %w", wire.ErrNoHost, err)
		case err != nil && cuda.Classify(err).Code == codes.Unclassified:
			return nil, fmt.Errorf("%w: cluster %s: its provider: %w", wire.ErrNoHost, cfg.Cluster.Name, err)
		case err != nil:
			return nil, err
		}
	}
	sys, err := system.AcquireSystem(ctx, system.EndpointConfig{Address: cfg.Address, Advertise: cfg.Advertise, Tls: cfg.TLS, TokenFile: cfg.TokenFile, Logf: cfg.Logf}, wire.FrontActorName)
	if err != nil {
		if member != nil {
			cluster.Unfollow(member)
		}
		return nil, err
	}
	if sys.Bound != sys.Addr {
		// Whoever maps the advertised address here needs the port.
		cfg.Logf("listening on %s, advertised to hosts as %s", sys.Bound, sys.Addr)
	}
	tokenFile := cfg.TokenFile
	if tokenFile == "" {
		tokenFile, _ = system.DefaultTokenFile() // the endpoint found it already
	}
	f := &Front{cfg: cfg, Sys: sys, tokenFile: tokenFile, modules: modules, member: member, refusedMembers: map[string]bool{}, tenants: map[string]*placement{}, last: map[string]*Link{}, quit: make(chan struct{})}
	var fixed []*Link
	for _, a := range cfg.Hosts {
		fixed = append(fixed, newLink(f, a, nil))
	}
	for i := range cfg.Processes {
		fixed = append(fixed, newLink(f, cfg.Processes[i].Name, &cfg.Processes[i]))
	}
	f.links.Store(&fixed)
	f.pid, err = sys.Actors.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return &FrontActor{f: f} }), wire.FrontActorName)
	if err != nil {
		system.ReleaseSystem(sys, wire.FrontActorName, nil)
		if member != nil {
			cluster.Unfollow(member)
		}
		return nil, fmt.Errorf("%w: spawn the front actor: %v", wire.ErrConfig, err)
	}
	for _, l := range fixed {
		f.wg.Add(1)
		go l.supervise()
	}
	f.wg.Add(1)
	go f.watchSilence()
	if cfg.Cluster != nil {
		f.unwatch = member.Watch(f.clusterHosts)
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

func (c *Config) check() error {
	if len(c.Hosts)+len(c.Processes) == 0 && c.Cluster == nil {
		return fmt.Errorf("%w: no hosts: give host addresses, processes to launch or a cluster", wire.ErrConfig)
	}
	if c.Cluster != nil {
		cl := *c.Cluster
		if err := cl.Check(false, c.TLS != nil); err != nil {
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
		return fmt.Errorf("%w: LostAfter %v: give 10ms to 1m (a few of the hosts' heartbeats)", wire.ErrConfig, c.LostAfter)
	case c.JoinTimeout < 0 || c.RestartBackoff < 0 || c.PruneAfter < 0:
		return fmt.Errorf("%w: negative JoinTimeout, RestartBackoff or PruneAfter", wire.ErrConfig)
	}
	names := map[string]bool{}
	for _, a := range c.Hosts {
		host, _, err := wire.SplitAddress(a)
		if err != nil {
			return err
		}
		if c.TLS == nil && !wire.IsLoopback(host) {
			return fmt.Errorf("%w: host %s is not loopback: give a mutual TLS configuration (LoadTLS) to reach it", wire.ErrConfig, a)
		}
		if names[a] {
			return fmt.Errorf("%w: host %s listed twice: a front joins a host once", wire.ErrConfig, a)
		}
		names[a] = true
	}
	for _, l := range c.Processes {
		if l.Name == "" || l.Path == "" || names[l.Name] {
			return fmt.Errorf("%w: launch %q: give each launched host a distinct name and a path", wire.ErrConfig, l.Name)
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
	for _, l := range f.AllLinks() {
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
					return fmt.Errorf("host %s: %w", l.Name, err)
				}
			case <-deadline.C:
				ask.Stop()
				return fmt.Errorf("%w: host %s did not register within %v: %s (is it up at that address, named as it prints its address, character for character, and can it reach this front at %s? see Advertise on both sides)", wire.ErrNoHost, l.Name, f.cfg.JoinTimeout, l.whyNoHost(), f.Sys.Addr)
			}
		}
		ask.Stop()
		if st := l.Status(); st.Health == HostRefused {
			l.mu.Lock()
			forNow := l.refusedForNow
			l.mu.Unlock()
			return &wire.RefusedError{Host: l.Name, Reason: st.Refusal, ForNow: forNow}
		}
		if err := l.launchFailure(); err != nil {
			return fmt.Errorf("host %s would not start: %w", l.Name, err)
		}
	}
	return nil
}

// Address is where hosts reach the front: FrontConfig.Advertise if given,
// else where it listens ("" for a Front StartFront did not return).
func (f *Front) Address() string {
	if f == nil || f.Sys == nil {
		return ""
	}
	return f.Sys.Addr
}

// tell sends a host a message from the front's actor: the host takes a
// registration's messages only from the front that registered (the
// sender's address), and the endpoint's guard drops a sender that is not
// the connection's own.
func (f *Front) tell(host *actor.PID, msg any) {
	f.Sys.Actors.Root.RequestWithCustomSender(host, msg, f.pid)
}

// Wire is what the process's endpoint refused (see WireStats); zero for
// a Front StartFront did not return.
func (f *Front) Wire() system.WireStats {
	if f == nil || f.Sys == nil {
		return system.WireStats{}
	}
	return f.Sys.Guard.Stats()
}

// ListenAddress is where the front listens: Address, unless it advertises
// another ("" for a Front StartFront did not return).
func (f *Front) ListenAddress() string {
	if f == nil || f.Sys == nil {
		return ""
	}
	return f.Sys.Bound
}

// InFlight is the number of calls in flight on every host: each ends once,
// by its host's answer or by the host's loss.
func (f *Front) InFlight() int {
	if f == nil {
		return 0
	}
	return f.calls.Len()
}

// Placement names the host a tenant was placed on, if it was.
func (f *Front) Placement(tenant string) (host string, ok bool) {
	if f == nil {
		return "", false
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	pl, ok := f.tenants[tenant]
	if !ok {
		return "", false
	}
	return pl.link.Name, true
}

// Stop stops the front: new calls are refused with ErrStopped; calls in
// flight get until ctx ends to finish, then end indeterminate
// (actors.ErrIndeterminate: the front stopped with them in flight, not a
// host lost); launched hosts are stopped. Unlike a scheduler's drain, a
// front's does not go on after ctx ends: its hosts' answers need it.
func (f *Front) Stop(ctx context.Context) error {
	if f == nil || f.quit == nil {
		return errNotStarted
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
		cluster.Unfollow(f.member)
	}
	close(f.quit)
	for _, l := range f.AllLinks() {
		l.stopLink()
	}
	f.wg.Wait() // the supervisors: no host process is started after this
	var procs sync.WaitGroup
	for _, l := range f.AllLinks() {
		procs.Go(func() { l.stopProcess(ctx) })
	}
	procs.Wait()
	system.ReleaseSystem(f.Sys, wire.FrontActorName, f.pid)
	if ctx.Err() != nil {
		return fmt.Errorf("remote: stop: %w (calls still in flight ended indeterminate)", ctx.Err())
	}
	return nil
}

// errNotStarted answers the calls of a Front that Start did not return
// (nil or zero): errors.Is ErrStopped, saying what to use.
var errNotStarted error = &notstarted.Error{Msg: "remote: this Front was not started: use the *Front that remote.StartFront returns", Stopped: wire.ErrStopped}
