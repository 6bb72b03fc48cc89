// Ownership: which tenant may name which buffer, pinned host staging and
// program. One check covers everything a batch names (its entries' regions
// and staging, its patches, its retained buffers, its programs), before
// anything is routed.

package actors

import (
	"errors"
	"fmt"
	"slices"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	laneerr "github.com/lanesched/lanes/internal/laneerr"

	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/internal/schedhook"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
)

// handleKey names one device buffer or pinned host buffer of one device
// instance.
type handleKey struct {
	device, id uint64
	host       bool
}

func bufferKey(b cuda.Buffer) handleKey   { return handleKey{device: b.Device, id: b.ID} }
func hostKey(h cuda.HostBuffer) handleKey { return handleKey{device: h.Device, id: h.ID, host: true} }

// sharedLocked reports whether k is shared (ownMu held).
func (s *Scheduler) sharedLocked(k handleKey) bool {
	owner, ok := s.owners[k]
	return ok && owner == shared
}

// shared is the owner of what every tenant may name. It is not a valid
// tenant name, so no tenant can pose as it.
const shared = ""

// checkFits refuses an allocation larger than the device's whole memory:
// no retry can help it (errors.Is ErrInvalidArgument, and
// cuda.ErrOutOfMemory, as the device would answer). The front door and a
// lane host ask it before they allocate for a tenant, so both answer
// alike.
func checkFits(dev cuda.Device, spec cuda.BufferSpec) error {
	if total := dev.Info().TotalMemory; spec.Size > total {
		return fmt.Errorf("%w: %w: a buffer of %d bytes is larger than the device's %d bytes of memory: no such buffer fits, now or later", ErrInvalidArgument, cuda.ErrOutOfMemory, spec.Size, total)
	}
	return nil
}

// Own records buffers as one tenant's: no other tenant's batch may name
// them. Each must be a live buffer of one of the scheduler's devices, as
// Alloc returned it (no one can claim an id before it is handed out); one
// owned by another tenant, or shared, is refused, and then none is
// recorded. The ownership lasts until Forget, or until the buffer is
// freed: then its row is dropped at the scheduler's next sweep
// (Config.TenantIdle says when).
func (s *Scheduler) Own(tenant string, bufs ...cuda.Buffer) error {
	if s.unstarted() {
		return errUnstarted
	}
	if err := s.refuseStopped("own"); err != nil {
		return err
	}
	if err := checkTenant(tenant); err != nil {
		return laneerr.Wrap("own", true, err)
	}
	return s.own("own", tenant, s.bufferKeys(bufs))
}

// Share records buffers as shared by every tenant (plan-owned weights),
// checked as Own checks them. Tenants only read them: a batch that writes
// one (a launch's parameter declared to write, a library call's region
// with a write access, a copy, upload or zero into it) is refused
// ErrNotYours, so no tenant can corrupt what every tenant reads. Write
// shared buffers before sharing them, or on a stream of your own.
func (s *Scheduler) Share(bufs ...cuda.Buffer) error {
	if s.unstarted() {
		return errUnstarted
	}
	if err := s.refuseStopped("share"); err != nil {
		return err
	}
	return s.own("share", shared, s.bufferKeys(bufs))
}

// OwnHost records pinned host staging as one tenant's, as Own does buffers.
func (s *Scheduler) OwnHost(tenant string, hosts ...cuda.HostBuffer) error {
	if s.unstarted() {
		return errUnstarted
	}
	if err := s.refuseStopped("own"); err != nil {
		return err
	}
	if err := checkTenant(tenant); err != nil {
		return laneerr.Wrap("own", true, err)
	}
	return s.own("own", tenant, s.hostKeys(hosts))
}

// ShareHost records pinned host staging as shared by every tenant, to
// read: a batch that stages out into it is refused (ErrNotYours), as a
// write to a shared device buffer is.
func (s *Scheduler) ShareHost(hosts ...cuda.HostBuffer) error {
	if s.unstarted() {
		return errUnstarted
	}
	if err := s.refuseStopped("share"); err != nil {
		return err
	}
	return s.own("share", shared, s.hostKeys(hosts))
}

// ownedKey is a handle to record, with its check against its device.
type ownedKey struct {
	key   handleKey
	check func() error
}

// device is the scheduler's device of an instance, or nil.
func (s *Scheduler) device(instance uint64) backend.Device {
	for _, d := range s.devs {
		if d.Info().Instance == instance {
			return d
		}
	}
	return nil
}

