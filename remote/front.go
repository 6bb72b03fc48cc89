// The front: a scheduler whose lanes live in lane host processes. It
// places tenants on hosts, sends their batches and device-state calls, and
// ends every call exactly once: by its host's answer, or when the host is
// lost.

package remote

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote/wirepb"
)

// FrontActor is the name of a front's actor: hosts answer it at the
// front's address and this name.
const FrontActor = "lanefront"

// FrontConfig configures a front.
type FrontConfig struct {
	// Hosts are addresses (host:port) of lane hosts already running; the
	// front joins each and keeps joining it after a loss.
	Hosts []string
	// Launch are lane host processes the front starts itself, one per
	// entry, and restarts when they die or hang.
	Launch []Launch
	// Address is where the front listens for its hosts' answers; empty:
	// DefaultAddress. Any address that is not loopback requires TLS.
	Address string
	// TLS secures every connection both ways (LoadTLS); nil: plain, and
	// every host address must then be loopback.
	TLS *tls.Config
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
	// Logf hears what no call answers (a host lost, restarted, refused);
	// nil: standard error.
	Logf func(format string, args ...any)
}

// Launch is a lane host process a front starts: Path with Args, to which
// the front adds --name Name and --exit-with-stdin. The process must print
// "lanehost: listening on ADDRESS" as its first line on standard output
// (cmd/lanehost does).
type Launch struct {
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
	cfg   FrontConfig
	sys   *system
	pid   *actor.PID
	calls Calls[*Pending]
	links []*link

	mu      sync.Mutex
	tenants map[string]*placement
	last    map[string]*link // where a forgotten tenant was: placed there again while it serves
	stopped bool

	quit chan struct{}
	wg   sync.WaitGroup
}

// placement is where a tenant's device state lives: one host, under one
// epoch.
type placement struct {
	link  *link
	epoch uint64
}

// StartFront starts a front, joins (or launches) its hosts and returns
// once every host registered. A host that refuses or is refused (another
// protocol version) fails the start with ErrRefused; one that does not
// register within JoinTimeout fails it with ErrNoHost.
func StartFront(ctx context.Context, cfg FrontConfig) (*Front, error) {
	if ctx == nil {
		return nil, fmt.Errorf("%w: a nil context", ErrConfig)
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	sys, err := acquireSystem(cfg.Address, cfg.TLS, FrontActor)
	if err != nil {
		return nil, err
	}
	f := &Front{cfg: cfg, sys: sys, tenants: map[string]*placement{}, last: map[string]*link{}, quit: make(chan struct{})}
	for _, a := range cfg.Hosts {
		f.links = append(f.links, newLink(f, a, nil))
	}
	for i := range cfg.Launch {
		f.links = append(f.links, newLink(f, cfg.Launch[i].Name, &cfg.Launch[i]))
	}
	f.pid, err = sys.actors.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return &frontActor{f: f} }), FrontActor)
	if err != nil {
		releaseSystem(sys, FrontActor, nil)
		return nil, fmt.Errorf("%w: spawn the front actor: %v", ErrConfig, err)
	}
	for _, l := range f.links {
		f.wg.Add(1)
		go l.supervise()
	}
	f.wg.Add(1)
	go f.watchSilence()
	if err := f.awaitRegistration(ctx); err != nil {
		_ = f.Stop(context.Background())
		return nil, err
	}
	return f, nil
}

func (c *FrontConfig) check() error {
	if len(c.Hosts)+len(c.Launch) == 0 {
		return fmt.Errorf("%w: no hosts: give host addresses or processes to launch", ErrConfig)
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
	if c.Logf == nil {
		c.Logf = func(format string, args ...any) { fmt.Fprintf(os.Stderr, "lanes front: "+format+"\n", args...) }
	}
	switch {
	case c.LostAfter < 10*time.Millisecond || c.LostAfter > time.Minute:
		return fmt.Errorf("%w: LostAfter %v: give 10ms to 1m (a few of the hosts' heartbeats)", ErrConfig, c.LostAfter)
	case c.JoinTimeout < 0 || c.RestartBackoff < 0:
		return fmt.Errorf("%w: negative JoinTimeout or RestartBackoff", ErrConfig)
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
			return fmt.Errorf("%w: host %s listed twice: a host serves one front, once", ErrConfig, a)
		}
		names[a] = true
	}
	for _, l := range c.Launch {
		if l.Name == "" || l.Path == "" || names[l.Name] {
			return fmt.Errorf("%w: launch %q: give each launched host a distinct name and a path", ErrConfig, l.Name)
		}
		names[l.Name] = true
	}
	return nil
}

