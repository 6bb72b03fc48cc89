// The lane host: one process's devices and lane actors, served to a front
// through protoactor-go's remote.

package remote

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"slices"
	"sync"
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
	// Logf hears what the host does not answer anyone (a refused
	// registration, a malformed message); nil: standard error.
	Logf func(format string, args ...any)
}

// DefaultHeartbeat is how often a host proves itself alive by default.
const DefaultHeartbeat = 100 * time.Millisecond

// Host is a running lane host: a scheduler over its devices, served to the
// front that joins it. It serves one front at a time: a Join starts a new
// epoch, and what the host held for tenants under the old one is dropped.
type Host struct {
	cfg   HostConfig
	sys   *system
	sched *actors.Scheduler
	pid   *actor.PID
	ops   *hostOps

	mu        sync.Mutex
	epoch     uint64     // the current registration; 0 before the first Join
	front     *actor.PID // who joined
	attempt   uint64     // the Join attempt the current epoch answers
	hello     *wirepb.Hello
	welcomed  bool
	heartbeat uint64

	templates map[uint64]lanes.Batch // the current epoch's, by the front's id: only the actor touches it

	shards    []chan hostJob // submissions by tenant: each shard keeps its tenants' order
	out       combiner[outgoing]
	rowsEpoch uint64                 // the epoch lastRows belongs to (the sender's)
	lastRows  map[uint64][]lanes.Row // by template: the rows the front holds (the sender's)
	quit      chan struct{}
	wg        sync.WaitGroup
}

// outgoing is a message the host sends its front: a receipt (batched with
// others; the rows of a templated one are encoded by the sender, which
// leaves out rows equal to the template's previous) or an op's result.
type outgoing struct {
	receipt  *wirepb.Receipt // with its Timing, for a sampled call: Sent is set as it goes
	rows     []lanes.Row
	template uint64
	result   *wirepb.OpResult
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
// remote endpoint. A process serves one host (and at most one front) at a
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
	h := &Host{cfg: cfg, sys: sys, sched: sched, quit: make(chan struct{})}
	h.out = combiner[outgoing]{most: 1024, send: h.sendBatch}
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

// serving is the current epoch, and whether a front welcomed it.
func (h *Host) serving() (uint64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.epoch, h.welcomed
}

// Epoch is the host's current registration, 0 before a front joined.
func (h *Host) Epoch() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.epoch
}

// Stop stops serving: the host's actor first (the front hears no more
// heartbeats and loses it within its bound), then the scheduler (every
// submission in flight ends), then the devices. The process's endpoint
// stays (see Serve).
func (h *Host) Stop(ctx context.Context) error {
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
		h.join(m)
	case *wirepb.Welcome:
		if h.welcome(m) {
			ctx.Watch(h.frontPID())
		}
	case *wirepb.Submits:
		h.submits(m)
	case *wirepb.Alloc:
		h.ops.enqueue(m.Epoch, m.Call, m)
	case *wirepb.Free:
		h.ops.enqueue(m.Epoch, m.Call, m)
	case *wirepb.Read:
		h.ops.enqueue(m.Epoch, m.Call, m)
	case *wirepb.Forget:
		h.ops.enqueue(m.Epoch, m.Call, m)
	}
}

// join answers a front's Join with a Hello under a new epoch. A front of
// another protocol hears this host's protocol and refuses it; the host
// serves nothing to it.
func (h *Host) join(m *wirepb.Join) {
	if m.Front == "" {
		h.cfg.Logf("a join names no front: ignored")
		return
	}
	front := actor.NewPID(m.Front, FrontActor)
	h.mu.Lock()
	if h.welcomed && h.front != nil && !h.front.Equal(front) {
		// Epoch 0: the other front's refusal of this Hello must not reach
		// the registration that serves.
		busy := &wirepb.Hello{Protocol: h.cfg.Protocol, Host: h.cfg.Name, Attempt: m.Attempt,
			Refusal: fmt.Sprintf("it serves the front at %s; a host serves one front at a time", h.front.Address)}
		h.mu.Unlock()
		h.tell(front, busy)
		return
	}
	if h.hello != nil && h.front.Equal(front) && h.attempt == m.Attempt {
		hello := h.hello // the same attempt asked again: the same answer
		h.mu.Unlock()
		h.tell(front, hello)
		return
	}
	old := h.epoch
	h.epoch = max(uint64(time.Now().UnixNano()), h.epoch+1)
	h.templates = map[uint64]lanes.Batch{}
	h.front, h.welcomed, h.attempt = front, false, m.Attempt
	epoch := h.epoch
	h.mu.Unlock()
	if old != 0 {
		h.ops.retire() // the old epoch's tenants: the front told them their state was lost
	}
	hello := &wirepb.Hello{Protocol: h.cfg.Protocol, Host: h.cfg.Name, Epoch: epoch, Attempt: m.Attempt}
	for _, d := range h.cfg.Scheduler.Devices {
		info := d.Info()
		hello.Devices = append(hello.Devices, &wirepb.Device{Instance: info.Instance, Name: info.Name, Backend: info.Backend,
			Lanes: uint32(max(h.cfg.Scheduler.LanesPerDevice, 1))})
	}
	if m.Protocol != h.cfg.Protocol {
		h.cfg.Logf("front %s speaks protocol %d, this host %d: answering with this host's protocol (the front refuses it)", m.Front, m.Protocol, h.cfg.Protocol)
	}
	h.mu.Lock()
	h.hello = hello
	h.mu.Unlock()
	h.tell(front, hello)
}

