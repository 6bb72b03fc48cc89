// The lane host: one process's devices and lane actors, served to a front
// through protoactor-go's remote.

package remote

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote/wirepb"
)

// HostActor is the name of a lane host's actor: a front reaches a host at
// its address and this name.
const HostActor = "lanehost"

// HostConfig configures a lane host.
type HostConfig struct {
	// Name is the host's name in its front's reports and errors; empty:
	// "host-" and the process id.
	Name string
	// Address is where the host listens (host:port); empty: DefaultAddress
	// (loopback, a port the system picks: Host.Address says which). Any
	// address that is not loopback requires TLS.
	Address string
	// TLS secures the connections both ways (LoadTLS); nil: plain, loopback
	// only.
	TLS *tls.Config
	// Scheduler configures the host's lanes, exactly as a local scheduler:
	// Devices are the devices this host owns (one GPU, usually).
	Scheduler actors.Config
	// Heartbeat is how often the host tells its front it is alive; 0:
	// DefaultHeartbeat. A front's LostAfter must be a few of these.
	Heartbeat time.Duration
	// Protocol is the wire protocol the host claims at registration; 0 is
	// Protocol. Set another only to see a front refuse a host of another
	// version.
	Protocol uint32
	// MaxTemplates bounds the templated batches kept per epoch (0:
	// MaxTemplates); a template past it is answered TemplateUnknown when a
	// Submit names it without its batch, and the front sends it whole.
	MaxTemplates int
	// MaxFronts bounds the fronts the host serves at once (0:
	// DefaultMaxFronts); one more is refused with the reason.
	MaxFronts int
	// Logf hears what the host does not answer anyone (a refused
	// registration, a malformed message); nil: standard error.
	Logf func(format string, args ...any)
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
	cfg   HostConfig
	sys   *system
	sched *actors.Scheduler
	pid   *actor.PID
	ops   *hostOps

	mu        sync.Mutex
	regs      map[uint64]*registration // by epoch
	byFront   map[string]*registration // by the front's address
	replaced  map[uint64]*registration // registrations a front's new Join replaced, by epoch (a few)
	lastEpoch uint64
	heartbeat uint64

	shards []chan hostJob // submissions by tenant: each shard keeps its tenants' order
	quit   chan struct{}
	wg     sync.WaitGroup

	leaving  bool         // asked to leave: only the actor touches it
	inFlight atomic.Int64 // submissions handed to the scheduler and not yet answered
	stopped  atomic.Bool
}

// leaveNow asks the host's actor to stop taking submissions (Leave).
type leaveNow struct{ done chan struct{} }

// registration is one front's registration with the host.
type registration struct {
	front    *actor.PID
	epoch    uint64
	attempt  uint64 // the Join attempt it answers
	hello    *wirepb.Hello
	welcomed bool      // under Host.mu
	joined   time.Time // when the front joined

	templates map[uint64]lanes.Batch // by the front's id: only the host's actor touches it
	out       combiner[outgoing]
	lastRows  map[uint64][]lanes.Row // by template: the rows the front holds (the sender's)
}

// outgoing is a message the host sends its front: a receipt (batched with
// others; the rows of a templated one are encoded by the sender, which
// leaves out rows equal to the template's previous) or an op's result.
type outgoing struct {
	receipt  *wirepb.Receipt // with its Timing, for a sampled call: Sent is set as it goes
	rows     []lanes.Row
	template uint64
	result   *wirepb.OpResult
	leaving  *wirepb.Leaving // that the host left: after every receipt before it
}

// hostJob is a decoded submission on its way to the scheduler.
type hostJob struct {
	epoch, call, template uint64
	b                     lanes.Batch
	timing                *wirepb.Timing // a sampled call's times; nil for most
}

// hostShards is how many goroutines hand submissions to the scheduler:
// admission costs microseconds, and one goroutine would cap a host's rate.
const hostShards = 4

// MaxTemplates bounds the templated batches a host keeps per epoch; past
// it, a template is decoded for each submission that carries it.
const MaxTemplates = 1 << 14