// awaitRegistration waits until every host registered, one refused, or
// JoinTimeout passed.
func (f *Front) awaitRegistration(ctx context.Context) error {
	deadline := time.NewTimer(f.cfg.JoinTimeout)
	defer deadline.Stop()
	for _, l := range f.links {
		select {
		case <-l.firstAnswer:
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("%w: host %s did not register within %v", ErrNoHost, l.name, f.cfg.JoinTimeout)
		}
		if st := l.status(); st.State == HostRefused {
			return fmt.Errorf("%w: host %s: %s", ErrRefused, l.name, st.Refusal)
		}
		if err := l.launchFailure(); err != nil {
			return fmt.Errorf("%w: host %s would not start: %v", ErrConfig, l.name, err)
		}
	}
	return nil
}

// Address is where the front listens for its hosts.
func (f *Front) Address() string { return f.sys.addr }

// SubmitAsync sends a tenant's batch to the tenant's host (placing a new
// tenant on the serving host with the fewest tenants) and returns its
// Pending. A refusal here is definitely not submitted: a batch with no
// wire form (ErrWire), no host serving (ErrNoHost), or a tenant whose host
// was lost (*DeviceStateLostError until it calls Forget).
func (f *Front) SubmitAsync(ctx context.Context, tenant string, b lanes.Batch) (*Pending, error) {
	if err := f.admit(ctx, tenant); err != nil {
		return nil, err
	}
	b.Tenant = tenant
	w, err := BatchToWire(b)
	if err != nil {
		return nil, err
	}
	p, l, epoch, id, err := f.register(ctx, tenant, uploadBytes(b))
	if err != nil {
		return nil, err
	}
	l.enqueue(&wirepb.Submit{Epoch: epoch, Call: id, Batch: w})
	return p, nil
}

// Encoded is a batch encoded once for the wire, to submit many times
// (SubmitEncoded): a serving loop's step. Each host receives it whole
// once per registration and by its id after that, and leaves out the rows
// of a receipt equal to the previous one's.
type Encoded struct {
	id    uint64
	wire  *wirepb.Batch
	bytes int64 // its upload bytes
}

var encodedIDs atomic.Uint64

// Encode encodes a batch for SubmitEncoded. The batch's Tenant is ignored
// (each submission names its tenant); a batch with no wire form is
// refused (ErrWire).
func (f *Front) Encode(b lanes.Batch) (*Encoded, error) {
	b.Tenant = ""
	if len(b.Entries) == 0 {
		return nil, wireErr("a batch with no entries: give it the step's commands")
	}
	w, err := BatchToWire(b)
	if err != nil {
		return nil, err
	}
	return &Encoded{id: encodedIDs.Add(1), wire: w, bytes: uploadBytes(b)}, nil
}

// SubmitEncoded is SubmitAsync of an encoded batch.
func (f *Front) SubmitEncoded(ctx context.Context, tenant string, e *Encoded) (*Pending, error) {
	if e == nil || e.wire == nil {
		return nil, fmt.Errorf("%w: a nil or zero Encoded: make one with Front.Encode", ErrConfig)
	}
	if err := f.admit(ctx, tenant); err != nil {
		return nil, err
	}
	p, l, epoch, id, err := f.register(ctx, tenant, e.bytes)
	if err != nil {
		return nil, err
	}
	p.enc = e
	s := &wirepb.Submit{Epoch: epoch, Call: id, Template: e.id, Tenant: tenant}
	if !l.holds(epoch, e.id) {
		s.Batch = e.wire
	}
	l.enqueue(s)
	return p, nil
}

