// Membership: lane hosts and fronts of one named cluster, through
// protoactor-go's cluster package. The cluster only says who is there;
// the messages go by plain remote as before, and the cluster's word is
// checked by the front's own heartbeats, epochs and in-flight table.

package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	actorcluster "github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/automanaged"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	wire "github.com/lanesched/lanes/remote/internal/wire"

	premote "github.com/asynkron/protoactor-go/remote"
	"github.com/labstack/echo"
)

// HostKind is the cluster kind a lane host registers: fronts route to
// the members that have it.
const HostKind = "lanes.host"

// DefaultRefresh is how often the automanaged provider checks the
// cluster's membership endpoints by default.
const DefaultRefresh = 500 * time.Millisecond

// Config is remote.ClusterConfig as this package takes it: see there for
// what each field means.
type Config struct {
	Name               string
	Discovery          actorcluster.ClusterProvider
	Seeds              []string
	Membership         string
	MembershipListener net.Listener
	Refresh            time.Duration
}

// Check validates the configuration for a host (member) or a front.
func (c *Config) Check(member bool, tlsOn bool) error {
	if strings.TrimSpace(c.Name) != c.Name || c.Name == "" {
		return fmt.Errorf("%w: cluster name %q: give it a name without leading or trailing spaces (every host and front of a cluster the same one)", wire.ErrConfig, c.Name)
	}
	if !member && c.Membership != "" {
		return fmt.Errorf("%w: cluster %s: Membership %s on a front: a front is no member (leave it empty; only hosts answer membership checks)", wire.ErrConfig, c.Name, c.Membership)
	}
	if c.Refresh == 0 {
		c.Refresh = DefaultRefresh
	}
	if c.Refresh < 10*time.Millisecond || c.Refresh > time.Minute {
		return fmt.Errorf("%w: cluster %s: Refresh %v: give 10ms to 1m", wire.ErrConfig, c.Name, c.Refresh)
	}
	if c.Discovery != nil {
		if len(c.Seeds) > 0 || c.Membership != "" {
			return fmt.Errorf("%w: cluster %s: Seeds and Membership are the automanaged provider's: give them or a Provider, not both", wire.ErrConfig, c.Name)
		}
		return nil
	}
	if len(c.Seeds) == 0 {
		return fmt.Errorf("%w: cluster %s: give the automanaged provider its Seeds (every host's membership endpoint, host:port) or another Provider", wire.ErrConfig, c.Name)
	}
	for i, s := range c.Seeds {
		if slices.Contains(c.Seeds[:i], s) {
			return fmt.Errorf("%w: cluster %s: seed %s listed twice", wire.ErrConfig, c.Name, s)
		}
		host, port, err := wire.SplitAddress(s)
		if err != nil {
			return fmt.Errorf("%w: cluster %s: seed: %s", wire.ErrConfig, c.Name, strings.TrimPrefix(err.Error(), wire.ErrConfig.Error()+": "))
		}
		if port == 0 {
			return fmt.Errorf("%w: cluster %s: seed %s: give the port its host's membership endpoint listens on", wire.ErrConfig, c.Name, s)
		}
		if !tlsOn && !wire.IsLoopback(host) {
			return fmt.Errorf("%w: cluster %s: seed %s is not loopback: give a mutual TLS configuration (LoadTLS) to reach hosts off this machine", wire.ErrConfig, c.Name, s)
		}
	}
	if !member {
		if c.MembershipListener != nil {
			return fmt.Errorf("%w: cluster %s: a MembershipListener on a front: a front is no member (leave it nil)", wire.ErrConfig, c.Name)
		}
		return nil
	}
	if ln := c.MembershipListener; ln != nil {
		if _, ok := ln.Addr().(*net.TCPAddr); !ok {
			return fmt.Errorf("%w: cluster %s: the membership listener is on %s %s: give a TCP listener", wire.ErrConfig, c.Name, ln.Addr().Network(), ln.Addr())
		}
		at := ln.Addr().String()
		switch {
		case c.Membership == "":
			c.Membership = at
		case c.Membership != at:
			return fmt.Errorf("%w: cluster %s: membership endpoint %s, but the membership listener is on %s: leave Membership empty (it is the listener's), or name the listener's address", wire.ErrConfig, c.Name, c.Membership, at)
		}
		// A socket that was never listened on, or one closed already, is
		// accepted by every check above and answers no one: try it.
		conn, err := net.DialTimeout("tcp", at, 2*time.Second)
		if err != nil {
			return fmt.Errorf("%w: cluster %s: the membership listener on %s takes no connection (%v): hand over a listening TCP socket, open", wire.ErrConfig, c.Name, at, err)
		}
		_ = conn.Close()
		if lhost, _, err := net.SplitHostPort(at); err != nil || (!tlsOn && !wire.IsLoopback(lhost)) {
			return fmt.Errorf("%w: cluster %s: the membership listener is on %s, not loopback: give the host a mutual TLS configuration (LoadTLS), or listen on 127.0.0.1", wire.ErrConfig, c.Name, at)
		}
	}
	host, port, err := wire.SplitAddress(c.Membership)
	if err != nil {
		return fmt.Errorf("%w: cluster %s: membership endpoint: %s", wire.ErrConfig, c.Name, strings.TrimPrefix(err.Error(), wire.ErrConfig.Error()+": "))
	}
	if port == 0 {
		return fmt.Errorf("%w: cluster %s: membership endpoint %s: give the port it listens on (others check it there)", wire.ErrConfig, c.Name, c.Membership)
	}
	if !slices.Contains(c.Seeds, c.Membership) {
		return fmt.Errorf("%w: cluster %s: membership endpoint %s is not in Seeds %v: list it there, written the same way, so fronts and other hosts check it", wire.ErrConfig, c.Name, c.Membership, c.Seeds)
	}
	if !tlsOn && !wire.IsLoopback(host) {
		return fmt.Errorf("%w: cluster %s: membership endpoint %s is not loopback: give the host a mutual TLS configuration (LoadTLS)", wire.ErrConfig, c.Name, c.Membership)
	}
	return nil
}

