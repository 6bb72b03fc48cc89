// Shared weights filled through the scheduler: a buffer every tenant reads
// is uploaded once, on a lane, checked, timed, and only then shared.

package actors

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	laneerr "github.com/lanesched/lanes/internal/laneerr"
	"github.com/lanesched/lanes/lanes"
)

// SharedBytes is one buffer of a FillShared and the bytes that fill it,
// whole.
type SharedBytes struct {
	Buffer cuda.Buffer
	Bytes  []byte
}

// SharedFill is what FillShared did.
type SharedFill struct {
	// Bytes were uploaded, in Batches batches of at most
	// Config.MaxBatchBytes and MaxBatchEntries each, the last on lane Lane
	// (-1 when nothing was uploaded; fills of several devices run on a
	// lane of each).
	Bytes   uint64
	Batches int
	Lane    int
	// DeviceTime is the uploads' time on the device (CUDA events, summed
	// over the batches); Took the call's wall time, from the checks to the
	// buffers being shared.
	DeviceTime time.Duration
	Took       time.Duration
}

// reservedTenantPrefix begins the names of the scheduler's own tenants
// (FillShared's) and owners (lanes' workspaces): no caller's tenant may
// have one (checkTenant).
const reservedTenantPrefix = "lanes:"

// workspaceOwner owns every lane's library workspaces (cuda.Library): no
// tenant can own, share or name them.
const workspaceOwner = reservedTenantPrefix + "workspaces"

// ownWorkspace records a lane's workspace as the lanes' own, or forgets it
// (lanecore.Config.OnWorkspace).
func (s *Scheduler) ownWorkspace(buf cuda.Buffer, allocated bool) {
	k := s.bufferKeys([]cuda.Buffer{buf})[0]
	s.lockOwnership()
	defer s.ownMu.Unlock()
	if allocated {
		s.recordLocked(workspaceOwner, k.key, k.check) // the janitor drops it once freed
		return
	}
	if s.owners[k.key] == workspaceOwner {
		delete(s.owners, k.key)
	}
	delete(s.owned[workspaceOwner], k.key)
}

// FillShared fills each buffer, whole, with its bytes on one of the
// scheduler's lanes, waits until the device has them all, and then shares
// them (Share): the way to set up weights every tenant reads, hundreds of
// tensors in as few batches as MaxBatchBytes and MaxBatchEntries allow.
// Until the fill ends no tenant can name the buffers (they are the fill's
// own); once they are shared, tenants only read them. It checks first,
// and refuses, not submitted, sharing none: no buffers, one given twice or
// whose bytes are not exactly its size (ErrInvalidArgument), one that is
// not live on a device of the scheduler (cuda.ErrStaleHandle,
// cuda.ErrForeignHandle), or one a tenant owns or that is shared already
// (ErrNotYours: write a shared buffer once, before anyone reads it). If an
// upload fails, or ctx ends, none is shared, each is no one's, their
// contents undefined, and the error says so; fill them again.
func (s *Scheduler) FillShared(ctx context.Context, fills ...SharedBytes) (SharedFill, error) {
	if s.unstarted() {
		return SharedFill{}, errUnstarted
	}
	const op = "fill shared"
	start := time.Now()
	refused := SharedFill{Lane: -1}
	if err := s.refuseStopped(op); err != nil {
		return refused, err
	}
	if ctx == nil {
		return refused, laneerr.Wrap(op, true, errNilContext)
	}
	if err := ctx.Err(); err != nil {
		return refused, laneerr.Wrap(op, true, err)
	}
	if err := s.checkFills(fills); err != nil {
		return refused, laneerr.Wrap(op, true, err)
	}
	bufs := make([]cuda.Buffer, len(fills))
	for i, f := range fills {
		bufs[i] = f.Buffer
	}
	filler := reservedTenantPrefix + "fill-shared#" + strconv.FormatUint(s.fills.Add(1), 10)
	if err := s.own(op, filler, s.bufferKeys(bufs)); err != nil {
		return refused, err
	}
	v, _ := s.tenants.LoadOrStore(filler, &tenantState{name: filler, weight: 1})
	ts := v.(*tenantState)
	fill, submitted, err := s.upload(ctx, ts, fills)
	if err == nil {
		s.shareFilled(filler)
	}
	ts.mu.Lock()
	s.dropLocked(ts)
	ts.mu.Unlock()
	s.lockOwnership()
	s.disownLocked(filler) // a failed fill leaves the buffers no one's
	s.ownMu.Unlock()
	fill.Took = time.Since(start)
	switch {
	case err != nil && !submitted: // err says not submitted: it was refused, or ended before any batch ran
		return fill, fmt.Errorf("fill shared: nothing was uploaded and no buffer is shared: %w", err)
	case err != nil:
		return fill, laneerr.Wrap(op, false, fmt.Errorf("no buffer is shared and their contents are undefined; fill them again: %w", err))
	}
	return fill, nil
}

