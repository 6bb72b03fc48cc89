// The lane host: one process's devices and lane actors, served to a front
// through protoactor-go's remote.

package host

import (
	"context"
	"crypto/tls"
	"fmt"
	"maps"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/schedhook"
	"github.com/lanesched/lanes/internal/shmring"
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/lanes"

	dataplane "github.com/lanesched/lanes/remote/internal/dataplane"

	system "github.com/lanesched/lanes/remote/internal/system"

	cluster "github.com/lanesched/lanes/remote/internal/cluster"

	wire "github.com/lanesched/lanes/remote/internal/wire"
)

// Config is remote.HostConfig as this package takes it: see there for
// what each field means.
type Config struct {
	Name            string
	Address         string
	Advertise       string
	TLS             *tls.Config
	TokenFile       string
	Scheduler       actors.Config
	Heartbeat       time.Duration
	Protocol        uint32
	MaxTemplates    int
	Calls           wire.LibraryCalls
	Modules         []kernels.Module
	MaxFronts       int
	SilentFront     time.Duration
	NoDataPlane     bool
	RingBytes       int
	UploadAreaBytes int
	Cluster         *cluster.Config
	Logf            func(format string, args ...any)
}

// DefaultHeartbeat is how often a host proves itself alive by default.
const DefaultHeartbeat = 100 * time.Millisecond

// DefaultMaxFronts is how many fronts a host serves at once by default.
const DefaultMaxFronts = 8

// Host is a running lane host: a scheduler over its devices, served to
// the fronts that join it (up to MaxFronts at once), each under an epoch
// of its own. A front's Join starts a new epoch for that front, and what
// the host held for tenants set up under its old one is dropped; other
// fronts' registrations go on.
type Host struct {
	cfg     Config
	sys     *system.System
	sched   *actors.Scheduler
	pid     *actor.PID
	ops     *hostOps
	modules wire.HostModules // what its devices loaded of modules, theirs and fronts'

	Mu        sync.Mutex
	Regs      map[uint64]*registration // by epoch
	byFront   map[string]*registration // by the front's address
	replaced  map[uint64]*registration // registrations a front's new Join replaced, by epoch (a few)
	dropped   map[uint64]*droppedReg   // registrations the host dropped, by epoch (a few): told their fronts when they speak under them
	lastEpoch uint64
	heartbeat uint64

	shards  []chan hostJob // submissions by tenant: each shard keeps its tenants' order
	replies []*replyQueue  // each shard's ended submissions, answered by its replier
	quit    chan struct{}
	wg      sync.WaitGroup

	Leaving  atomic.Bool  // asked to leave (the actor sets it; data planes read it too)
	inFlight atomic.Int64 // submissions handed to the scheduler and not yet answered
	stopped  atomic.Bool
}

// heard notes a message of the registration's front now.
func (r *registration) heard() { r.heardAt.Store(time.Now().UnixNano()) }

// leaveNow asks the host's actor to stop taking submissions (Leave).
type leaveNow struct{ done chan struct{} }

// registration is one front's registration with the host.
type registration struct {
	front    *actor.PID
	epoch    uint64
	attempt  uint64 // the Join attempt it answers
	hello    *wirepb.Hello
	welcomed bool          // under Host.mu
	joined   time.Time     // when the front joined
	probed   atomic.Uint64 // the newest Probe from the front (the actor writes, heartbeats read)
	heardAt  atomic.Int64  // when the front's last message came (unix nanoseconds): its proof of life
	released atomic.Bool   // the front heard the host left and has nothing in flight on it (Leave waits for it)

	templates map[uint64]*hostTemplate            // by the front's id: only the reader of its submissions touches the map (the actor, or the data plane's reader)
	offered   atomic.Pointer[dataplane.DataPlane] // the data plane offered in its Hello, until the Welcome
	plane     atomic.Pointer[dataplane.DataPlane] // the data plane the front took: every message of the registration but heartbeats goes through it
	out       system.Combiner[Outgoing]
	lastRows  map[uint64][]lanes.Row           // by template: the rows the front holds (the sender's)
	lastSegs  map[uint64][]lanes.SegmentRecord // and the segments
	watched   watchedCalls                     // the withdrawable submissions in flight (host_withdraw.go)
}

// Outgoing is a message the host sends its front: a receipt (batched with
// others; the rows of a templated one are encoded by the sender, which
// leaves out rows equal to the template's previous) or an op's result.
type Outgoing struct {
	Receipt  *wirepb.Receipt // with its Timing, for a sampled call: Sent is set as it goes
	Rows     []lanes.Row     // its receipt's rows and segments, encoded as it is sent (encodeAttribution)
	Segments []lanes.SegmentRecord
	Template uint64
	result   *wirepb.OpResult
	leaving  *wirepb.Leaving // that the host left: after every receipt before it
}