// Serve starts a lane host: its scheduler over cfg.Scheduler's devices
// (which the host closes when it stops) and its actor on the process's
// remote endpoint. A process runs one host (and at most one front) at a
// time, on one endpoint it keeps for its life: the first front or host
// started sets its address and TLS.
func Serve(ctx context.Context, cfg HostConfig) (*Host, error) {
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.Heartbeat < time.Millisecond || cfg.Heartbeat > 10*time.Second {
		return nil, fmt.Errorf("%w: heartbeat %v: give 1ms to 10s", ErrConfig, cfg.Heartbeat)
	}
	if cfg.Name == "" {
		cfg.Name = fmt.Sprintf("host-%d", os.Getpid())
	}
	if len(cfg.Name) > 256 {
		return nil, fmt.Errorf("%w: host name of %d bytes: give at most 256", ErrConfig, len(cfg.Name))
	}
	if cfg.Protocol == 0 {
		cfg.Protocol = Protocol
	}
	if cfg.MaxTemplates <= 0 {
		cfg.MaxTemplates = MaxTemplates
	}
	if cfg.MaxFronts <= 0 {
		cfg.MaxFronts = DefaultMaxFronts
	}
	if cfg.Logf == nil {
		cfg.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, "lanehost: "+format+"\n", args...) }
	}
	if len(cfg.Scheduler.Devices) == 0 {
		return nil, fmt.Errorf("%w: a host with no devices: give Scheduler.Devices (one GPU, usually)", ErrConfig)
	}
	sched, err := actors.Start(ctx, cfg.Scheduler)
	if err != nil {
		return nil, err
	}
	sys, err := acquireSystem(cfg.Address, cfg.TLS, HostActor)
	if err != nil {
		_ = sched.Stop(context.Background())
		return nil, err
	}
	h := &Host{cfg: cfg, sys: sys, sched: sched, quit: make(chan struct{}), regs: map[uint64]*registration{}, byFront: map[string]*registration{},
		replaced: map[uint64]*registration{}}
	h.ops, err = startHostOps(h)
	if err != nil {
		releaseSystem(sys, HostActor, nil)
		_ = sched.Stop(context.Background())
		return nil, err
	}
	h.pid, err = sys.actors.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return h }), HostActor)
	if err != nil {
		h.ops.stop()
		releaseSystem(sys, HostActor, nil)
		_ = sched.Stop(context.Background())
		return nil, fmt.Errorf("%w: spawn the host actor: %v", ErrConfig, err)
	}
	h.wg.Add(1 + hostShards)
	go h.heartbeatLoop()
	for range hostShards {
		jobs := make(chan hostJob, 4096)
		h.shards = append(h.shards, jobs)
		go h.shardLoop(jobs)
	}
	return h, nil
}

// Address is where the host listens: what a front's Hosts names.
func (h *Host) Address() string { return h.sys.addr }

// Scheduler is the host's own scheduler (its lanes' status, say).
func (h *Host) Scheduler() *actors.Scheduler { return h.sched }

// serving is the registration of epoch, if a front welcomed it and it
// was not dropped since.
func (h *Host) serving(epoch uint64) (*registration, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.regs[epoch]
	return r, ok && r.welcomed
}

// Epoch is the host's newest registration, 0 before a front joined.
func (h *Host) Epoch() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastEpoch
}

// Fronts is how many fronts the host serves now (registered and welcomed).
func (h *Host) Fronts() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.regs {
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
	h.wg.Wait()
	releaseSystem(h.sys, HostActor, h.pid)
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
		h.frontGone(m.Who)
	case *wirepb.Join:
		if front := h.join(m); front != nil {
			ctx.Watch(front) // a front that dies before it welcomes the host frees its place
		}
	case *wirepb.Welcome:
		h.welcome(m) // the front is watched since it joined
	case *wirepb.Submits:
		h.submits(m)
	case *leaveNow:
		h.startLeaving()
		close(m.done)
	case *wirepb.Alloc:
		if h.leaving {
			h.send(outgoing{result: &wirepb.OpResult{Epoch: m.Epoch, Call: m.Call, ErrorCode: int32(cuda.Classify(errLeaving).Code), Error: errLeaving.Error()}})
			return
		}
		h.ops.enqueue(m.Epoch, m.Call, m)
	case *wirepb.Free:
		h.ops.enqueue(m.Epoch, m.Call, m)
	case *wirepb.Read:
		h.ops.enqueue(m.Epoch, m.Call, m)
	case *wirepb.Forget:
		h.ops.enqueue(m.Epoch, m.Call, m)
	}
}

