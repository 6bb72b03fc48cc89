package lanes

import (
	"context"
	"fmt"
	"sync"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
)

// MaxTenantName is the longest tenant name the front door takes, in bytes:
// the same in process and on lane hosts (a front keeps 16 bytes of
// actors.MaxTenantName to scope names per front), so a name that works in
// one works in the other.
const MaxTenantName = remote.MaxTenantName

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
	kernels() Kernels
	status() Status
	stop(ctx context.Context) error
	scheduler() *actors.Scheduler
	front() *remote.Front
}

// server is the Server over either side.
type server struct {
	side side

	// freeing serializes Free's and Forget's frees, so that a buffer is
	// freed once whichever of them comes first.
	freeing sync.Mutex
	mu      sync.Mutex
	owners  map[Buffer]string          // each buffer the server allocated, by its tenant
	bufs    map[string]map[Buffer]bool // each tenant's
}

func newServer(s side) *server {
	return &server{side: s, owners: map[Buffer]string{}, bufs: map[string]map[Buffer]bool{}}
}

// admit is every call's first check, the same on both sides: a live
// context, and a tenant name both sides take. Submissions leave the
// name's characters and the context's end to their side (checked there
// once per submission already).
func admit(op string, ctx context.Context, tenant string) error {
	if ctx == nil {
		return lanes.Wrap(op, true, fmt.Errorf("%w: a nil context.Context; pass context.Background() or a real context", actors.ErrInvalidArgument))
	}
	if len(tenant) > MaxTenantName {
		return lanes.Wrap(op, true, fmt.Errorf("%w: the name is %d bytes; the front door takes 1 to %d (lanes.MaxTenantName, the same in process and on lane hosts)", actors.ErrInvalidTenant, len(tenant), MaxTenantName))
	}
	if op == "submit" {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return lanes.Wrap(op, true, err)
	}
	if err := actors.CheckTenant(tenant); err != nil {
		return lanes.Wrap(op, true, err)
	}
	return nil
}

// mine checks that b is one of the tenant's: another tenant's is
// ErrNotYours; one the server never handed out is checked by the side
// (a shared buffer, say, or a stale handle).
func (s *server) mine(op, tenant string, b Buffer) (recorded bool, err error) {
	s.mu.Lock()
	owner, ok := s.owners[b]
	s.mu.Unlock()
	switch {
	case ok && owner == tenant:
		return true, nil
	case ok:
		return false, lanes.Wrap(op, true, fmt.Errorf("%w: buffer %d is another tenant's; a tenant may use only its own buffers and shared ones", actors.ErrNotYours, b.ID))
	}
	if err := s.side.check(b); err != nil {
		return false, lanes.Wrap(op, true, err)
	}
	return false, nil
}

func (s *server) Alloc(ctx context.Context, tenant string, spec BufferSpec) (Buffer, error) {
	if err := admit("alloc", ctx, tenant); err != nil {
		return Buffer{}, err
	}
	b, err := s.side.alloc(ctx, tenant, spec)
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
	if c.Code != cuda.CodeOutOfMemory {
		return err
	}
	return &lanes.Error{Op: "alloc", Code: c.Code, Blame: cuda.BlameNone, Retryable: true, NotSubmitted: true, Err: err}
}

func (s *server) Upload(ctx context.Context, tenant string, dst Region, data []byte) error {
	if err := admit("upload", ctx, tenant); err != nil {
		return err
	}
	if uint64(len(data)) != dst.Length {
		return lanes.Wrap("upload", true, fmt.Errorf("%w: Upload: %d bytes for a region of %d; give exactly the region's bytes", actors.ErrInvalidArgument, len(data), dst.Length))
	}
	if _, err := s.mine("upload", tenant, dst.Buffer); err != nil {
		return err
	}
	if len(data) == 0 {
		_, err := cuda.Upload(dst, data) // nothing to write: cuda says whether dst is sound
		return err
	}
	for off := 0; off < len(data); off += piece {
		n := min(piece, len(data)-off)
		r := Region{Buffer: dst.Buffer, Offset: dst.Offset + uint64(off), Length: uint64(n)}
		cmd, err := cuda.Upload(r, data[off:off+n])
		if err != nil {
			return err
		}
		rc, err := s.side.submit(ctx, tenant, Batch{Entries: []Entry{Input(cmd)}})
		if err == nil {
			err = rc.Err
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *server) Read(ctx context.Context, tenant string, src Region) ([]byte, error) {
	if err := admit("read", ctx, tenant); err != nil {
		return nil, err
	}
	if src.Length == 0 {
		return nil, lanes.Wrap("read", true, fmt.Errorf("%w: Read: an empty region; read 1 byte or more", actors.ErrInvalidArgument))
	}
	if _, err := s.mine("read", tenant, src.Buffer); err != nil {
		return nil, err
	}
	if src.Offset > src.Buffer.Size || src.Length > src.Buffer.Size-src.Offset {
		return nil, lanes.Wrap("read", true, cuda.Contractf("read", cuda.ErrOutOfBounds, "bytes %d to %d of buffer %d, which holds %d; read within it", src.Offset, src.Offset+src.Length, src.Buffer.ID, src.Buffer.Size))
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

func (s *server) Free(ctx context.Context, tenant string, b Buffer) error {
	if err := admit("free", ctx, tenant); err != nil {
		return err
	}
	recorded, err := s.mine("free", tenant, b)
	if err != nil {
		return err
	}
	if !recorded {
		return lanes.Wrap("free", true, cuda.Contractf("free", cuda.ErrStaleHandle, "buffer %d is not one tenant %q allocated through this server (or it was freed)", b.ID, tenant))
	}
	// A read of one element after the tenant's earlier submissions: once
	// it is back, they have ended, and the free touches none of them.
	barrier := Region{Buffer: b, Length: min(b.Size, max(b.Elem.Size(), 1))}
	if _, err := s.side.read(ctx, tenant, barrier); err != nil {
		if c := cuda.Classify(err); c.Code == cuda.CodeStopped || c.Code == cuda.CodeCanceled || c.Code == cuda.CodeDeadlineExceeded || c.Code == cuda.CodeDetached {
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
		return lanes.Wrap("free", true, cuda.Contractf("free", cuda.ErrStaleHandle, "buffer %d was freed meanwhile", b.ID))
	}
	delete(s.owners, b)
	delete(s.bufs[tenant], b)
	s.mu.Unlock()
	return s.side.free(ctx, tenant, b)
}

func (s *server) Forget(ctx context.Context, tenant string) error {
	if err := admit("forget", ctx, tenant); err != nil {
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
	if err := s.side.forget(ctx, tenant, bufs); err != nil {
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

func (s *server) Submit(ctx context.Context, tenant string, b Batch) (Receipt, error) {
	if err := admit("submit", ctx, tenant); err != nil {
		return Receipt{Outcome: lanes.OutcomeRefused, Err: err, Tenant: tenant, Lane: -1}, err
	}
	return s.side.submit(ctx, tenant, b)
}

func (s *server) SubmitAsync(ctx context.Context, tenant string, b Batch) (Pending, error) {
	if err := admit("submit", ctx, tenant); err != nil {
		return nil, err
	}
	return s.side.submitAsync(ctx, tenant, b)
}

func (s *server) Kernels() Kernels               { return s.side.kernels() }
func (s *server) Status() Status                 { return s.side.status() }
func (s *server) Stop(ctx context.Context) error { return s.side.stop(ctx) }
func (s *server) Scheduler() *actors.Scheduler   { return s.side.scheduler() }
func (s *server) Front() *remote.Front           { return s.side.front() }
