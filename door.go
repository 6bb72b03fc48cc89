package lanes

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/codes"
	"github.com/lanesched/lanes/internal/lanecore"
	laneerr "github.com/lanesched/lanes/internal/laneerr"
	"github.com/lanesched/lanes/internal/notstarted"
	"github.com/lanesched/lanes/internal/schedhook"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
	"github.com/lanesched/lanes/remote"
)

// MaxProgramName is the longest program name (programs.ID.Name) a batch
// through the front door may declare, in bytes: the same in process and on
// lane hosts (a host scopes each front's program names within
// programs.MaxIDBytes).
const MaxProgramName = programs.MaxIDBytes - 16

// MaxTenantName is the longest tenant name the front door takes, in bytes:
// the same in process and on lane hosts (a front keeps 16 bytes of
// actors.MaxTenantName to scope names per front), so a name that works in
// one works in the other.
const MaxTenantName = actors.MaxTenantName - 16

// errNilContext answers a call given a nil context, on both sides.
var errNilContext = fmt.Errorf("%w: a nil context.Context; pass context.Background() or a real context", actors.ErrInvalidArgument)

// piece bounds one upload or read submission's bytes: within every side's
// batch and read bounds, a multiple of every element's size.
const piece = 8 << 20

// side is where a server's work runs: the in-process scheduler or a
// front. The server checks every call the same way before it reaches
// either, and keeps which tenant allocated which buffer.
type side interface {
	alloc(ctx context.Context, tenant string, spec BufferSpec) (Buffer, error)
	read(ctx context.Context, tenant string, src Region) ([]byte, error)
	free(ctx context.Context, tenant string, b Buffer) error
	// forget forgets the tenant on its side; the buffers the server
	// recorded for it are given (the in-process side frees them).
	forget(ctx context.Context, tenant string, bufs []Buffer) error
	submit(ctx context.Context, tenant string, b Batch) (Receipt, error)
	submitAsync(ctx context.Context, tenant string, b Batch) (Pending, error)
	// check says whether b is a live buffer this side can name (nil when
	// only the far side can tell).
	check(b Buffer) error
	// checksBatches: the side cannot tell another tenant's buffer in a
	// batch from one it never handed out (a front's tenants live on
	// several hosts): the server checks batches against its owner table.
	checksBatches() bool
	kernels() Kernels
	status() Status
	stop(ctx context.Context) error
	scheduler() *actors.Scheduler
	front() *remote.Front
}

// Server serves tenants' work: an in-process scheduler over devices of
// this process, or a front to lane host processes. Both keep each tenant's
// buffers its own, run its batches in the order it submitted them on one
// lane, and end every accepted submission exactly once. It is safe for
// concurrent use. Use the *Server that Start returns: a nil or zero
// Server serves nothing (its calls answer stopped; Status, Kernels and Raw
// are zero).
//
// In process and on lane hosts are its two sides, checked alike before
// either is reached: a call answers the same on both (parity_test.go runs
// every case on both and compares).
type Server struct {
	side side
	// stopping: Stop was called; every call answers stopped before any
	// other check, on both sides.
	stopping atomic.Bool

	// freeing serializes Free's and Forget's frees, so that a buffer is
	// freed once whichever of them comes first.
	freeing sync.Mutex
	mu      sync.RWMutex
	owners  map[Buffer]string          // each buffer the server allocated, by its tenant
	bufs    map[string]map[Buffer]bool // each tenant's
	// detached are the tenants' Uploads and Frees that go on after their
	// callers stopped waiting (detach): a tenant's later calls wait for
	// them, so that its order holds. detachedN counts them, so that a
	// call of a server with none pays one atomic load.
	detached  map[string]*detachedOp
	detachedN atomic.Int32
	// ongoing counts the Uploads and Frees going on, detached or not
	// (begin): Stop waits for them, so that they end as they would have,
	// on both sides. idle is closed when the last ends after Stop.
	ongoing int
	idle    chan struct{}
}

func newServer(s side) *Server {
	return &Server{side: s, owners: map[Buffer]string{}, bufs: map[string]map[Buffer]bool{}, detached: map[string]*detachedOp{}}
}

