// Shared weights filled through the scheduler: a buffer every tenant reads
// is uploaded once, on a lane, checked, timed, and only then shared.

package actors

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
)

// SharedFill is what FillShared did.
type SharedFill struct {
	// Bytes were uploaded, in Batches uploads of at most
	// Config.MaxBatchBytes each, on lane Lane.
	Bytes   uint64
	Batches int
	Lane    int
	// DeviceTime is the uploads' time on the device (CUDA events, summed
	// over the batches); Took the call's wall time, from the checks to the
	// buffer being shared.
	DeviceTime time.Duration
	Took       time.Duration
}

// reservedTenantPrefix begins the names of the scheduler's own tenants
// (FillShared's): no caller's tenant may have one (checkTenant).
const reservedTenantPrefix = "lanes:"

// FillShared fills buf, whole, with host on one of the scheduler's lanes,
// waits until the device has it, and then shares it (Share): the way to
// set up weights every tenant reads. Until the fill ends no tenant can
// name buf (it is the fill's own); once it is shared, tenants only read
// it. It checks first, and refuses, not submitted: host not exactly
// buf.Size bytes (ErrInvalidArgument), a buffer that is not live on a
// device of the scheduler (cuda.ErrStaleHandle, cuda.ErrForeignHandle), or
// one a tenant owns or that is shared already (ErrNotYours: write a shared
// buffer once, before anyone reads it). Uploads larger than
// Config.MaxBatchBytes go in several batches. If an upload fails, or ctx
// ends, buf is left unshared and no one's, its contents undefined, and the
// error says so; fill it again.
func (s *Scheduler) FillShared(ctx context.Context, buf cuda.Buffer, host []byte) (SharedFill, error) {
	const op = "fill shared"
	start := time.Now()
	if err := s.refuseStopped(op); err != nil {
		return SharedFill{}, err
	}
	if ctx == nil {
		return SharedFill{}, lanes.Wrap(op, true, errNilContext)
	}
	if uint64(len(host)) != buf.Size {
		return SharedFill{}, lanes.Wrap(op, true, fmt.Errorf("%w: %d bytes to fill buffer %d of %d bytes; fill a shared buffer whole", ErrInvalidArgument, len(host), buf.ID, buf.Size))
	}
	filler := reservedTenantPrefix + "fill-shared#" + strconv.FormatUint(s.fills.Add(1), 10)
	keys := s.bufferKeys([]cuda.Buffer{buf})
	if err := s.own(op, filler, keys); err != nil {
		return SharedFill{}, err
	}
	v, _ := s.tenants.LoadOrStore(filler, &tenantState{name: filler, weight: 1})
	ts := v.(*tenantState)
	fill, err := s.upload(ctx, ts, buf, host)
	if err == nil {
		s.shareFilled(filler)
	}
	ts.mu.Lock()
	s.dropLocked(ts)
	ts.mu.Unlock()
	s.lockOwnership()
	for k := range s.owned[filler] { // a failed fill leaves the buffer no one's
		if s.owners[k] == filler {
			delete(s.owners, k)
		}
	}
	delete(s.owned, filler)
	s.ownMu.Unlock()
	fill.Took = time.Since(start)
	if err != nil {
		return fill, lanes.Wrap(op, false, fmt.Errorf("buffer %d is not shared and its contents are undefined; fill it again: %w", buf.ID, err))
	}
	return fill, nil
}

// upload uploads host into buf as ts, in batches of at most
// MaxBatchBytes (whole elements), one after another.
func (s *Scheduler) upload(ctx context.Context, ts *tenantState, buf cuda.Buffer, host []byte) (SharedFill, error) {
	fill := SharedFill{Lane: -1}
	chunk := uint64(s.cfg.MaxBatchBytes)
	if e := buf.Elem.Size(); e > 1 {
		chunk -= chunk % e
	}
	for off := uint64(0); off < buf.Size; off += chunk {
		n := min(chunk, buf.Size-off)
		cmd, err := cuda.Upload(cuda.Region{Buffer: buf, Offset: off, Length: n}, host[off:off+n])
		if err != nil {
			return fill, err
		}
		b := lanes.Batch{Entries: []lanes.Entry{lanes.Eager(cache.PhaseInitialization, cmd)}, Timing: lanes.TimingCompletion}
		p, err := s.submitAsync(ctx, ts, b, nil, nil)
		if err != nil {
			return fill, err
		}
		rc, err := p.Result()
		if err != nil {
			return fill, err
		}
		fill.Bytes += n
		fill.Batches++
		fill.Lane = rc.Lane
		fill.DeviceTime += rc.DeviceTime
	}
	return fill, nil
}

// shareFilled hands what the filler owns to every tenant, to read: in one
// step, so no tenant can claim it between the fill and the share.
func (s *Scheduler) shareFilled(filler string) {
	s.lockOwnership()
	defer s.ownMu.Unlock()
	mine := s.owned[shared]
	if mine == nil {
		mine = map[handleKey]func() error{}
		s.owned[shared] = mine
	}
	for k, check := range s.owned[filler] {
		s.owners[k] = shared
		mine[k] = check
		s.anyShared = true
	}
	delete(s.owned, filler)
}