func (s *Scheduler) bufferKeys(bufs []cuda.Buffer) []ownedKey {
	keys := make([]ownedKey, len(bufs))
	for i, b := range bufs {
		keys[i] = ownedKey{bufferKey(b), func() error {
			d := s.device(b.Device)
			if d == nil {
				return cuda.Contractf("own", cuda.ErrForeignHandle, "buffer %d belongs to device instance %d, which this scheduler does not serve", b.ID, b.Device)
			}
			return d.CheckBuffer(b)
		}}
	}
	return keys
}

func (s *Scheduler) hostKeys(hosts []cuda.HostBuffer) []ownedKey {
	keys := make([]ownedKey, len(hosts))
	for i, h := range hosts {
		keys[i] = ownedKey{hostKey(h), func() error {
			dev := s.device(h.Device)
			if dev == nil {
				return cuda.Contractf("own", cuda.ErrForeignHandle, "host buffer %d belongs to device instance %d, which this scheduler does not serve", h.ID, h.Device)
			}
			return dev.CheckHost(h)
		}}
	}
	return keys
}

func (s *Scheduler) own(op, owner string, keys []ownedKey) error {
	for _, k := range keys {
		if err := k.check(); err != nil {
			return laneerr.Wrap(op, true, err)
		}
	}
	s.lockOwnership()
	defer s.ownMu.Unlock()
	for _, k := range keys {
		if have, ok := s.owners[k.key]; ok && have != owner {
			return laneerr.Wrap(op, true, fmt.Errorf("%w: %s is already %s", ErrNotYours, describeHandle(k.key), describeOwner(have)))
		}
	}
	for _, k := range keys {
		s.recordLocked(owner, k.key, k.check)
	}
	return nil
}

// recordLocked records a handle as owner's, with the check the janitor
// runs to drop its row once it is freed (ownMu held).
func (s *Scheduler) recordLocked(owner string, k handleKey, check func() error) {
	mine := s.owned[owner]
	if mine == nil {
		mine = map[handleKey]func() error{}
		s.owned[owner] = mine
	}
	s.owners[k] = owner
	s.anyShared = s.anyShared || owner == shared
	mine[k] = check
}

// disownLocked drops every row of owner: its handles are no one's
// afterwards (ownMu held).
func (s *Scheduler) disownLocked(owner string) {
	for k := range s.owned[owner] {
		if s.owners[k] == owner {
			delete(s.owners, k)
		}
	}
	delete(s.owned, owner)
}

func describeHandle(k handleKey) string {
	if k.host {
		return fmt.Sprintf("host buffer %d", k.id)
	}
	return fmt.Sprintf("buffer %d", k.id)
}

func describeOwner(owner string) string {
	switch owner {
	case shared:
		return "shared"
	case workspaceOwner:
		return "a lane's library workspace, which only that library's calls on the lane touch"
	}
	return fmt.Sprintf("owned by tenant %q", owner)
}

// lockOwnership takes ownMu to change what it guards: every such change
// moves the generation on, so no ownership memo made before it holds.
func (s *Scheduler) lockOwnership() {
	s.ownMu.Lock()
	s.ownGen++
}

// programClaim is a program's owner and the state of its registration: a
// name a tenant's batch claimed is reserved while such batches are in
// flight, and kept once one of them succeeded (a lane then holds it); a
// claim whose every batch was refused is dropped.
type programClaim struct {
	owner      string
	pending    int  // batches of the owner that declare it, in flight
	registered bool // one of them succeeded
}

// checkOwnership refuses a batch that names another tenant's buffer, host
// staging or program, before anything is routed, and claims the program a
// batch declares (reports claimed; the call must later settleClaim). It
// reads under a shared lock, so tenants check in parallel; a batch that
// declares a program takes the lock exclusively.
func (s *Scheduler) checkOwnership(tenant string, b *lanes.Batch, memo *schedhook.OwnershipMemo) (claimed bool, err error) {
	if b.Program == nil {
		s.ownMu.RLock()
		defer s.ownMu.RUnlock()
		if memo.Holds(s, s.ownGen, tenant, b) {
			return false, nil
		}
		if err := s.checkOwnershipLocked(tenant, b); err != nil {
			return false, err
		}
		memo.Passed(s, s.ownGen, tenant, b)
		return false, nil
	}
	s.lockOwnership()
	defer s.ownMu.Unlock()
	if err := s.checkOwnershipLocked(tenant, b); err != nil {
		return false, err
	}
	c := s.programs[b.Program.ID]
	if c == nil {
		switch {
		case s.programCount[tenant] >= s.cfg.MaxProgramsPerTenant:
			return false, fmt.Errorf("%w: tenant %q holds %d program names (Config.MaxProgramsPerTenant); reuse one", ErrProgramLimit, tenant, s.programCount[tenant])
		case len(s.programs) >= s.cfg.MaxPrograms:
			return false, fmt.Errorf("%w: the scheduler holds %d program names (Config.MaxPrograms); reuse one", ErrProgramLimit, len(s.programs))
		}
		c = &programClaim{owner: tenant}
		s.programs[b.Program.ID] = c
		s.programCount[tenant]++
	}
	c.pending++
	return true, nil
}

