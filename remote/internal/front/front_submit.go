// A front's submissions: batches (whole, or encoded once and sent by id),
// the room they wait for on the way to their host, and where a tenant is
// placed.

package front

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	laneerr "github.com/lanesched/lanes/internal/laneerr"
	"github.com/lanesched/lanes/internal/schedhook"
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/lanes"

	dataplane "github.com/lanesched/lanes/remote/internal/dataplane"

	system "github.com/lanesched/lanes/remote/internal/system"

	wire "github.com/lanesched/lanes/remote/internal/wire"
)

// SubmitAsync sends a tenant's batch to the tenant's host (placing a new
// tenant on the serving host with the most headroom) and returns its
// Pending. A refusal here is definitely not submitted: a batch with no
// wire form (ErrWire), beyond its host's bounds
// (*actors.BatchTooLargeError), no host serving (ErrNoHost), or a tenant
// whose host was lost (*DeviceStateLostError until it calls Forget). A
// front keeps no table of which tenant allocated which buffer: a batch
// naming a buffer of another tenant on the same host is refused there
// (actors.ErrNotYours), one of a tenant on another host as a handle that
// host never handed out (lanes.ErrInvalidBatch); *lanes.Server, which keeps
// that table, refuses both as not yours.
func (f *Front) SubmitAsync(ctx context.Context, tenant string, b lanes.Batch) (lanes.Pending, error) {
	if err := f.admit(ctx, tenant); err != nil {
		return nil, err
	}
	b.Tenant = tenant
	commands, bytes, largest := schedhook.MeasureBatch(&b)
	size := batchSize{commands, bytes, largest}
	if err := f.checkSize(tenant, size); err != nil { // the host's bounds first, as its scheduler's come first in one process
		return nil, err
	}
	w, err := wire.BatchToWire(b)
	if err != nil {
		return nil, err
	}
	var slots []areaSlot // only uploads that may go through the upload area: none for most steps
	for _, we := range w.Entries {
		if c := we.GetCommand(); c != nil && len(c.Host) >= dataplane.AreaMinUpload {
			slots = append(slots, areaSlot{host: &c.Host, area: &c.Area})
		}
	}
	p, l, epoch, id, err := f.register(ctx, tenant, size, nil, slots)
	if err != nil {
		return nil, err
	}
	l.send(p, p.sample(&wirepb.Submit{Epoch: epoch, Call: id, Batch: w}))
	return p, nil
}

// send queues a submission for its host. One whose caller's context can
// end is withdrawable: when that context ends while it is in flight, a
// Withdraw follows it to the host, by the same way, and the host
// withdraws the batch if it still waits for its lane (it never runs, and
// ends withdrawn, as in one process). A context that cannot end (the
// serving loop's Background) costs nothing here.
func (l *Link) send(p *Pending, s *wirepb.Submit) {
	if p.w == nil {
		l.enqueue(s)
		return
	}
	s.Withdrawable = true
	l.enqueue(s) // first: what the context's end queues goes after it
	epoch, call := s.Epoch, s.Call
	p.w.watching(context.AfterFunc(p.w.ctx, func() {
		select {
		case <-p.done: // ended first: nothing to withdraw
		default:
			l.withdraw(epoch, call, p)
		}
	}))
}

// withdraw tells the host that the caller of a withdrawable submission
// under epoch gave up on it, and why (its context's cause): queued after
// the submission, as operations are, so it reaches the host after it.
func (l *Link) withdraw(epoch, call uint64, p *Pending) {
	deadline := errors.Is(p.w.ctx.Err(), context.DeadlineExceeded)
	l.out.Add(frontOut{op: &wirepb.Withdraw{Epoch: epoch, Call: call, Tenant: p.tenant, Deadline: deadline}, epoch: epoch})
	if fn := AfterWithdraw.Load(); fn != nil {
		(*fn)(p)
	}
}

// afterWithdraw, set by a test, runs once a Withdraw was queued for its
// host: what the caller queues after goes after it.
var AfterWithdraw atomic.Pointer[func(*Pending)]

// Encoded is a batch encoded once for the wire, to submit many times
// (SubmitEncoded): a serving loop's step. Each host receives it whole
// once per registration and by its id after that, and leaves out the rows
// of a receipt equal to the previous one's.
type Encoded struct {
	id   uint64
	wire *wirepb.Batch
	size batchSize // its commands and upload bytes, as a host's bounds measure them
}

// batchSize is what a host's batch bounds measure of a batch
// (schedhook.MeasureBatch): its commands, its upload bytes, its largest
// upload.
type batchSize struct {
	commands       int
	bytes, largest int64
}