// hostTemplate is a batch a front encoded once, and what the scheduler's
// ownership check of it last concluded: its steps, the same handles every
// time, are not checked again until ownership changes.
type hostTemplate struct {
	b    lanes.Batch
	memo schedhook.OwnershipMemo
}

// hostJob is a decoded submission on its way to the scheduler.
type hostJob struct {
	epoch, call, template uint64
	b                     lanes.Batch              // its Tenant scoped to the epoch (scoped)
	memo                  *schedhook.OwnershipMemo // a template's (nil: a whole batch)
	tenant                string                   // as the front named it
	timing                *wirepb.Timing           // a sampled call's times; nil for most
	viaPlane              bool                     // came through the registration's data plane
	area                  *dataplane.DataPlane     // whose pinned upload area its uploads read in place until it ends (nil: none)
	watch                 *registration            // a withdrawable submission's registration, which keeps its context's cancel; nil for most
	op                    any                      // or an operation of the tenant's, to run after its submissions before it
}

// ended lets go what the job held until its step ended: the upload area
// its uploads read, and a withdrawable submission's context.
func (j *hostJob) ended() {
	if j.area != nil {
		j.area.ReleaseArea()
		j.area = nil
	}
	if j.watch != nil {
		j.watch.watched.forget(j.call)
		j.watch = nil
	}
}

// hostShards is how many goroutines hand submissions to the scheduler:
// admission costs microseconds, and one goroutine would cap a host's rate.
const hostShards = 4

// Serve starts a lane host: its scheduler over cfg.Scheduler's devices
// (which the host closes when it stops) and its actor on the process's
// remote endpoint. A process runs one host (and at most one front) at a
// time, on one endpoint it keeps for its life: the first front or host
// started sets its address and TLS. A host with a Cluster makes that
// endpoint a member, which leaves the cluster when the host stops: a
// process serves at most one cluster host in its life (start the next in
// a new process).
func Serve(ctx context.Context, cfg Config) (*Host, error) {
	h, err := serve(ctx, cfg)
	if err != nil && cfg.Cluster != nil && cfg.Cluster.MembershipListener != nil {
		_ = cfg.Cluster.MembershipListener.Close() // taken over, as its doc says, also by a Serve that fails
	}
	return h, err
}