// admit is every call's first check, the same on both sides: a server
// stopped answers stopped before anything else; then a live context, and
// a tenant name both sides take. Submissions leave the name's characters
// and the context's end to their side (checked there once per submission
// already). A tenant with a detached Upload or Free still going on waits
// for it first (detach).
func (s *Server) admit(op string, ctx context.Context, tenant string) error {
	if s.unstarted() {
		return laneerr.Wrap(op, true, errNotStarted)
	}
	if s.stopping.Load() {
		return laneerr.Wrap(op, true, actors.ErrStopped)
	}
	if ctx == nil {
		return laneerr.Wrap(op, true, errNilContext)
	}
	if len(tenant) > MaxTenantName {
		return laneerr.Wrap(op, true, fmt.Errorf("%w: the name is %d bytes; the front door takes 1 to %d (lanes.MaxTenantName, the same in process and on lane hosts)", actors.ErrInvalidTenant, len(tenant), MaxTenantName))
	}
	if op != "submit" {
		if err := ctx.Err(); err != nil {
			return laneerr.Wrap(op, true, err)
		}
		if err := schedhook.CheckTenant(tenant); err != nil {
			return laneerr.Wrap(op, true, err)
		}
	}
	switch op {
	case "alloc", "upload", "free": // an Upload or Free queues behind it (behindDetached)
		return nil
	}
	if s.detachedN.Load() > 0 {
		return s.awaitDetached(op, ctx, tenant)
	}
	return nil
}

// mine checks that b is one of the tenant's: another tenant's is
// ErrNotYours; one the server never handed out is checked by the side
// (a shared buffer, say, or a stale handle).
func (s *Server) mine(op, tenant string, b Buffer) (recorded bool, err error) {
	if b.ID == 0 {
		return false, laneerr.Wrap(op, true, errZeroBuffer(op))
	}
	s.mu.RLock()
	owner, ok := s.owners[b]
	s.mu.RUnlock()
	switch {
	case ok && owner == tenant:
		return true, nil
	case ok:
		return false, laneerr.Wrap(op, true, fmt.Errorf("%w: buffer %d is another tenant's; a tenant may use only its own buffers and shared ones", actors.ErrNotYours, b.ID))
	}
	if err := s.side.check(b); err != nil {
		return false, laneerr.Wrap(op, true, err)
	}
	return false, nil
}

// errZeroBuffer is the one answer to the zero Buffer, whichever call names
// it and on either side: the answer a command naming it gets (a region of
// no allocated buffer, cuda.ErrStaleHandle).
func errZeroBuffer(op string) error {
	return cuda.Contractf(op, cuda.ErrStaleHandle, "the zero Buffer names no buffer; use a Buffer that Alloc returned")
}

// Alloc allocates a buffer that the tenant alone may name, on the
// device (in process) or the host (lane hosts) its work runs on.
func (s *Server) Alloc(ctx context.Context, tenant string, spec BufferSpec) (_ Buffer, err error) {
	defer named(&err)
	if err := s.admit("alloc", ctx, tenant); err != nil {
		return Buffer{}, err
	}
	// Once started an allocation finishes, whatever ctx does: its
	// handle must reach the tenant (an allocation whose answer was lost
	// would be the tenant's, unnamed, until Forget).
	b, err := s.side.alloc(context.WithoutCancel(ctx), tenant, spec)
	if err != nil {
		return Buffer{}, allocError(err)
	}
	s.mu.Lock()
	s.owners[b] = tenant
	if s.bufs[tenant] == nil {
		s.bufs[tenant] = map[Buffer]bool{}
	}
	s.bufs[tenant][b] = true
	s.mu.Unlock()
	return b, nil
}

// allocError classifies a failed allocation: nothing was submitted, and
// a device out of memory is no stream's fault (free buffers, or retry
// when others have).
func allocError(err error) error {
	c := cuda.Classify(err)
	if c.Code != codes.OutOfMemory {
		return err
	}
	return &lanes.Error{Op: "alloc", Code: c.Code, Blame: cuda.BlameNone, Retryable: true, NotSubmitted: true, Err: err}
}

// Upload writes data into dst, a region of the tenant's buffer, after
// the tenant's submissions accepted before it, and waits for it: one
// submission per 8 MiB. Like Submit, it may return a
// *actors.DetachedError when ctx ends while it waits (the write goes
// on).
func (s *Server) Upload(ctx context.Context, tenant string, dst Region, data []byte) (err error) {
	defer named(&err)
	if err := s.admit("upload", ctx, tenant); err != nil {
		return err
	}
	if dst.Buffer.ID == 0 {
		return laneerr.Wrap("upload", true, errZeroBuffer("upload"))
	}
	// The checks an upload command gets, whichever way it comes: bytes
	// that do not match the region are the same mistake in a batch.
	if err := (cuda.Command{Kind: cuda.KindUpload, Dst: dst, Host: data}).Validate(); err != nil {
		return laneerr.Wrap("upload", true, err)
	}
	if _, err := s.mine("upload", tenant, dst.Buffer); err != nil {
		return err
	}
	// Each piece is submitted under a context that does not end with ctx:
	// once the first is accepted, the write is the tenant's, and goes on
	// to its end if ctx ends meanwhile, even while a piece still waits to
	// be admitted (detach).
	work := context.WithoutCancel(ctx)
	return s.goOn("upload", ctx, tenant, func() error { return s.uploadFrom(work, tenant, dst, data, 0) })
}