var encodedIDs atomic.Uint64

// Encode encodes a batch for SubmitEncoded. The batch's Tenant is ignored
// (each submission names its tenant); a batch with no wire form is
// refused (ErrWire).
func (f *Front) Encode(b lanes.Batch) (*Encoded, error) {
	b.Tenant = ""
	if len(b.Entries) == 0 {
		return nil, wire.WireErr("a batch with no entries: give it the step's commands")
	}
	w, err := wire.BatchToWire(b)
	if err != nil {
		return nil, err
	}
	commands, bytes, largest := schedhook.MeasureBatch(&b)
	return &Encoded{id: encodedIDs.Add(1), wire: w, size: batchSize{commands, bytes, largest}}, nil
}

// SubmitEncoded is SubmitAsync of an encoded batch.
//
// Inputs, if given, are this submission's own bytes for some of the
// batch's uploads (a serving step's new input): they cross with the
// submission while the rest of the batch crosses once per host, each the
// length of the upload it replaces; the front reads them until the call
// ends. A bad input (an entry that is no upload, another length, the same
// entry twice) is refused before anything is sent (lanes.ErrInvalidBatch).
func (f *Front) SubmitEncoded(ctx context.Context, tenant string, e *Encoded, inputs ...Input) (lanes.Pending, error) {
	if e == nil || e.wire == nil {
		return nil, fmt.Errorf("%w: a nil or zero Encoded: make one with Front.Encode", wire.ErrConfig)
	}
	wired, err := e.inputsToWire(inputs)
	if err != nil {
		return nil, err
	}
	if err := f.admit(ctx, tenant); err != nil {
		return nil, err
	}
	var slots []areaSlot
	for _, in := range wired {
		if len(in.Host) >= dataplane.AreaMinUpload {
			slots = append(slots, areaSlot{host: &in.Host, area: &in.Area})
		}
	}
	p, l, epoch, id, err := f.register(ctx, tenant, e.size, e, slots)
	if err != nil {
		return nil, err
	}
	s := &wirepb.Submit{Epoch: epoch, Call: id, Template: e.id, Tenant: tenant, Inputs: wired}
	if !l.holds(epoch, e.id) {
		s.Batch = e.wire
	}
	l.send(p, p.sample(s))
	return p, nil
}

// Input is one submission's bytes for an upload of an Encoded batch
// (SubmitEncoded): a serving step's new input.
type Input struct {
	Entry int    // the index, in the batch given to Encode, of an upload entry
	Bytes []byte // exactly as many bytes as that upload; read until the call ends
}

// inputsToWire checks a submission's inputs against the template's
// uploads and puts them in wire form.
func (e *Encoded) inputsToWire(inputs []Input) ([]*wirepb.Input, error) {
	if len(inputs) == 0 {
		return nil, nil
	}
	bad := func(i int, format string, args ...any) error {
		return laneerr.Wrap("remote", true, fmt.Errorf("%w: input %d: "+format, append([]any{lanes.ErrInvalidBatch, i}, args...)...))
	}
	out := make([]*wirepb.Input, 0, len(inputs))
	seen := map[int]bool{}
	for i, in := range inputs {
		switch {
		case in.Entry < 0 || in.Entry >= len(e.wire.Entries):
			return nil, bad(i, "entry %d of a batch of %d entries", in.Entry, len(e.wire.Entries))
		case seen[in.Entry]:
			return nil, bad(i, "entry %d is given bytes twice", in.Entry)
		}
		c := e.wire.Entries[in.Entry].GetCommand()
		switch {
		case cuda.CommandKind(c.GetKind()) != cuda.KindUpload:
			return nil, bad(i, "entry %d is a %v command, not an upload", in.Entry, cuda.CommandKind(c.GetKind()))
		case len(in.Bytes) != len(c.GetHost()):
			return nil, bad(i, "%d bytes for entry %d, whose upload is %d bytes", len(in.Bytes), in.Entry, len(c.GetHost()))
		}
		seen[in.Entry] = true
		out = append(out, &wirepb.Input{Entry: uint32(in.Entry), Host: in.Bytes})
	}
	return out, nil
}

// sample marks one submission in SampleEvery to carry its times there
// and back (HostStatus.RoundTrip).
func (p *Pending) sample(s *wirepb.Submit) *wirepb.Submit {
	if s.Call%SampleEvery == 0 {
		s.SentUnixNano = time.Now().UnixNano()
		p.sentAt.Store(s.SentUnixNano)
	}
	return s
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
	if err := p.(*Pending).wait(ctx); err != nil {
		return lanes.Receipt{Tenant: tenant, Lane: -1}, err
	}
	return p.Result()
}