// Submit is SubmitAsync, then waiting for its end (or ctx). It returns the
// receipt and its error: a host's error as a *PeerError with its code, a
// host lost with the batch in flight as a *HostLostError (errors.Is
// actors.ErrIndeterminate).
func (f *Front) Submit(ctx context.Context, tenant string, b lanes.Batch) (lanes.Receipt, error) {
	p, err := f.SubmitAsync(ctx, tenant, b)
	if err != nil {
		return lanes.Receipt{Outcome: lanes.OutcomeRefused, Err: err, Tenant: tenant, Lane: -1}, err
	}
	if err := p.wait(ctx); err != nil {
		return lanes.Receipt{Tenant: tenant, Lane: -1}, err
	}
	return p.Result()
}

func (f *Front) admit(ctx context.Context, tenant string) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("%w: a nil context", ErrConfig)
	case ctx.Err() != nil:
		return ctx.Err()
	case tenant == "" || len(tenant) > 256:
		return fmt.Errorf("%w: tenant name of %d bytes: give 1 to 256", ErrConfig, len(tenant))
	}
	if f == nil || f.quit == nil {
		return ErrStopped // not a front StartFront returned
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return ErrStopped
	}
	return nil
}

// register places the tenant, waits for room for the call's bytes on the
// way to its host, and records the call: its Pending, the host, its epoch
// and the call's id.
func (f *Front) register(ctx context.Context, tenant string, bytes int64) (*Pending, *link, uint64, uint64, error) {
	if bytes > maxBytesInFlight {
		return nil, nil, 0, 0, wireErr("%d bytes of uploads in one call; at most %d: split it (definitely not submitted)", bytes, maxBytesInFlight)
	}
	l, epoch, err := f.place(tenant)
	if err != nil {
		return nil, nil, 0, 0, err
	}
	if err := l.bytes.Acquire(ctx, bytes); err != nil {
		return nil, nil, 0, 0, fmt.Errorf("remote: waiting for room for %d bytes to host %s: %w (definitely not submitted)", bytes, l.name, err)
	}
	p := &Pending{done: make(chan struct{}), tenant: tenant, host: l.name}
	if bytes > 0 {
		p.release = func() { l.bytes.Release(bytes) }
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != HostServing || l.epoch != epoch {
		if p.release != nil {
			p.release()
		}
		return nil, nil, 0, 0, &DeviceStateLostError{Tenant: tenant, Host: l.name, Epoch: epoch}
	}
	return p, l, epoch, f.calls.Add(l.name, epoch, p), nil
}

// uploadBytes is the bytes a batch's uploads carry.
func uploadBytes(b lanes.Batch) (n int64) {
	for _, e := range b.Entries {
		n += int64(len(e.Command.Host))
	}
	return n
}

// maxRemembered bounds the forgotten tenants whose host the front
// remembers.
const maxRemembered = 1 << 16

// place is the tenant's host and epoch: where it was placed, or, for a
// new tenant, the host it was on before it was forgotten if that host
// serves, else the serving host with the fewest tenants.
func (f *Front) place(tenant string) (*link, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if pl, ok := f.tenants[tenant]; ok {
		st := pl.link.status()
		if st.State != HostServing || st.Epoch != pl.epoch {
			return nil, 0, &DeviceStateLostError{Tenant: tenant, Host: pl.link.name, Epoch: pl.epoch}
		}
		return pl.link, pl.epoch, nil
	}
	var best *link
	var bestEpoch uint64
	bestTenants := 0
	if l, ok := f.last[tenant]; ok {
		if st := l.status(); st.State == HostServing {
			best, bestEpoch, bestTenants = l, st.Epoch, -1 // a tenant that starts over stays where it was
		}
	}
	for _, l := range f.links {
		if bestTenants < 0 {
			break
		}
		st := l.status()
		if st.State != HostServing {
			continue
		}
		if best == nil || st.Tenants < bestTenants {
			best, bestEpoch, bestTenants = l, st.Epoch, st.Tenants
		}
	}
	if best == nil {
		return nil, 0, fmt.Errorf("%w: every host is lost, restarting or not yet registered; retry (definitely not submitted)", ErrNoHost)
	}
	f.tenants[tenant] = &placement{link: best, epoch: bestEpoch}
	delete(f.last, tenant)
	best.mu.Lock()
	best.tenants++
	best.mu.Unlock()
	return best, bestEpoch, nil
}

// InFlight is the number of calls in flight on every host: each ends once,
// by its host's answer or by the host's loss.
func (f *Front) InFlight() int { return f.calls.Len() }

// Placement names the host a tenant was placed on, if it was.
func (f *Front) Placement(tenant string) (host string, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	pl, ok := f.tenants[tenant]
	if !ok {
		return "", false
	}
	return pl.link.name, true
}

// Forget drops a tenant: on its host (its buffers freed) if the host still
// holds its state, and its placement here, so its next call places it
// afresh. After a lost host this is how a tenant starts over.
func (f *Front) Forget(ctx context.Context, tenant string) error {
	if err := f.admit(ctx, tenant); err != nil {
		return err
	}
	f.mu.Lock()
	pl, ok := f.tenants[tenant]
	if ok {
		delete(f.tenants, tenant)
		if len(f.last) < maxRemembered {
			f.last[tenant] = pl.link
		}
		pl.link.mu.Lock()
		pl.link.tenants--
		pl.link.mu.Unlock()
	}
	f.mu.Unlock()
	if !ok {
		return nil
	}
	st := pl.link.status()
	if st.State != HostServing || st.Epoch != pl.epoch {
		return nil // its state went with the host
	}
	_, err := f.op(ctx, pl.link, pl.epoch, tenant, 0, func(call uint64) any {
		return &wirepb.Forget{Epoch: pl.epoch, Call: call, Tenant: tenant}
	})
	return err
}

// Alloc allocates device memory for the tenant on its host (placing a new
// tenant), owned by the tenant there.
func (f *Front) Alloc(ctx context.Context, tenant string, spec cuda.BufferSpec) (cuda.Buffer, error) {
	if err := f.admit(ctx, tenant); err != nil {
		return cuda.Buffer{}, err
	}
	l, epoch, err := f.place(tenant)
	if err != nil {
		return cuda.Buffer{}, err
	}
	res, err := f.op(ctx, l, epoch, tenant, 0, func(call uint64) any {
		return &wirepb.Alloc{Epoch: epoch, Call: call, Tenant: tenant, Size: spec.Size, Align: spec.Align, Elem: uint32(spec.Elem)}
	})
	if err != nil {
		return cuda.Buffer{}, err
	}
	return bufferFromWire(res.Buffer)
}

// Free frees a buffer the tenant allocated through Alloc.
func (f *Front) Free(ctx context.Context, tenant string, b cuda.Buffer) error {
	if err := f.admit(ctx, tenant); err != nil {
		return err
	}
	l, epoch, err := f.place(tenant)
	if err != nil {
		return err
	}
	_, err = f.op(ctx, l, epoch, tenant, 0, func(call uint64) any {
		return &wirepb.Free{Epoch: epoch, Call: call, Tenant: tenant, Buffer: bufferToWire(b)}
	})
	return err
}

// Read copies a region of the tenant's buffer back, after the tenant's
// submissions the host received before it.
func (f *Front) Read(ctx context.Context, tenant string, r cuda.Region) ([]byte, error) {
	if err := f.admit(ctx, tenant); err != nil {
		return nil, err
	}
	if r.Length == 0 || r.Length > MaxReadBytes {
		return nil, wireErr("a read of %d bytes: read 1 to %d at a time", r.Length, uint64(MaxReadBytes))
	}
	l, epoch, err := f.place(tenant)
	if err != nil {
		return nil, err
	}
	res, err := f.op(ctx, l, epoch, tenant, int64(r.Length), func(call uint64) any {
		return &wirepb.Read{Epoch: epoch, Call: call, Tenant: tenant, Region: regionToWire(r)}
	})
	if err != nil {
		return nil, err
	}
	return res.Data, nil
}

// op sends one device-state operation to the tenant's host and waits for
// its result (or the host's loss, or ctx).
func (f *Front) op(ctx context.Context, l *link, epoch uint64, tenant string, bytes int64, msg func(call uint64) any) (*wirepb.OpResult, error) {
	if err := l.bytes.Acquire(ctx, bytes); err != nil {
		return nil, fmt.Errorf("remote: waiting for room for %d bytes from host %s: %w (definitely not submitted)", bytes, l.name, err)
	}
	p := &Pending{done: make(chan struct{}), tenant: tenant, host: l.name}
	if bytes > 0 {
		p.release = func() { l.bytes.Release(bytes) }
	}
	l.mu.Lock()
	if l.state != HostServing || l.epoch != epoch {
		l.mu.Unlock()
		if p.release != nil {
			p.release()
		}
		return nil, &DeviceStateLostError{Tenant: tenant, Host: l.name, Epoch: epoch}
	}
	id := f.calls.Add(l.name, epoch, p)
	pid := l.pid
	l.mu.Unlock()
	f.sys.actors.Root.Send(pid, msg(id))
	if err := p.wait(ctx); err != nil {
		return nil, err
	}
	if p.err != nil {
		return nil, p.err
	}
	return p.result, nil
}

// Stop stops the front: new calls are refused with ErrStopped; calls in
// flight get until ctx ends to finish, then end indeterminate; launched
// hosts are stopped.
func (f *Front) Stop(ctx context.Context) error {
	if f == nil || f.quit == nil {
		return ErrStopped // not a front StartFront returned
	}
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return nil
	}
	f.stopped = true
	f.mu.Unlock()
	for f.calls.Len() > 0 && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	close(f.quit)
	for _, l := range f.links {
		l.stopLink()
	}
	f.wg.Wait()
	releaseSystem(f.sys, FrontActor, f.pid)
	if ctx.Err() != nil {
		return fmt.Errorf("remote: stop: %w (calls still in flight ended indeterminate)", ctx.Err())
	}
	return nil
}