// goOn runs an Upload's or a Free's work to its end, whatever ctx does:
// behind the tenant's detached operation if it has one, else now; if ctx
// ends first, the caller gets a DetachedError and the work goes on
// (detach). Stop waits for it.
func (s *Server) goOn(op string, ctx context.Context, tenant string, work func() error) error {
	end, err := s.begin(op)
	if err != nil {
		return err
	}
	run := func() error { defer end(); return work() }
	if queued, err := s.behindDetached(ctx, tenant, run); queued {
		return err
	}
	if ctx.Done() == nil {
		return run()
	}
	done := make(chan error, 1)
	go func() { done <- run() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return s.detach(ctx, tenant, func() error { return <-done })
	}
}

// begin counts an Upload or a Free going on until end is called; after
// Stop it answers stopped.
func (s *Server) begin(op string) (end func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping.Load() {
		return nil, laneerr.Wrap(op, true, actors.ErrStopped)
	}
	s.ongoing++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.ongoing--; s.ongoing == 0 && s.idle != nil {
			close(s.idle)
			s.idle = nil
		}
	}, nil
}

// uploadFrom uploads data into dst from off on, a piece at a time, each
// after the one before it ended.
func (s *Server) uploadFrom(ctx context.Context, tenant string, dst Region, data []byte, off int) error {
	for ; off < len(data); off += piece {
		p, err := s.uploadPiece(ctx, tenant, dst, data, off)
		if err == nil {
			err = pieceError(p)
		}
		if err != nil {
			return cutShort(off, len(data), err)
		}
	}
	return nil
}

// cutShort is an Upload's error when its piece at off failed: a later
// piece refused (a Stop whose context ended before the Upload did, say)
// leaves the earlier pieces written, so the Upload as a whole is
// indeterminate, not "not submitted", as a front's call cut by its Stop
// is.
func cutShort(off, total int, err error) error {
	if off == 0 || !cuda.Classify(err).NotSubmitted {
		return err
	}
	return laneerr.Wrap("upload", false, fmt.Errorf("%w: its first %d of %d bytes were written, then the next piece was refused: %w", actors.ErrIndeterminate, off, total, err))
}

// uploadPiece submits the piece of an upload of data into dst that starts
// at off.
func (s *Server) uploadPiece(ctx context.Context, tenant string, dst Region, data []byte, off int) (Pending, error) {
	n := min(piece, len(data)-off)
	r := Region{Buffer: dst.Buffer, Offset: dst.Offset + uint64(off), Length: uint64(n)}
	cmd, err := cuda.Upload(r, data[off:off+n])
	if err != nil {
		return nil, err
	}
	return s.side.submitAsync(ctx, tenant, Batch{Entries: []Entry{Input(cmd)}})
}

// pieceError waits for a piece of an upload and returns why it did not
// succeed, or nil.
func pieceError(p Pending) error {
	rc, err := p.Result()
	if err == nil {
		err = rc.Err
	}
	return err
}

// Read copies a region of the tenant's buffer (or of a shared one)
// back, after the tenant's submissions accepted before it.
func (s *Server) Read(ctx context.Context, tenant string, src Region) (_ []byte, err error) {
	defer named(&err)
	if err := s.admit("read", ctx, tenant); err != nil {
		return nil, err
	}
	if src.Buffer.ID == 0 {
		return nil, laneerr.Wrap("read", true, errZeroBuffer("read"))
	}
	if src.Length == 0 {
		return nil, laneerr.Wrap("read", true, fmt.Errorf("%w: Read: an empty region; read 1 byte or more", actors.ErrInvalidArgument))
	}
	if _, err := s.mine("read", tenant, src.Buffer); err != nil {
		return nil, err
	}
	if src.Offset > src.Buffer.Size || src.Length > src.Buffer.Size-src.Offset {
		return nil, laneerr.Wrap("read", true, cuda.Contractf("read", cuda.ErrOutOfBounds, "%d bytes from byte %d of buffer %d, which holds %d; read within it", src.Length, src.Offset, src.Buffer.ID, src.Buffer.Size))
	}
	out := make([]byte, 0, src.Length)
	for off := uint64(0); off < src.Length; off += piece {
		r := Region{Buffer: src.Buffer, Offset: src.Offset + off, Length: min(piece, src.Length-off)}
		got, err := s.side.read(ctx, tenant, r)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
	}
	return out, nil
}