// admit is every call's first checks: a front stopped answers stopped
// before anything else (as the front door does); then a live context and a
// tenant name a host takes.
func (f *Front) admit(ctx context.Context, tenant string) error {
	if f == nil || f.quit == nil {
		return errNotStarted
	}
	if f.stopped.Load() {
		return wire.ErrStopped
	}
	switch {
	case ctx == nil:
		return errNilContext
	case ctx.Err() != nil:
		return laneerr.Wrap("remote", true, ctx.Err()) // nothing was sent
	case tenant == "" || len(tenant) > wire.MaxTenantName:
		return laneerr.Wrap("remote", true, fmt.Errorf("%w: the name is %d bytes; a front takes 1 to %d (lanes.MaxTenantName)", actors.ErrInvalidTenant, len(tenant), wire.MaxTenantName))
	}
	if err := schedhook.CheckTenant(tenant); err != nil {
		return laneerr.Wrap("remote", true, err) // the host would refuse it, naming it as it scopes it
	}
	return nil
}

// errNilContext is a call given no context: a bad argument (ErrConfig's
// class), errors.Is actors.ErrInvalidArgument as the scheduler's answer is.
var errNilContext = fmt.Errorf("%w: %w: a nil context.Context; pass context.Background() or a real context", wire.ErrConfig, actors.ErrInvalidArgument)

// register places the tenant and opens a call to its host for a
// submission of that many upload bytes: its Pending, the host, its epoch
// and the call's id. The call's own upload bytes (slots: a batch's
// uploads, a template's inputs) are written into the upload area of the
// host's data plane when it has room (see HostConfig.UploadAreaBytes).
func (f *Front) register(ctx context.Context, tenant string, size batchSize, enc *Encoded, slots []areaSlot) (*Pending, *Link, uint64, uint64, error) {
	if enc != nil { // SubmitAsync checked its batch before it encoded it
		if err := f.checkSize(tenant, size); err != nil {
			return nil, nil, 0, 0, err
		}
	}
	bytes := size.bytes
	if bytes > system.MaxBytesInFlight {
		return nil, nil, 0, 0, wire.TooLarge("%d bytes of uploads in one call; at most %d: split it", bytes, system.MaxBytesInFlight)
	}
	pl, err := f.place(tenant)
	if err != nil {
		return nil, nil, 0, 0, err
	}
	l, epoch := pl.link, pl.epoch
	if err := refuseLeaving(tenant, l, epoch); err != nil {
		return nil, nil, 0, 0, err
	}
	pl.calls.Add(1) // before the call exists: Forget refuses from here on
	p, id, err := f.newCall(ctx, l, epoch, tenant, bytes, false, func(p *Pending) {
		p.placed, p.enc = pl, enc
		if ctx.Done() != nil {
			p.w = &withdrawable{ctx: ctx} // see send
		}
		if len(slots) > 0 {
			l.intoArea(epoch, slots, p)
		}
	})
	if err != nil {
		pl.calls.Add(-1)
		return nil, nil, 0, 0, err
	}
	return p, l, epoch, id, nil
}

// newCall waits for room for the call's bytes on the way to or from the
// host, and records the call in flight on the host under epoch: its
// Pending and its id. A host no longer serving that epoch means the
// tenant's state is gone. A read's bytes (reading) come back ahead of the
// host's heartbeats: the host's silence bound grows by them
// (readAllowance). No lock is shared by every call here: the
// in-flight table refuses an epoch lost (and ends what it holds of it), so
// a call is either recorded before the loss and ended by it, or refused.
//
// set, if given, fills in the call before it is recorded: from then on a
// loss may end it on another goroutine.
func (f *Front) newCall(ctx context.Context, l *Link, epoch uint64, tenant string, bytes int64, reading bool, set func(*Pending)) (*Pending, uint64, error) {
	if !l.servingUnder(epoch) {
		return nil, 0, l.stateLost(tenant, epoch)
	}
	p := &Pending{done: make(chan struct{}), tenant: tenant, host: l.Name}
	if bytes > 0 {
		if err := l.bytes.Acquire(ctx, bytes); err != nil {
			return nil, 0, fmt.Errorf("remote: waiting for room for %d bytes on the way to or from host %s: %w (definitely not submitted)", bytes, l.Name, err)
		}
		counted := &l.uploadBytes // the bytes' way: uploads to the host, reads from it
		if reading {
			counted = &l.readBytes
		}
		counted.Add(bytes)
		p.release = func() { counted.Add(-bytes); l.bytes.Release(bytes) }
	}
	if set != nil {
		set(p)
	}
	id, ok := f.calls.Add(l.Name, epoch, p)
	if !ok || !l.servingUnder(epoch) {
		if ok {
			if _, mine := f.calls.Settle(l.Name, epoch, id); !mine {
				return p, id, nil // the loss took it first: it ends with the loss
			}
		}
		if p.release != nil {
			p.release()
		}
		return nil, 0, l.stateLost(tenant, epoch)
	}
	return p, id, nil
}