// join answers a front's Join with a Hello under a new epoch for that
// front. A front of another protocol hears this host's protocol and
// refuses it; the host serves nothing to it. A front past MaxFronts is
// refused with the reason.
func (h *Host) join(m *wirepb.Join) *actor.PID {
	if m.Front == "" {
		h.cfg.Logf("a join names no front: ignored")
		return nil
	}
	front := actor.NewPID(m.Front, FrontActor)
	h.mu.Lock()
	old := h.byFront[m.Front]
	if old != nil && old.hello != nil && old.attempt == m.Attempt {
		hello := old.hello // the same attempt asked again: the same answer
		h.mu.Unlock()
		h.tell(front, hello)
		return nil
	}
	if h.leaving {
		h.mu.Unlock()
		h.tell(front, &wirepb.Hello{Protocol: h.cfg.Protocol, Host: h.cfg.Name, Attempt: m.Attempt, Refusal: "it is leaving"})
		return nil
	}
	h.pruneLocked()
	if old == nil && len(h.byFront) >= h.cfg.MaxFronts {
		// Epoch 0: the refusal of this Hello must not reach a registration.
		busy := &wirepb.Hello{Protocol: h.cfg.Protocol, Host: h.cfg.Name, Attempt: m.Attempt,
			Refusal: fmt.Sprintf("it serves %d fronts, its most (lanehost --max-fronts, HostConfig.MaxFronts)", len(h.byFront))}
		h.mu.Unlock()
		h.tell(front, busy)
		return nil
	}
	h.lastEpoch = max(uint64(time.Now().UnixNano()), h.lastEpoch+1)
	r := &registration{front: front, epoch: h.lastEpoch, attempt: m.Attempt, templates: map[uint64]lanes.Batch{}, joined: time.Now()}
	r.out = combiner[outgoing]{most: 1024, send: func(batch []outgoing) { h.sendBatch(r, batch) }}
	if old != nil {
		delete(h.regs, old.epoch)
		if len(h.replaced) >= maxReplaced {
			clear(h.replaced)
		}
		h.replaced[old.epoch] = old
	}
	h.regs[r.epoch], h.byFront[m.Front] = r, r
	h.mu.Unlock()
	if old != nil {
		h.ops.retire(old.epoch) // its tenants: the front told them their state was lost
	}
	hello := &wirepb.Hello{Protocol: h.cfg.Protocol, Host: h.cfg.Name, Epoch: r.epoch, Attempt: m.Attempt}
	for _, d := range h.cfg.Scheduler.Devices {
		info := d.Info()
		hello.Devices = append(hello.Devices, &wirepb.Device{Instance: info.Instance, Name: info.Name, Backend: info.Backend,
			Lanes: uint32(max(h.cfg.Scheduler.LanesPerDevice, 1))})
	}
	if m.Protocol != h.cfg.Protocol {
		h.cfg.Logf("front %s speaks protocol %d, this host %d: answering with this host's protocol (the front refuses it)", m.Front, m.Protocol, h.cfg.Protocol)
	}
	h.mu.Lock()
	r.hello = hello
	h.mu.Unlock()
	h.tell(front, hello)
	return front
}

// unwelcomedFor is how long a registration may wait for its front's
// Welcome before another front may take its place.
const unwelcomedFor = 3 * time.Second

// pruneLocked drops registrations whose front never welcomed the host
// within unwelcomedFor (h.mu held): a front that died while it joined
// leaves no place taken for long (the remote's watch of the front drops
// it too, in up to ~10 s when the connection to it never came up). A live
// front answers in milliseconds; one pruned all the same loses the host
// within its bound and joins again.
func (h *Host) pruneLocked() {
	for _, r := range h.byFront {
		if !r.welcomed && time.Since(r.joined) > unwelcomedFor {
			h.dropLocked(r)
			go h.ops.retire(r.epoch)
		}
	}
}

// tell sends the front a message from the host's actor: the front knows
// the host by the sender's address.
func (h *Host) tell(front *actor.PID, msg any) {
	h.sys.actors.Root.RequestWithCustomSender(front, msg, h.pid)
}