// settleClaim ends one in-flight claim of a program: kept if the batch
// succeeded (or any before it did), dropped if none ever did and none is
// in flight.
func (s *Scheduler) settleClaim(id programs.ID, succeeded bool) {
	s.lockOwnership()
	defer s.ownMu.Unlock()
	c := s.programs[id]
	if c == nil {
		return
	}
	c.pending--
	c.registered = c.registered || succeeded
	if c.pending <= 0 && !c.registered {
		delete(s.programs, id)
		if s.programCount[c.owner]--; s.programCount[c.owner] <= 0 {
			delete(s.programCount, c.owner)
		}
	}
}

func (s *Scheduler) checkOwnershipLocked(tenant string, b *lanes.Batch) error {
	if b.Program != nil {
		if c, ok := s.programs[b.Program.ID]; ok && c.owner != tenant {
			return fmt.Errorf("%w: program %s was registered by another tenant; register your own under another name", ErrNotYours, b.Program.ID)
		}
	}
	for i, e := range b.Entries {
		if e.Invoke != nil {
			if c, ok := s.programs[e.Invoke.Program]; ok && c.owner != tenant {
				return fmt.Errorf("%w: entry %d invokes program %s, another tenant's", ErrNotYours, i, e.Invoke.Program)
			}
		}
	}
	if err := s.checkSharedWritesLocked(b); err != nil {
		return err
	}
	return s.checkHandlesLocked(tenant, func(buffer func(cuda.Buffer) error, host func(cuda.HostBuffer) error) error {
		return lanecore.ForHandles(b, buffer, host)
	})
}

// checkSharedWritesLocked refuses a batch that writes a shared buffer
// (ownMu held). It allocates nothing, and checks nothing until something
// was shared.
func (s *Scheduler) checkSharedWritesLocked(b *lanes.Batch) error {
	if !s.anyShared {
		return nil
	}
	check := func(i int, r cuda.Region) error {
		if k := bufferKey(r.Buffer); s.sharedLocked(k) {
			return fmt.Errorf("%w: entry %d writes %s, which is shared: tenants only read shared buffers", ErrNotYours, i, describeHandle(k))
		}
		return nil
	}
	for i := range b.Entries {
		c := &b.Entries[i].Command
		switch c.Kind {
		case cuda.KindLaunch:
			var spec cuda.KernelSpec
			looked := false
			for j, a := range c.Args {
				if a.Kind != cuda.ParamBuffer {
					continue
				}
				if !looked {
					if dev := s.device(a.Region.Buffer.Device); dev != nil {
						spec, _ = dev.Kernels().Kernel(c.Kernel)
					}
					looked = true
				}
				if j >= len(spec.Params) || spec.Params[j].Access.Writes() { // unknown: taken as a write
					if err := check(i, a.Region); err != nil {
						return err
					}
				}
			}
		case cuda.KindCall:
			if c.LibraryCall != nil {
				for _, t := range c.LibraryCall.Regions {
					if t.Access.Writes() {
						if err := check(i, t.Region); err != nil {
							return err
						}
					}
				}
			}
		case cuda.KindCopy, cuda.KindUpload, cuda.KindZero, cuda.KindStageIn:
			if err := check(i, c.Dst); err != nil {
				return err
			}
		case cuda.KindStageOut:
			if k := hostKey(c.Staging.Buffer); s.sharedLocked(k) {
				return fmt.Errorf("%w: entry %d stages out into %s, which is shared: tenants only read shared staging", ErrNotYours, i, describeHandle(k))
			}
		}
	}
	for i := range b.Patches {
		dst := b.Patches[i].Dst
		if l := b.Patches[i].Layout; l != nil {
			dst = l.Region
		}
		if err := check(-1, dst); err != nil {
			return err
		}
	}
	return nil
}