// checkSize refuses a batch beyond the bounds of the tenant's host (where
// it is placed; a tenant that cannot be placed is refused later, by
// register).
func (f *Front) checkSize(tenant string, size batchSize) error {
	pl, err := f.place(tenant)
	if err != nil {
		return nil
	}
	return pl.link.checkSize(size)
}

// checkSize refuses a batch beyond the host's bounds, as its scheduler
// would (a *actors.BatchTooLargeError, not submitted): at once, not at
// the call's end.
func (l *Link) checkSize(size batchSize) error {
	entries, bytes := l.maxEntries.Load(), l.maxBytes.Load()
	if entries == 0 || bytes == 0 || int64(size.commands) <= entries && size.bytes <= bytes {
		return nil
	}
	return laneerr.Wrap("submit", true, &actors.BatchTooLargeError{Entries: size.commands, MaxEntries: int(entries), Bytes: size.bytes, MaxBytes: bytes, Largest: size.largest})
}

// roomier reports whether host a has more headroom for a new tenant than
// b: fewer tenants per lane, then fewer calls in flight per lane.
func roomier(a, b HostStatus) bool {
	al, bl := max(a.Lanes, 1), max(b.Lanes, 1)
	if x, y := a.Tenants*bl, b.Tenants*al; x != y {
		return x < y
	}
	return a.InFlight*bl < b.InFlight*al
}

// placed is a placed tenant's placement, while its host serves it.
func placed(tenant string, pl *placement) (*placement, error) {
	if !pl.link.servingUnder(pl.epoch) {
		return nil, pl.link.stateLost(tenant, pl.epoch)
	}
	return pl, nil
}

// refuseLeaving refuses new work (a submission, an allocation) for a
// tenant whose host is leaving.
func refuseLeaving(tenant string, l *Link, epoch uint64) error {
	if l.leavingUnder(epoch) {
		return &wire.HostLeavingError{Tenant: tenant, Host: l.Name}
	}
	return nil
}

// takesTenants reports whether the host, st its status, takes new
// tenants: it serves, and is neither leaving nor gone from its cluster.
func (l *Link) takesTenants(st HostStatus) bool {
	return st.Health == HostServing && !l.leavingUnder(st.Epoch) && !l.unlisted()
}

// maxRemembered bounds the forgotten tenants whose host the front
// remembers.
const maxRemembered = 1 << 16

// place is the tenant's placement: where it was placed, or, for a new
// tenant, the host it was on before it was forgotten if that host serves
// (a tenant does not wander), else the serving host with the most
// headroom (roomier). A host that registers takes new tenants at once.
func (f *Front) place(tenant string) (*placement, error) {
	f.mu.RLock()
	pl, ok := f.tenants[tenant]
	f.mu.RUnlock()
	if ok {
		return placed(tenant, pl)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if pl, ok := f.tenants[tenant]; ok {
		return placed(tenant, pl)
	}
	var best *Link
	var bestSt HostStatus
	if l, ok := f.last[tenant]; ok {
		if st := l.Status(); l.takesTenants(st) {
			best, bestSt = l, st // a tenant that starts over stays where it was
		}
	}
	if best == nil {
		for _, l := range f.AllLinks() {
			st := l.Status()
			if !l.takesTenants(st) {
				continue
			}
			st.InFlight = f.calls.InFlight(l.Name, st.Epoch)
			if best == nil || roomier(st, bestSt) {
				best, bestSt = l, st
			}
		}
	}
	if best == nil {
		return nil, fmt.Errorf("%w: every host is lost, restarting or not yet registered; retry (definitely not submitted)", wire.ErrNoHost)
	}
	pl = &placement{link: best, epoch: bestSt.Epoch}
	f.tenants[tenant] = pl
	delete(f.last, tenant)
	best.mu.Lock()
	best.tenants++
	best.mu.Unlock()
	return pl, nil
}