// welcome takes the front's answer to the Hello: accepted, heartbeats
// begin (the front returned: watch it); refused, or let go by a front
// that stops, the registration is dropped (its tenants with it).
func (h *Host) welcome(m *wirepb.Welcome) *actor.PID {
	h.mu.Lock()
	r, ok := h.regs[m.Epoch]
	if !ok {
		h.mu.Unlock()
		return nil // the answer to a Hello of an epoch since replaced
	}
	if !m.Accepted {
		h.dropLocked(r)
		h.mu.Unlock()
		h.ops.retire(r.epoch)
		h.cfg.Logf("the front at %s let this host go: %s", r.front.Address, m.Refusal)
		return nil
	}
	r.welcomed = true
	h.mu.Unlock()
	h.beat()
	return r.front
}

// dropLocked forgets a registration (h.mu held).
func (h *Host) dropLocked(r *registration) {
	delete(h.regs, r.epoch)
	if h.byFront[r.front.Address] == r {
		delete(h.byFront, r.front.Address)
	}
}

// frontGone: the remote lost the connection to a front (it died, or a
// message on the way broke it), so answers may have been lost. The host
// drops that front's registration and the tenants it set up: no more
// heartbeats or service under its epoch, so the front, if alive, loses it
// within its bound (every call in flight ends indeterminate, once, and its
// tenants are told their state was lost) and joins it again; a dead front
// leaves its place to another.
func (h *Host) frontGone(who *actor.PID) {
	h.mu.Lock()
	r, ok := h.byFront[who.Address]
	if ok {
		h.dropLocked(r)
	}
	h.mu.Unlock()
	if ok {
		h.ops.retire(r.epoch)
		h.cfg.Logf("the connection to the front at %s was lost: registration %d dropped (the front rejoins)", who.Address, r.epoch)
	}
}

// submits hands each submission of the current epoch to the scheduler; a
// receipt answers each, now for one refused, at its end for one accepted.
func (h *Host) submits(m *wirepb.Submits) {
	var r *registration
	for _, s := range m.Submits {
		if s == nil {
			continue
		}
		if r == nil || s.Epoch != r.epoch {
			var ok bool
			if r, ok = h.serving(s.Epoch); !ok {
				r = nil
				continue // sent to a registration since dropped: the front's calls end with its loss
			}
		}
		h.submit(r, s)
	}
}

func (h *Host) submit(r *registration, s *wirepb.Submit) {
	epoch := r.epoch
	if h.leaving {
		h.send(outgoing{receipt: &wirepb.Receipt{Epoch: epoch, Call: s.Call, Outcome: uint32(lanes.OutcomeRefused), Tenant: tenantOf(s), Lane: -1,
			HostLeaving: true, ErrorCode: int32(cuda.Classify(errLeaving).Code), Error: errLeaving.Error()}})
		return
	}
	var timing *wirepb.Timing
	if s.SentUnixNano != 0 {
		timing = &wirepb.Timing{Received: time.Now().UnixNano()}
	}
	b, ok := h.batchOf(r, s)
	if !ok {
		return
	}
	h.inFlight.Add(1)
	select {
	case h.shards[shardOf(b.Tenant)] <- hostJob{epoch: epoch, call: s.Call, template: s.Template, b: b, timing: timing}:
	case <-h.quit:
		h.inFlight.Add(-1)
	}
}

// shardOf is the shard of a tenant (FNV-1a of its name).
func shardOf(tenant string) int {
	h := uint32(2166136261)
	for i := 0; i < len(tenant); i++ {
		h = (h ^ uint32(tenant[i])) * 16777619
	}
	return int(h % hostShards)
}

// shardLoop hands its tenants' submissions to the scheduler in order, and
// answers each at its end.
func (h *Host) shardLoop(jobs chan hostJob) {
	defer h.wg.Done()
	for {
		var j hostJob
		select {
		case j = <-jobs:
		case <-h.quit:
			return
		}
		p, err := h.sched.SubmitAsync(context.Background(), j.b.Tenant, j.b)
		if err != nil {
			h.refuse(j.epoch, j.call, j.b.Tenant, err)
			h.inFlight.Add(-1)
			continue
		}
		if j.timing != nil {
			j.timing.Admitted = time.Now().UnixNano()
		}
		go func() {
			<-p.Done()
			if j.timing != nil {
				j.timing.Ended = time.Now().UnixNano()
			}
			r, _ := p.Result()
			rows := r.Attribution.Rows
			r.Attribution.Rows = nil
			w := ReceiptToWire(j.epoch, j.call, r, nil)
			w.Timing = j.timing
			h.send(outgoing{receipt: w, rows: rows, template: j.template})
			h.inFlight.Add(-1)
		}()
	}
}