// checkFills refuses fills that cannot be done: none, a buffer twice,
// bytes that do not fill their buffer whole, or elements larger than a
// batch may carry.
func (s *Scheduler) checkFills(fills []SharedBytes) error {
	if len(fills) == 0 {
		return fmt.Errorf("%w: no buffers to fill", ErrInvalidArgument)
	}
	seen := make(map[cuda.Buffer]bool, len(fills))
	for i, f := range fills {
		switch {
		case int64(f.Buffer.Elem.Size()) > s.cfg.MaxBatchBytes:
			return fmt.Errorf("%w: fill %d: buffer %d holds %v elements of %d bytes, more than a batch may carry (Config.MaxBatchBytes %d)", ErrInvalidArgument, i, f.Buffer.ID, f.Buffer.Elem, f.Buffer.Elem.Size(), s.cfg.MaxBatchBytes)
		case uint64(len(f.Bytes)) != f.Buffer.Size:
			return fmt.Errorf("%w: fill %d: %d bytes for buffer %d of %d bytes; fill a shared buffer whole", ErrInvalidArgument, i, len(f.Bytes), f.Buffer.ID, f.Buffer.Size)
		case seen[f.Buffer]:
			return fmt.Errorf("%w: fill %d: buffer %d is filled twice", ErrInvalidArgument, i, f.Buffer.ID)
		}
		seen[f.Buffer] = true
	}
	return nil
}

// upload uploads every fill as ts, packed into batches of at most
// MaxBatchBytes and MaxBatchEntries of one device each (a buffer larger
// than MaxBatchBytes in pieces of whole elements), one batch after
// another. It reports whether any batch was submitted.
func (s *Scheduler) upload(ctx context.Context, ts *tenantState, fills []SharedBytes) (SharedFill, bool, error) {
	fill := SharedFill{Lane: -1}
	submitted := false
	var batch lanes.Batch
	var bytes int64
	flush := func() error {
		if len(batch.Entries) == 0 {
			return nil
		}
		batch.Timing = lanes.TimingCompletion
		p, err := s.submitAsync(ctx, ts, batch, nil, nil)
		if err != nil {
			return err
		}
		rc, err := p.Result()
		if err != nil {
			submitted = submitted || !cuda.Classify(err).NotSubmitted
			return err
		}
		submitted = true
		fill.Bytes += uint64(bytes)
		fill.Batches++
		fill.Lane = rc.Lane
		fill.DeviceTime += rc.DeviceTime
		batch, bytes = lanes.Batch{}, 0
		return nil
	}
	// A batch's buffers are of one device (it runs on a lane of that
	// device): the fills go device by device.
	byDevice := slices.Clone(fills)
	slices.SortStableFunc(byDevice, func(a, b SharedBytes) int { return cmp.Compare(a.Buffer.Device, b.Buffer.Device) })
	for i, f := range byDevice {
		if i > 0 && f.Buffer.Device != byDevice[i-1].Buffer.Device {
			if err := flush(); err != nil {
				return fill, submitted, err
			}
		}
		chunk := uint64(s.cfg.MaxBatchBytes)
		if e := f.Buffer.Elem.Size(); e > 1 {
			chunk -= chunk % e
		}
		for off := uint64(0); off < f.Buffer.Size; off += chunk {
			n := min(chunk, f.Buffer.Size-off)
			if bytes+int64(n) > s.cfg.MaxBatchBytes || len(batch.Entries) == s.cfg.MaxBatchEntries {
				if err := flush(); err != nil {
					return fill, submitted, err
				}
			}
			cmd, err := cuda.Upload(cuda.Region{Buffer: f.Buffer, Offset: off, Length: n}, f.Bytes[off:off+n])
			if err != nil {
				return fill, submitted, err
			}
			batch.Entries = append(batch.Entries, lanes.Eager(cache.PhaseInitialization, cmd))
			bytes += int64(n)
		}
	}
	return fill, submitted, flush()
}

// shareFilled hands what the filler owns to every tenant, to read: in one
// step, so no tenant can claim it between the fill and the share.
func (s *Scheduler) shareFilled(filler string) {
	s.lockOwnership()
	defer s.ownMu.Unlock()
	for k, check := range s.owned[filler] {
		s.recordLocked(shared, k, check)
	}
	delete(s.owned, filler)
}