// Same reports whether two processes' worth of configuration name the
// same cluster the same way (one endpoint per process joins one cluster).
func (c *Config) Same(o *Config) bool {
	if c == nil || o == nil {
		return c == o
	}
	return c.Name == o.Name && c.Discovery == o.Discovery && slices.Equal(c.Seeds, o.Seeds) && c.Refresh == o.Refresh
}

// Membership is a view of a cluster: the latest members, and who wants to
// hear of changes. A host's is its endpoint's (a member); fronts follow
// their cluster through one of their own (followCluster).
type Membership struct {
	Cfg    *Config
	member bool // a host joined as a member; else a client

	mu       sync.Mutex
	c        *actorcluster.Cluster // the current one: a follower starts a new one to forget whom the old one blocked
	provider actorcluster.ClusterProvider
	gen      int // of c: events of an older one are dropped
	renewing bool
	hosts    []string // the members of HostKind, by address
	watchers map[int]func(hosts []string)
	next     int
	left     bool
}

// StartCluster starts the process's remote as a cluster member (a host)
// or client (a front) on the actor system, with remoteCfg.
func StartCluster(ctx context.Context, as *actor.ActorSystem, remoteCfg *premote.Config, cfg *Config, member bool) (*Membership, *premote.Remote, error) {
	m := &Membership{Cfg: cfg, member: member, watchers: map[int]func([]string){}}
	c, p, err := m.join(ctx, as, remoteCfg, 0)
	if err != nil {
		return nil, nil, err
	}
	m.mu.Lock()
	m.c, m.provider = c, p
	m.mu.Unlock()
	return m, c.Remote, nil
}