// tell sends the front a message from the host's actor: the front knows
// the host by the sender's address.
func (h *Host) tell(front *actor.PID, msg any) {
	h.sys.actors.Root.RequestWithCustomSender(front, msg, h.pid)
}

// welcome takes the front's answer to the Hello: accepted, heartbeats
// begin (true: watch the front); refused, the host says why and waits for
// another Join.
func (h *Host) welcome(m *wirepb.Welcome) bool {
	if m.Epoch != h.Epoch() {
		return false // the answer to a Hello of an epoch since replaced
	}
	if !m.Accepted {
		h.mu.Lock()
		h.welcomed = false // refused, or let go by a front that stops: another front may join
		h.mu.Unlock()
		h.cfg.Logf("the front let this host go: %s", m.Refusal)
		return false
	}
	h.mu.Lock()
	h.welcomed = true
	h.mu.Unlock()
	h.beat()
	return true
}

func (h *Host) frontPID() *actor.PID {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.front
}

// frontGone: the remote lost the connection to the front (it died, or a
// message on the way broke it), so answers may have been lost. The host
// drops its registration: no more heartbeats or service under this epoch,
// so the front, if alive, loses it within its bound (every call in flight
// ends indeterminate, once) and joins it again.
func (h *Host) frontGone(who *actor.PID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.front != nil && who.Equal(h.front) && h.welcomed {
		h.welcomed = false
		h.cfg.Logf("the connection to the front at %s was lost: registration %d dropped (the front rejoins)", who.Address, h.epoch)
	}
}

// submits hands each submission of the current epoch to the scheduler; a
// receipt answers each, now for one refused, at its end for one accepted.
func (h *Host) submits(m *wirepb.Submits) {
	epoch, ok := h.serving()
	if !ok {
		return // no front welcomed this host: the front's calls end with its loss
	}
	for _, s := range m.Submits {
		if s == nil {
			continue
		}
		if s.Epoch != epoch {
			continue // sent to a registration the front has since dropped
		}
		h.submit(epoch, s)
	}
}

func (h *Host) submit(epoch uint64, s *wirepb.Submit) {
	var timing *wirepb.Timing
	if s.SentUnixNano != 0 {
		timing = &wirepb.Timing{Received: time.Now().UnixNano()}
	}
	b, ok := h.batchOf(epoch, s)
	if !ok {
		return
	}
	select {
	case h.shards[shardOf(b.Tenant)] <- hostJob{epoch: epoch, call: s.Call, template: s.Template, b: b, timing: timing}:
	case <-h.quit:
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
		}()
	}
}

// batchOf is the submission's batch: inline, or its template (kept from
// an earlier Submit that carried it). A template the host does not hold is
// answered with TemplateUnknown (the front sends it again, whole).
func (h *Host) batchOf(epoch uint64, s *wirepb.Submit) (lanes.Batch, bool) {
	if s.Template == 0 {
		b, err := BatchFromWire(s.Batch)
		if err != nil {
			h.refuse(epoch, s.Call, tenantOf(s), err)
			return b, false
		}
		return b, true
	}
	b, ok := h.templates[s.Template]
	if s.Batch != nil {
		var err error
		if b, err = BatchFromWire(s.Batch); err != nil {
			h.refuse(epoch, s.Call, s.Tenant, err)
			return b, false
		}
		if len(h.templates) < h.cfg.MaxTemplates {
			h.templates[s.Template] = b
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

// send sends a message to the front, with any others queued meanwhile;
// after Stop it is dropped.
func (h *Host) send(o outgoing) {
	select {
	case <-h.quit:
		return
	default:
	}
	h.out.add(o)
}

// sendBatch sends queued receipts as one message, and op results each
// on its own (one sender at a time: it owns the rows the front holds).
func (h *Host) sendBatch(batch []outgoing) {
	h.mu.Lock()
	front := h.front
	h.mu.Unlock()
	if front == nil {
		return
	}
	var rs wirepb.Receipts
	for _, o := range batch {
		if o.receipt == nil {
			h.tell(front, o.result)
			continue
		}
		if o.receipt.Epoch != h.rowsEpoch || h.lastRows == nil {
			h.rowsEpoch, h.lastRows = o.receipt.Epoch, map[uint64][]lanes.Row{}
		}
		encodeRows(o, h.lastRows)
		rs.Receipts = append(rs.Receipts, o.receipt)
	}
	if len(rs.Receipts) > 0 {
		now := time.Now().UnixNano()
		for _, r := range rs.Receipts {
			if r.Timing != nil {
				r.Timing.Sent = now
			}
		}
		h.tell(front, &rs)
	}
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

// beat sends one heartbeat, once a front welcomed this host.
func (h *Host) beat() {
	h.mu.Lock()
	front, epoch, ok := h.front, h.epoch, h.welcomed
	h.heartbeat++
	seq := h.heartbeat
	h.mu.Unlock()
	if ok {
		hb := &wirepb.Heartbeat{Epoch: epoch, Seq: seq, SentUnixNano: time.Now().UnixNano()}
		if err := h.DeviceFault(); err != nil {
			hb.DeviceFault = err.Error()
		}
		h.tell(front, hb)
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