// checkHandlesLocked checks every handle a walk visits (ownMu held).
func (s *Scheduler) checkHandlesLocked(tenant string, walk func(func(cuda.Buffer) error, func(cuda.HostBuffer) error) error) error {
	if len(s.owners) == 0 && !s.cfg.StrictOwnership && s.cfg.Scope == nil {
		return nil // nothing is owned: nothing can be another tenant's
	}
	c := &handleCheck{s: s, tenant: tenant}
	return walk(c.buffer, c.hostBuffer)
}

// handleCheck checks one walk's handles for a tenant (ownMu held). A step
// names the same few buffers in many commands: a handle that passed passes
// again (the verdict depends on the handle alone), so a step's map lookups
// fall from one per argument to one per buffer. (One value for the walk:
// the memo costs no allocation of its own.)
type handleCheck struct {
	s       *Scheduler
	tenant  string
	passed  [8]handleKey
	npassed int
}

func (c *handleCheck) buffer(b cuda.Buffer) error {
	err := c.check(bufferKey(b))
	if err != nil && errors.Is(err, ErrNotYours) {
		// Its owner's row outlives a free until the next sweep: a freed
		// buffer is no one's, and answers as a freed buffer of one's own
		// does (a stale handle), whoever freed it.
		if dev := c.s.device(b.Device); dev != nil && dev.CheckBuffer(b) != nil {
			return fmt.Errorf("%w: %w: the batch names %s, which is not allocated (freed, or never handed out by this device)", lanes.ErrInvalidBatch, cuda.ErrStaleHandle, describeHandle(bufferKey(b)))
		}
	}
	return err
}

func (c *handleCheck) hostBuffer(h cuda.HostBuffer) error {
	return c.check(hostKey(h))
}

func (c *handleCheck) check(k handleKey) error {
	if k.id == 0 || slices.Contains(c.passed[:c.npassed], k) {
		// The zero handle is no one's: the lane's own check of the
		// batch's commands refuses it (cuda.ErrStaleHandle), the same
		// answer with or without scopes.
		return nil
	}
	s, tenant := c.s, c.tenant
	owner, ok := s.owners[k]
	switch {
	case ok && (owner == tenant || owner == shared):
		if c.npassed < len(c.passed) {
			c.passed[c.npassed] = k
			c.npassed++
		}
		return nil
	case s.cfg.Scope != nil && (!ok || s.cfg.Scope(owner) != s.cfg.Scope(tenant)):
		// As the lane's own check says it of a handle no tenant owns.
		return fmt.Errorf("%w: %w: the batch names %s, which is not allocated (freed, or never handed out by this device)", lanes.ErrInvalidBatch, cuda.ErrStaleHandle, describeHandle(k))
	case ok: // another tenant's (of the scope, when scoped)
		return fmt.Errorf("%w: the batch names %s, another tenant's; a tenant may use only its own buffers and shared ones", ErrNotYours, describeHandle(k))
	case !ok && s.cfg.StrictOwnership:
		return fmt.Errorf("%w: the batch names %s, which no tenant owns and is not shared; Own or Share it first", ErrNotYours, describeHandle(k))
	}
	return nil
}

// checkStaged checks a staged program's handles (slots and compute) for a
// tenant.
func (s *Scheduler) checkStaged(tenant string, st *lanecore.Staged) error {
	if err := checkTenant(tenant); err != nil {
		return err
	}
	if st == nil {
		return fmt.Errorf("%w: nil staged program", lanes.ErrStagedInput)
	}
	s.ownMu.RLock()
	defer s.ownMu.RUnlock()
	if err := s.checkHandlesLocked(tenant, st.ForHandles); err != nil {
		return err
	}
	full := st.FullBatch() // its input copies and compute write device memory: never a shared buffer
	if err := s.checkSharedWritesLocked(&full); err != nil {
		return err
	}
	if !s.anyShared {
		return nil
	}
	// A replay writes its caller's inputs into the input slots' staging.
	return st.ForInputStaging(func(i int, r cuda.HostRegion) error {
		if k := hostKey(r.Buffer); s.sharedLocked(k) {
			return fmt.Errorf("%w: input slot %d stages through %s, which is shared: a replay writes its inputs there, and tenants only read shared staging", ErrNotYours, i, describeHandle(k))
		}
		return nil
	})
}