// join starts a cluster of generation gen on the actor system.
func (m *Membership) join(ctx context.Context, as *actor.ActorSystem, remoteCfg *premote.Config, gen int) (c *actorcluster.Cluster, provider actorcluster.ClusterProvider, err error) {
	cfg := m.Cfg
	provider = cfg.Discovery
	var server *echo.Echo
	defer func() {
		if err != nil && server != nil {
			_ = server.Close()          // the membership endpoint of a host that did not join
			_ = server.Listener.Close() // which Close leaves open when it never served
		}
	}()
	if provider == nil {
		if m.member {
			// The provider's own server listens on every interface;
			// ours listens on the configured endpoint only.
			ln := cfg.MembershipListener
			if ln == nil {
				if ln, err = net.Listen("tcp", cfg.Membership); err != nil {
					return nil, nil, fmt.Errorf("%w: cluster %s: membership endpoint %s: %v", wire.ErrConfig, cfg.Name, cfg.Membership, err)
				}
			}
			server = echo.New()
			server.HideBanner, server.HidePort, server.Listener = true, true, ln
			server.Logger.SetOutput(discard{})
			server.GET("/_health", func(ctx echo.Context) error { return ctx.JSON(http.StatusOK, m.node()) })
			provider = automanaged.NewWithTesting(cfg.Refresh, ln.Addr().(*net.TCPAddr).Port, server, cfg.Seeds...)
		} else {
			// An idle server, so that the provider can be shut down.
			provider = automanaged.NewWithTesting(cfg.Refresh, 0, echo.New(), cfg.Seeds...)
		}
	}
	config := actorcluster.Configure(cfg.Name, provider, disthash.New(), remoteCfg)
	if m.member {
		config.Kinds[HostKind] = actorcluster.NewKind(HostKind, actor.PropsFromFunc(func(actor.Context) {}))
	}
	as.EventStream.Subscribe(func(evt any) {
		if t, ok := evt.(*actorcluster.ClusterTopology); ok {
			m.topology(gen, t)
		}
	})
	if c, err = newCluster(as, config); err != nil {
		return nil, nil, err
	}
	if m.member {
		m.mu.Lock()
		m.c = c // the membership endpoint may answer before StartMember returns
		m.mu.Unlock()
	} else {
		// A follower only hears the provider: no remote of its own is
		// started (a second one in the process would race with the first
		// over gRPC's process-wide logger, and no one needs to reach it);
		// the member list keeps its block list in one never started.
		c.Remote = premote.NewRemote(as, remoteCfg)
	}
	// A provider may wait for its service (etcd, Consul, the Kubernetes
	// API) for as long as it is down: ctx bounds the wait; a start that
	// ends after it was given up is undone.
	started := make(chan error, 1)
	cl, prov := c, provider // the results are cleared if the start is given up
	go func() {
		defer func() {
			if p := recover(); p != nil {
				started <- fmt.Errorf("%v", p)
			}
		}()
		if m.member {
			cl.StartMember()
			started <- nil
		} else {
			started <- prov.StartClient(cl)
		}
	}()
	select {
	case err = <-started:
	case <-ctx.Done():
		go func() {
			if <-started == nil {
				stopProvider(prov, false)
			}
			if !m.member {
				as.Shutdown() // a member's is the process's endpoint, given up
			}
		}()
		return nil, nil, fmt.Errorf("%w: cluster %s: its provider did not start (%w): is its service (etcd, Consul, the Kubernetes API; the automanaged seeds) reachable?", ErrProviderLate, cfg.Name, ctx.Err())
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: join cluster %s: %v", wire.ErrConfig, cfg.Name, err)
	}
	return c, provider, nil
}

// newCluster is actorcluster.New, whose failures are panics.
func newCluster(as *actor.ActorSystem, config *actorcluster.Config) (c *actorcluster.Cluster, err error) {
	defer func() {
		if p := recover(); p != nil {
			c, err = nil, fmt.Errorf("%w: cluster %s: %v", wire.ErrConfig, config.Name, p)
		}
	}()
	return actorcluster.New(as, config), nil
}