// Free frees one of the tenant's buffers after the tenant's
// submissions accepted before it have ended (it waits for them); a
// submission accepted later that names the buffer is refused.
func (s *Server) Free(ctx context.Context, tenant string, b Buffer) (err error) {
	defer named(&err)
	if err := s.admit("free", ctx, tenant); err != nil {
		return err
	}
	recorded, err := s.mine("free", tenant, b)
	if err != nil {
		return err
	}
	if !recorded {
		return laneerr.Wrap("free", true, cuda.Contractf("free", cuda.ErrStaleHandle, "buffer %d is not one tenant %q allocated through this server (or it was freed)", b.ID, tenant))
	}
	// The free goes on to its end if ctx ends while it waits for the
	// tenant's earlier work (detach): the tenant was told the memory goes.
	work := context.WithoutCancel(ctx)
	return s.goOn("free", ctx, tenant, func() error { return s.free(work, tenant, b) })
}

// free frees b once the tenant's submissions accepted before it ended.
func (s *Server) free(ctx context.Context, tenant string, b Buffer) error {
	// A read of one element after the tenant's earlier submissions: once
	// it is back, they have ended, and the free touches none of them.
	barrier := Region{Buffer: b, Length: min(b.Size, max(b.Elem.Size(), 1))}
	if _, err := s.side.read(ctx, tenant, barrier); err != nil {
		if c := cuda.Classify(err); c.Code == codes.Stopped {
			return err
		}
		// Any other failure ended the tenant's earlier work too (or the
		// device is lost): free it all the same.
	}
	s.freeing.Lock()
	defer s.freeing.Unlock()
	s.mu.Lock()
	if s.owners[b] != tenant {
		s.mu.Unlock()
		return laneerr.Wrap("free", true, cuda.Contractf("free", cuda.ErrStaleHandle, "buffer %d was freed meanwhile", b.ID))
	}
	delete(s.owners, b)
	delete(s.bufs[tenant], b)
	s.mu.Unlock()
	return s.side.free(ctx, tenant, b)
}

// Forget frees every buffer the tenant allocated and forgets it: what
// it registered, its routing and its fault record. It is refused
// (retryable) while the tenant has work in flight.
func (s *Server) Forget(ctx context.Context, tenant string) (err error) {
	defer named(&err)
	if err := s.admit("forget", ctx, tenant); err != nil {
		return err
	}
	s.freeing.Lock()
	defer s.freeing.Unlock()
	s.mu.Lock()
	var bufs []Buffer
	for b := range s.bufs[tenant] {
		bufs = append(bufs, b)
	}
	s.mu.Unlock()
	if err := s.side.forget(context.WithoutCancel(ctx), tenant, bufs); err != nil { // once started, it finishes
		return err // busy, say: nothing of it is forgotten
	}
	s.mu.Lock()
	for _, b := range bufs {
		delete(s.owners, b)
	}
	delete(s.bufs, tenant)
	s.mu.Unlock()
	return nil
}

// Submit runs a batch for the tenant and waits for its receipt. An
// error says why it did not succeed; Classify says what it means.
func (s *Server) Submit(ctx context.Context, tenant string, b Batch) (_ Receipt, err error) {
	defer named(&err)
	if err := s.admitBatch(ctx, tenant, &b); err != nil {
		return Receipt{Outcome: lanes.OutcomeRefused, Err: err, Tenant: tenant, Lane: -1}, err
	}
	return s.side.submit(ctx, tenant, b)
}

// SubmitAsync admits a batch and returns at once; the Pending ends
// exactly once. An error here means it was not admitted (nothing ran).
// The batch belongs to the server until Done is closed.
func (s *Server) SubmitAsync(ctx context.Context, tenant string, b Batch) (_ Pending, err error) {
	defer named(&err)
	if err := s.admitBatch(ctx, tenant, &b); err != nil {
		return nil, err
	}
	p, err := s.side.submitAsync(ctx, tenant, b)
	if err != nil {
		return nil, err
	}
	return pending{p}, nil
}