// batchOf is the submission's batch: inline, or its template (kept from
// an earlier Submit that carried it). A template the host does not hold is
// answered with TemplateUnknown (the front sends it again, whole).
func (h *Host) batchOf(r *registration, s *wirepb.Submit) (lanes.Batch, bool) {
	epoch := r.epoch
	if s.Template == 0 {
		b, err := BatchFromWire(s.Batch)
		if err != nil {
			h.refuse(epoch, s.Call, tenantOf(s), err)
			return b, false
		}
		return b, true
	}
	b, ok := r.templates[s.Template]
	if s.Batch != nil {
		var err error
		if b, err = BatchFromWire(s.Batch); err != nil {
			h.refuse(epoch, s.Call, s.Tenant, err)
			return b, false
		}
		if len(r.templates) < h.cfg.MaxTemplates {
			r.templates[s.Template] = b
		}
	} else if !ok {
		h.send(outgoing{receipt: &wirepb.Receipt{Epoch: epoch, Call: s.Call, Outcome: uint32(lanes.OutcomeRefused), Tenant: s.Tenant,
			Lane: -1, Template: s.Template, TemplateUnknown: true, ErrorCode: int32(cuda.Classify(errTemplate).Code), Error: errTemplate.Error()}})
		return b, false
	}
	b.Tenant = s.Tenant // the entries are shared, read-only, by every submission of the template
	return b, true
}

// errTemplate is a templated submission the host does not hold.
var errTemplate = fmt.Errorf("%w: the host does not hold this submission's template", ErrWire)

func tenantOf(s *wirepb.Submit) string {
	if s.Batch == nil || s.Tenant != "" {
		return s.Tenant
	}
	return s.Batch.Tenant
}

// refuse answers a submission the host turned away before any device work.
func (h *Host) refuse(epoch, call uint64, tenant string, err error) {
	h.send(outgoing{receipt: refusedReceipt(epoch, call, tenant, err)})
}

// send sends a message to the front of its epoch, with any others queued
// meanwhile; after Stop, or for a registration dropped, it is dropped.
func (h *Host) send(o outgoing) {
	select {
	case <-h.quit:
		return
	default:
	}
	epoch := o.result.GetEpoch()
	switch {
	case o.receipt != nil:
		epoch = o.receipt.Epoch
	case o.leaving != nil:
		epoch = o.leaving.Epoch
	}
	h.mu.Lock()
	r, ok := h.regs[epoch]
	if !ok {
		// Answers of a registration its front replaced (it lost the host
		// and joined again) still go to it: the front drops them by epoch,
		// the check that keeps every call ending once.
		r, ok = h.replaced[epoch]
	}
	h.mu.Unlock()
	if ok {
		r.out.add(o)
	}
}

// maxReplaced bounds the replaced registrations a host still answers for.
const maxReplaced = 16

// sendBatch sends a registration's queued receipts as one message, and op
// results each on its own (one sender at a time: it owns the rows the
// front holds).
func (h *Host) sendBatch(r *registration, batch []outgoing) {
	var rs []*wirepb.Receipt
	flush := func() {
		if len(rs) == 0 {
			return
		}
		now := time.Now().UnixNano()
		for _, w := range rs {
			if w.Timing != nil {
				w.Timing.Sent = now
			}
		}
		h.tell(r.front, &wirepb.Receipts{Receipts: rs})
		rs = nil
	}
	for _, o := range batch {
		switch {
		case o.receipt != nil:
			if r.lastRows == nil {
				r.lastRows = map[uint64][]lanes.Row{}
			}
			encodeRows(o, r.lastRows)
			rs = append(rs, o.receipt)
		case o.leaving != nil:
			flush() // the receipts before it arrive first
			h.tell(r.front, o.leaving)
		default:
			h.tell(r.front, o.result)
		}
	}
	flush()
}

// encodeRows puts a receipt's rows on it, or, for a template whose
// previous receipt had the same rows, says so instead.
func encodeRows(o outgoing, last map[uint64][]lanes.Row) {
	if o.template == 0 {
		o.receipt.Rows = RowsToWire(o.rows)
		return
	}
	o.receipt.Template = o.template
	if prev, ok := last[o.template]; ok && slices.Equal(prev, o.rows) {
		o.receipt.RowsAsBefore = true
		return
	}
	o.receipt.Rows = RowsToWire(o.rows)
	if len(last) < MaxTemplates {
		last[o.template] = o.rows
	}
}