// ErrProviderLate is a cluster provider that did not start in time.
var ErrProviderLate = errors.New("remote: cluster provider late")

// The process's fronts' view of their cluster: a client on an actor
// system of its own (with no remote), so that what the cluster package
// decides (it ends the connection to a member it drops, and refuses that
// member's connections for good) touches none of the work's connections:
// a host the membership drops takes no new tenants, and is lost only when
// the front's own heartbeats, probes or the remote's watch say so.
var following struct {
	mu    sync.Mutex
	m     *Membership
	users int // fronts following it: the last to stop stops it
}

// FollowCluster is the process's view of cfg's cluster, started by the
// first front that follows it and stopped with the last (unfollow).
func FollowCluster(ctx context.Context, cfg *Config) (*Membership, error) {
	following.mu.Lock()
	defer following.mu.Unlock()
	if m := following.m; m != nil {
		if !m.Cfg.Same(cfg) {
			return nil, fmt.Errorf("%w: this process's fronts follow cluster %q already (asked %q, or the same with other seeds or refresh): one cluster per process at a time", wire.ErrConfig, m.Cfg.Name, cfg.Name)
		}
		following.users++
		return m, nil
	}
	as := QuietActorSystem()
	m, _, err := StartCluster(ctx, as, premote.Configure("127.0.0.1", 0), cfg, false)
	if err != nil {
		if !errors.Is(err, ErrProviderLate) {
			as.Shutdown() // a late one is shut down when it starts
		}
		return nil, err
	}
	following.m, following.users = m, 1
	return m, nil
}

// Unfollow is a front that stopped following m: the last one stops it.
func Unfollow(m *Membership) {
	following.mu.Lock()
	defer following.mu.Unlock()
	if following.m != m {
		return
	}
	if following.users--; following.users > 0 {
		return
	}
	following.m = nil
	m.mu.Lock()
	m.left = true // a renewal under way stops
	c, p := m.c, m.provider
	m.mu.Unlock()
	retire(c, p)
}

// retire stops a follower's cluster client: its provider, its actor
// system.
func retire(c *actorcluster.Cluster, p actorcluster.ClusterProvider) {
	defer func() { _ = recover() }() // whatever is left goes with the process
	stopProvider(p, false)
	c.ActorSystem.Shutdown()
}

// stopProvider shuts a cluster provider down; one that fails or panics
// doing so (an alpha package's shutdown) leaves what is left to the
// process's end.
func stopProvider(p actorcluster.ClusterProvider, graceful bool) {
	defer func() { _ = recover() }()
	_ = p.Shutdown(graceful)
}

// node is what the host's membership endpoint answers.
func (m *Membership) node() *automanaged.NodeModel {
	m.mu.Lock()
	c := m.c
	m.mu.Unlock()
	host, port, _ := c.ActorSystem.GetHostPort()
	_, own, _ := net.SplitHostPort(m.Cfg.Membership)
	ownPort, _ := strconv.Atoi(own)
	return automanaged.NewNode(m.Cfg.Name, c.ActorSystem.ID, host, port, ownPort, c.GetClusterKinds())
}

// topology records the members of generation gen's cluster and tells the
// watchers. A follower whose cluster saw a member leave starts a new one a
// while after: the cluster package blocks a member that left for good,
// and a host whose membership only blinked is to be listed again.
func (m *Membership) topology(gen int, t *actorcluster.ClusterTopology) {
	var hosts []string
	for _, mb := range t.Members {
		if mb.HasKind(HostKind) {
			hosts = append(hosts, mb.Address())
		}
	}
	slices.Sort(hosts)
	hosts = slices.Compact(hosts) // members of other ids at one address (an endpoint under two names, a false answer) are one host
	m.mu.Lock()
	if gen != m.gen {
		m.mu.Unlock()
		return
	}
	m.hosts = hosts
	watchers := make([]func([]string), 0, len(m.watchers))
	for _, w := range m.watchers {
		watchers = append(watchers, w)
	}
	renew := !m.member && m.Cfg.Discovery == nil && len(t.Left) > 0 && !m.renewing
	if renew {
		m.renewing = true
	}
	m.mu.Unlock()
	for _, w := range watchers {
		w(hosts)
	}
	if renew {
		go m.renew()
	}
}