func serve(ctx context.Context, cfg Config) (*Host, error) {
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.Heartbeat < time.Millisecond || cfg.Heartbeat > 10*time.Second {
		return nil, fmt.Errorf("%w: Heartbeat %v: give 1ms to 10s (0 for the default %v)", wire.ErrConfig, cfg.Heartbeat, DefaultHeartbeat)
	}
	if cfg.Name == "" {
		cfg.Name = fmt.Sprintf("host-%d", os.Getpid())
	}
	if len(cfg.Name) > 256 || !utf8.ValidString(cfg.Name) {
		return nil, fmt.Errorf("%w: host name %.40q of %d bytes: give at most 256 bytes of UTF-8", wire.ErrConfig, cfg.Name, len(cfg.Name))
	}
	if cfg.Protocol == 0 {
		cfg.Protocol = wire.Protocol
	}
	if err := wire.CheckLibraryCalls(cfg.Calls); err != nil {
		return nil, err
	}
	cfg.Calls = maps.Clone(cfg.Calls) // the host's own: the caller's map may change
	if cfg.MaxTemplates <= 0 {
		cfg.MaxTemplates = wire.MaxTemplates
	}
	switch {
	case cfg.SilentFront == 0:
		cfg.SilentFront = DefaultSilentFront
	case cfg.SilentFront < 100*time.Millisecond || cfg.SilentFront > time.Hour:
		return nil, fmt.Errorf("%w: SilentFront %v: give 100ms to 1h (0 for the default %v)", wire.ErrConfig, cfg.SilentFront, DefaultSilentFront)
	}
	if cfg.RingBytes == 0 {
		cfg.RingBytes = dataplane.DefaultRingBytes
	}
	if err := dataplane.CheckRingBytes(cfg.RingBytes); err != nil {
		return nil, err
	}
	switch cfg.UploadAreaBytes {
	case 0:
		cfg.UploadAreaBytes = dataplane.DefaultUploadAreaBytes
	case -1:
		cfg.UploadAreaBytes = 0
	default:
		if err := dataplane.CheckUploadArea(cfg.UploadAreaBytes); err != nil {
			return nil, err
		}
	}
	switch {
	case cfg.MaxFronts == 0:
		cfg.MaxFronts = DefaultMaxFronts
	case cfg.MaxFronts < 0:
		return nil, fmt.Errorf("%w: MaxFronts %d: give the most fronts served at once (0 for the default %d)", wire.ErrConfig, cfg.MaxFronts, DefaultMaxFronts)
	}
	if cfg.Logf == nil {
		cfg.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, "lanehost: "+format+"\n", args...) }
	}
	if err := shmring.CheckSpinEnv(); err != nil && !cfg.NoDataPlane {
		cfg.Logf("%v", err)
	}
	if len(cfg.Scheduler.Devices) == 0 {
		return nil, fmt.Errorf("%w: a host with no devices: give Scheduler.Devices (one GPU, usually)", wire.ErrConfig)
	}
	if cfg.Cluster != nil {
		c := *cfg.Cluster
		if err := c.Check(true, cfg.TLS != nil); err != nil {
			return nil, err
		}
		if c.Membership != "" && (c.Membership == cfg.Address || c.Membership == cfg.Advertise) {
			return nil, fmt.Errorf("%w: cluster %s: membership endpoint %s is the host's own address: give it a port of its own", wire.ErrConfig, c.Name, c.Membership)
		}
		cfg.Cluster = &c
	}
	// Each front's tenants are a scope of their own: another front's
	// buffers are, to them, buffers never handed out.
	cfg.Scheduler.Scope = scopeOf
	sched, err := actors.Start(ctx, cfg.Scheduler)
	if err != nil {
		return nil, err
	}
	sys, err := system.AcquireSystem(ctx, system.EndpointConfig{Address: cfg.Address, Advertise: cfg.Advertise, Tls: cfg.TLS, TokenFile: cfg.TokenFile, Cluster: cfg.Cluster, Logf: cfg.Logf}, wire.HostActorName)
	if err != nil {
		_ = sched.Stop(context.Background())
		return nil, err
	}
	h := &Host{cfg: cfg, sys: sys, sched: sched, quit: make(chan struct{}), Regs: map[uint64]*registration{}, byFront: map[string]*registration{},
		replaced: map[uint64]*registration{}, dropped: map[uint64]*droppedReg{}, modules: wire.HostModules{Sums: map[string]wire.ModuleSum{}}}
	for _, m := range cfg.Modules {
		if err := h.modules.Load(cfg.Scheduler.Devices, m); err != nil {
			system.ReleaseSystem(sys, wire.HostActorName, nil)
			_ = sched.Stop(context.Background())
			return nil, fmt.Errorf("%w: HostConfig.Modules: %w", wire.ErrConfig, err)
		}
	}
	h.ops, err = startHostOps(h)
	if err != nil {
		system.ReleaseSystem(sys, wire.HostActorName, nil)
		_ = sched.Stop(context.Background())
		return nil, err
	}
	h.pid, err = sys.Actors.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return h }), wire.HostActorName)
	if err != nil {
		h.ops.stop()
		system.ReleaseSystem(sys, wire.HostActorName, nil)
		_ = sched.Stop(context.Background())
		return nil, fmt.Errorf("%w: spawn the host actor: %v", wire.ErrConfig, err)
	}
	// A front's connection that ends frees its place at once: its process
	// ended (or the way to it broke, and it joins again).
	gone := func(addr string) { h.FrontGone(actor.NewPID(addr, wire.FrontActorName)) }
	sys.Guard.PeerGone.Store(&gone)
	h.wg.Add(1 + 2*hostShards)
	go h.heartbeatLoop()
	for i := range hostShards {
		jobs := make(chan hostJob, 4096)
		h.shards = append(h.shards, jobs)
		h.replies = append(h.replies, newReplyQueue())
		go h.shardLoop(i, jobs)
		go h.replyLoop(h.replies[i])
	}
	return h, nil
}

// Address is where fronts reach the host (what a front's Hosts names):
// HostConfig.Advertise if given, else where it listens.
func (h *Host) Address() string { return h.sys.Addr }

// Listening is where the host serves, as its process's first line says
// it (cmd/lanehost prints it): its address, where it is bound when it
// advertises another, and its membership endpoint in a cluster.
func (h *Host) Listening() wire.Listening {
	l := wire.Listening{Address: h.sys.Addr}
	if h.sys.Bound != h.sys.Addr {
		l.Bound = h.sys.Bound
	}
	if m := h.sys.Member; m != nil {
		l.Membership = m.Cfg.Membership
	}
	return l
}

// Wire is what the process's endpoint refused: connections that did not
// authenticate, malformed ones, messages dropped unread, panics of the
// remote's handler recovered. A front and a host of one process share it.
func (h *Host) Wire() system.WireStats { return h.sys.Guard.Stats() }

// Scheduler is the host's own scheduler (its lanes' status, say).
func (h *Host) Scheduler() *actors.Scheduler { return h.sched }