// errHostStopped is a Leave of a host Stop stopped (or stops meanwhile).
var errHostStopped = errors.New("remote: the host was stopped")

// errLeaving is a submission (or allocation) refused by a leaving host.
var errLeaving = fmt.Errorf("%w: the host is leaving: it takes no new work", ErrHostLeaving)

// Leave asks the host to leave well: from now on it refuses new
// submissions and allocations (the fronts hear it is leaving and place no
// new tenants on it), finishes every submission it has, then tells its
// fronts it left, whose tenants then move (DeviceStateLostError with
// Left). Reads, frees and forgets still run meanwhile. It returns when
// the last submission ended, or with ctx's error (the host still leaves:
// Stop ends what is left). Keep serving a moment after (lanehost lingers
// 500 ms) so submissions fronts sent before they heard are refused, not
// left to end indeterminate; then Stop.
func (h *Host) Leave(ctx context.Context) error {
	if h.stopped.Load() {
		return errHostStopped
	}
	done := make(chan struct{})
	h.sys.actors.Root.Send(h.pid, &leaveNow{done: done})
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	case <-h.quit:
		return errHostStopped
	}
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for h.inFlight.Load() > 0 {
		select {
		case <-t.C:
		case <-ctx.Done():
			return fmt.Errorf("remote: leave: %d submissions still in flight: %w", h.inFlight.Load(), ctx.Err())
		case <-h.quit:
			return fmt.Errorf("remote: leave: %w before %d submissions ended (they end indeterminate at their fronts)", errHostStopped, h.inFlight.Load())
		}
	}
	h.mu.Lock()
	var epochs []uint64
	for e, r := range h.regs {
		if r.welcomed {
			epochs = append(epochs, e)
		}
	}
	h.mu.Unlock()
	for _, e := range epochs { // behind every receipt of the registration
		h.send(outgoing{leaving: &wirepb.Leaving{Epoch: e, Drained: true}})
	}
	return nil
}

// startLeaving refuses new work from now on and tells the fronts (the
// host's actor, so no submission it took is missed).
func (h *Host) startLeaving() {
	if h.leaving {
		return
	}
	h.leaving = true
	h.cfg.Logf("leaving: no new submissions; finishing %d in flight", h.inFlight.Load())
	h.tellFronts(func(epoch uint64) any { return &wirepb.Leaving{Epoch: epoch} })
}

// tellFronts sends every welcomed front a message of its epoch.
func (h *Host) tellFronts(msg func(epoch uint64) any) {
	h.mu.Lock()
	var regs []*registration
	for _, r := range h.regs {
		if r.welcomed {
			regs = append(regs, r)
		}
	}
	h.mu.Unlock()
	for _, r := range regs {
		h.tell(r.front, msg(r.epoch))
	}
}

// heartbeatLoop proves the host alive to its front every Heartbeat.
func (h *Host) heartbeatLoop() {
	defer h.wg.Done()
	t := time.NewTicker(h.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			h.beat()
		case <-h.quit:
			return
		}
	}
}

// beat sends one heartbeat to every front that welcomed this host.
func (h *Host) beat() {
	type to struct {
		front *actor.PID
		epoch uint64
	}
	var fronts []to
	h.mu.Lock()
	for _, r := range h.regs {
		if r.welcomed {
			fronts = append(fronts, to{r.front, r.epoch})
		}
	}
	h.heartbeat++
	seq := h.heartbeat
	h.mu.Unlock()
	if len(fronts) == 0 {
		return
	}
	fault := ""
	if err := h.DeviceFault(); err != nil {
		fault = err.Error()
	}
	for _, f := range fronts {
		h.tell(f.front, &wirepb.Heartbeat{Epoch: f.epoch, Seq: seq, SentUnixNano: time.Now().UnixNano(), DeviceFault: fault})
	}
}

// DeviceFault is the sticky error that poisoned one of the host's devices,
// or nil. A poisoned device stays poisoned for the life of its process: a
// host that reports one is replaced (lanehost exits; a front that launched
// it starts another).
func (h *Host) DeviceFault() error {
	for _, d := range h.cfg.Scheduler.Devices {
		if err := d.Err(); err != nil {
			return fmt.Errorf("device %d (%s): %w", d.Info().Ordinal, d.Info().Name, err)
		}
	}
	return nil
}