// renewAfter is how many refreshes a follower waits, after its cluster saw
// a member leave, before it starts a new one.
const renewAfter = 5

// renew starts the follower's next cluster client (a new actor system, a
// new automanaged provider: nobody blocked) and retires the current one.
func (m *Membership) renew() {
	time.Sleep(renewAfter * m.Cfg.Refresh)
	m.mu.Lock()
	if m.left {
		m.renewing = false
		m.mu.Unlock()
		return // no front follows it any more
	}
	m.gen++ // from now on the new one's events, its first among them, are heard
	gen := m.gen
	m.mu.Unlock()
	as := QuietActorSystem()
	c, p, err := m.join(context.Background(), as, premote.Configure("127.0.0.1", 0), gen)
	m.mu.Lock()
	m.renewing = false
	if err != nil {
		m.gen-- // the current one goes on
		m.mu.Unlock()
		as.Shutdown()
		return
	}
	old, oldProvider := m.c, m.provider
	m.c, m.provider = c, p
	if m.left { // the last front stopped meanwhile
		old, oldProvider = c, p
	}
	m.mu.Unlock()
	retire(old, oldProvider)
}

// RemoteLogEnv names the variable that makes protoactor-go's own log
// (its endpoints connecting, losing connections, dead letters) go to
// standard error at a level: "debug", "info", "warn" or "error". Unset,
// it logs nothing: fronts and hosts say what matters themselves (Logf).
// For diagnosing the wire, not for serving.
const RemoteLogEnv = "LANES_REMOTE_LOG"

// badRemoteLog says once that RemoteLogEnv's value was not a level.
var badRemoteLog sync.Once

// QuietActorSystem is an actor system that logs only what RemoteLogEnv
// asks for.
func QuietActorSystem() *actor.ActorSystem {
	logger := slog.New(slog.DiscardHandler)
	var level slog.Level
	if v := os.Getenv(RemoteLogEnv); v != "" {
		if err := level.UnmarshalText([]byte(v)); err != nil {
			badRemoteLog.Do(func() {
				fmt.Fprintf(os.Stderr, "lanes: %s=%q is not a level (debug, info, warn or error): protoactor-go's log stays off\n", RemoteLogEnv, v)
			})
		} else {
			logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("pid", os.Getpid())
		}
	}
	return actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return logger }))
}

// Watch calls fn with the cluster's hosts now and after every change,
// until the returned function is called.
func (m *Membership) Watch(fn func(hosts []string)) (stop func()) {
	m.mu.Lock()
	id := m.next
	m.next++
	m.watchers[id] = fn
	hosts := m.hosts
	m.mu.Unlock()
	fn(hosts)
	return func() {
		m.mu.Lock()
		delete(m.watchers, id)
		m.mu.Unlock()
	}
}

// Leave takes a member host out of the cluster (its provider stops
// answering for it); the process cannot join again.
func (m *Membership) Leave() {
	m.mu.Lock()
	left := m.left
	m.left = true
	m.mu.Unlock()
	if left || !m.member {
		return
	}
	m.mu.Lock()
	p := m.provider
	m.mu.Unlock()
	stopProvider(p, true)
}

// HasLeft reports whether the process left its cluster.
func (m *Membership) HasLeft() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.left
}

// ErrLeftCluster is a host started in a process whose host left the
// cluster.
var ErrLeftCluster = errors.New("this process's host left its cluster; start the next host in a new process")

// discard is a writer that drops what the provider's HTTP server logs.
type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