// serving is the registration of epoch, if a front welcomed it and it
// was not dropped since.
func (h *Host) serving(epoch uint64) (*registration, bool) {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	r, ok := h.Regs[epoch]
	return r, ok && r.welcomed
}

// Epoch is the host's newest registration, 0 before a front joined.
func (h *Host) Epoch() uint64 {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	return h.lastEpoch
}

// Fronts is how many fronts the host serves now (registered and welcomed).
func (h *Host) Fronts() int {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	n := 0
	for _, r := range h.Regs {
		if r.welcomed {
			n++
		}
	}
	return n
}

// Stop stops serving: the host's actor first (the front hears no more
// heartbeats and loses it within its bound), then the scheduler (every
// submission in flight ends), then the devices. The process's endpoint
// stays (see Serve).
func (h *Host) Stop(ctx context.Context) error {
	if h.stopped.Swap(true) {
		return nil // stopped already
	}
	close(h.quit)
	h.sys.Guard.PeerGone.Store(nil)
	h.wg.Wait()
	h.closePlanes()
	if h.sys.Member != nil {
		h.sys.Member.Leave() // fronts see it go from the membership too
	}
	system.ReleaseSystem(h.sys, wire.HostActorName, h.pid)
	err := h.sched.Stop(ctx)
	h.ops.stop()
	for _, d := range h.cfg.Scheduler.Devices {
		_ = d.Close()
	}
	return err
}

// Receive is the host actor: registration, submissions, device-state ops.
func (h *Host) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Terminated:
		h.FrontGone(m.Who)
	case *wirepb.Join:
		if s := ctx.Sender(); s == nil || s.Address != m.Front {
			h.sys.Guard.Dropped.Add(1) // a Join for a front that did not send it
			return
		}
		if front := h.Join(m); front != nil {
			ctx.Watch(front) // a front that dies before it welcomes the host frees its place
		}
	case *wirepb.Welcome:
		if h.sentBy(ctx, m.Epoch) {
			h.welcome(m) // the front is watched since it joined
			if m.Accepted {
				h.tellDropped(ctx.Sender(), m.Epoch)
			}
		}
	case *wirepb.Submits:
		h.submits(m, ctx.Sender(), false)
	case *wirepb.Withdraw:
		if h.opSentBy(ctx, m.Epoch) {
			h.takeWithdraw(ctx.Sender(), m)
		}
	case *leaveNow:
		h.startLeaving()
		close(m.done)
	case *wirepb.Alloc, *wirepb.Free, *wirepb.Read, *wirepb.Forget, *wirepb.LaneAdmin, *wirepb.StagedPrepare, *wirepb.StagedReplay, *wirepb.StagedRelease:
		if op := m.(tenantOp); h.opSentBy(ctx, op.GetEpoch()) {
			if r, ok := h.serving(op.GetEpoch()); ok {
				r.heard()
			} else {
				h.tellDropped(ctx.Sender(), op.GetEpoch())
			}
			h.takeOp(op)
		}
	case *wirepb.Leaving: // a front's: it heard the host left and sends nothing more under the epoch
		if r, ok := h.serving(m.Epoch); ok && h.sentBy(ctx, m.Epoch) {
			r.released.Store(true)
		}
	case *wirepb.Probe:
		if r, ok := h.serving(m.Epoch); ok && m.Seq > r.probed.Load() && h.sentBy(ctx, m.Epoch) {
			r.probed.Store(m.Seq) // echoed in the next heartbeat
			r.heard()
		} else if !ok {
			h.tellDropped(ctx.Sender(), m.Epoch)
		}
	}
}

// sentBy reports whether a message under epoch came from the front that
// registered it: a registration's epoch is no password, and another
// front's message naming it (or one with no sender) is dropped and
// counted. An epoch the host does not hold is answered as before (the
// front's calls end with its loss of the host).
func (h *Host) sentBy(ctx actor.Context, epoch uint64) bool {
	h.Mu.Lock()
	r, ok := h.Regs[epoch]
	h.Mu.Unlock()
	if !ok {
		return true // not a registration: the rest drops it as stale
	}
	if s := ctx.Sender(); s == nil || s.Address != r.front.Address {
		h.sys.Guard.Dropped.Add(1)
		return false
	}
	return true
}

// opSentBy is sentBy for a registration's operations, which come through
// its data plane when it has one (the plane's reader takes them there).
func (h *Host) opSentBy(ctx actor.Context, epoch uint64) bool {
	if r, ok := h.serving(epoch); ok && r.PlaneFor() != nil {
		h.sys.Guard.Dropped.Add(1) // sent around the registration's data plane
		return false
	}
	return h.sentBy(ctx, epoch)
}