// Pending is a call in flight on a lane host.
type Pending struct {
	enc     *Encoded // the template, if it was submitted encoded
	release func()   // gives back the call's bytes in flight
	done    chan struct{}
	tenant  string
	host    string
	r       lanes.Receipt
	err     error
	result  *wirepb.OpResult
}

// Done is closed when the call ended.
func (p *Pending) Done() <-chan struct{} { return p.done }

// Host is the name of the host the call went to.
func (p *Pending) Host() string { return p.host }

// Result is the call's receipt and error, once Done is closed.
func (p *Pending) Result() (lanes.Receipt, error) {
	<-p.done
	return p.r, p.err
}

// wait waits for the end or ctx; a ctx that ends first detaches.
func (p *Pending) wait(ctx context.Context) error {
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		select {
		case <-p.done:
			return nil
		default:
		}
		return fmt.Errorf("remote: stopped waiting (the call is still in flight on %s): %w", p.host, ctx.Err())
	}
}

// end ends the call; the in-flight table makes it once.
func (p *Pending) end(r lanes.Receipt, err error, res *wirepb.OpResult) {
	if p.release != nil {
		p.release()
	}
	p.r, p.err, p.result = r, err, res
	close(p.done)
}

// lost ends a call whose host was lost.
func (p *Pending) lost(e *HostLostError) {
	p.end(lanes.Receipt{Outcome: lanes.OutcomeIndeterminate, Err: e, Tenant: p.tenant, Lane: -1}, e, nil)
}

// opError is the error of an op's result, or nil.
func opError(res *wirepb.OpResult) error {
	if res.ErrorCode == 0 && res.Error == "" {
		return nil
	}
	msg := res.Error
	if msg == "" {
		msg = fmt.Sprintf("remote: lane host reported %v without a message", cuda.Code(res.ErrorCode))
	}
	return &PeerError{Code: cuda.Code(res.ErrorCode), Msg: msg}
}