// admitBatch is a submission's first checks: admit's, and, where the side
// cannot tell, that the batch names no buffer this server gave another
// tenant.
func (s *Server) admitBatch(ctx context.Context, tenant string, b *Batch) error {
	if err := s.admit("submit", ctx, tenant); err != nil {
		return err
	}
	if p := b.Program; p != nil && len(p.ID.Name) > MaxProgramName {
		return laneerr.Wrap("submit", true, fmt.Errorf("%w: program name of %d bytes; the front door takes at most %d (lanes.MaxProgramName, the same in process and on lane hosts)", programs.ErrTopology, len(p.ID.Name), MaxProgramName))
	}
	if s.side.checksBatches() {
		// After the checks one process's scheduler makes before its own
		// ownership check: a context ended, the tenant's name.
		err := ctx.Err()
		if err == nil {
			err = schedhook.CheckTenant(tenant)
		}
		if err == nil {
			err = s.theirs(tenant, b)
		}
		if err != nil {
			return laneerr.Wrap("submit", true, err)
		}
	}
	return nil
}

// theirs refuses a batch that names a buffer the server gave another
// tenant (actors.ErrNotYours, as one process's scheduler refuses it); the
// rest of what a batch names its side checks.
func (s *Server) theirs(tenant string, b *Batch) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if len(s.owners) == 0 {
		return nil
	}
	var last Buffer // a step names the same buffer in many commands
	return lanecore.ForHandles(b, func(buf cuda.Buffer) error {
		if buf == last {
			return nil
		}
		if owner, ok := s.owners[buf]; ok && owner != tenant {
			return fmt.Errorf("%w: the batch names buffer %d, another tenant's; a tenant may use only its own buffers and shared ones", actors.ErrNotYours, buf.ID)
		}
		last = buf
		return nil
	}, func(cuda.HostBuffer) error { return nil })
}

// Kernels are the kernels a batch may launch: the device's (in process),
// or the built-in kernels and remote.FrontConfig.Modules' (lane hosts).
// Kernels().Names() lists them.
func (s *Server) Kernels() Kernels {
	if s.unstarted() {
		return nil
	}
	return s.side.kernels()
}

// Status says where work runs and how each lane or host stands.
func (s *Server) Status() Status {
	if s.unstarted() {
		return Status{}
	}
	return s.side.status()
}

// Stop drains: every pending submission ends, and every Upload and
// Free going on (detached or not) goes on to its end, then the server
// stops. A Stop whose context ends first cuts those short: an Upload
// part-written ends indeterminate, a Free not yet done ends stopped.
// Devices given in Config.Devices stay open (they are the caller's).
// If ctx ends first, Stop returns: in process the drain goes on (Stop
// again waits for it); through a front, the calls still in flight end
// indeterminate then (the front's answers stop with it). Give Stop a
// context that outlasts the work in flight.
func (s *Server) Stop(ctx context.Context) (err error) {
	defer named(&err)
	if s.unstarted() {
		return laneerr.Wrap("stop", true, errNotStarted)
	}
	if ctx == nil {
		return laneerr.Wrap("stop", true, errNilContext)
	}
	s.mu.Lock()
	s.stopping.Store(true)
	var idle chan struct{}
	if s.ongoing > 0 {
		if s.idle == nil {
			s.idle = make(chan struct{})
		}
		idle = s.idle
	}
	s.mu.Unlock()
	if idle != nil {
		// Uploads and Frees going on (detached or not) end first, as
		// they would have: their pieces and barriers reach the side
		// before it drains.
		var gaveUp <-chan struct{}
		if ctx != nil {
			gaveUp = ctx.Done()
		}
		select {
		case <-idle:
		case <-gaveUp:
		}
	}
	return s.side.stop(ctx)
}

// Raw is what serves s, for what only that side does: an
// *actors.Scheduler in process (FillShared, Own, Trim, ...), a
// *remote.Front on lane hosts (Hosts, Placement, SubmitEncoded, ...).
// Assert the type you expect:
//
//	if sched, ok := srv.Raw().(*actors.Scheduler); ok { ... }
//
// It stays valid until Stop; work submitted through it bypasses the
// server's own checks and owner table (a buffer allocated through it is
// not one Server.Free or Forget frees).
func (s *Server) Raw() any {
	if s.unstarted() {
		return nil
	}
	if sched := s.side.scheduler(); sched != nil {
		return sched
	}
	return s.side.front()
}

// errNotStarted answers every call on a Server Start did not return: it
// is errors.Is actors.ErrStopped (code stopped), and says what to use.
var errNotStarted error = &notstarted.Error{Msg: "lanes: this Server was not started: use the *Server that lanes.Start returns", Stopped: actors.ErrStopped}

// unstarted reports whether s is nil or zero: no side serves it.
func (s *Server) unstarted() bool { return s == nil || s.side == nil }
