package actors

// Ownership: which tenant may name which buffer, pinned host staging and
// program. One check covers everything a batch names (its entries' regions
// and staging, its patches, its retained buffers, its programs), before
// anything is routed.

import (
	"fmt"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
)

// handleKey names one device buffer or pinned host buffer of one device
// instance.
type handleKey struct {
	device, id uint64
	host       bool
}

// shared is the owner of what every tenant may name. It is not a valid
// tenant name, so no tenant can pose as it.
const shared = ""

// Own records buffers as one tenant's: no other tenant's batch may name
// them. A buffer owned by another tenant, or shared, is refused.
func (s *Scheduler) Own(tenant string, bufs ...cuda.Buffer) error {
	if err := checkTenant(tenant); err != nil {
		return lanes.Wrap("own", true, err)
	}
	return s.own(tenant, bufferKeys(bufs))
}

// Share records buffers as shared by every tenant (plan-owned weights).
func (s *Scheduler) Share(bufs ...cuda.Buffer) error { return s.own(shared, bufferKeys(bufs)) }

// OwnHost records pinned host staging as one tenant's, as Own does buffers.
func (s *Scheduler) OwnHost(tenant string, hosts ...cuda.HostBuffer) error {
	if err := checkTenant(tenant); err != nil {
		return lanes.Wrap("own", true, err)
	}
	return s.own(tenant, hostKeys(hosts))
}

// ShareHost records pinned host staging as shared by every tenant.
func (s *Scheduler) ShareHost(hosts ...cuda.HostBuffer) error {
	return s.own(shared, hostKeys(hosts))
}

func bufferKeys(bufs []cuda.Buffer) []handleKey {
	keys := make([]handleKey, len(bufs))
	for i, b := range bufs {
		keys[i] = handleKey{device: b.Device, id: b.ID}
	}
	return keys
}

func hostKeys(hosts []cuda.HostBuffer) []handleKey {
	keys := make([]handleKey, len(hosts))
	for i, h := range hosts {
		keys[i] = handleKey{device: h.Device, id: h.ID, host: true}
	}
	return keys
}

func (s *Scheduler) own(owner string, keys []handleKey) error {
	s.ownMu.Lock()
	defer s.ownMu.Unlock()
	for _, k := range keys {
		if have, ok := s.owners[k]; ok && have != owner {
			return lanes.Wrap("own", true, fmt.Errorf("%w: %s is already %s", ErrNotYours, describeHandle(k), describeOwner(have)))
		}
	}
	for _, k := range keys {
		s.owners[k] = owner
	}
	return nil
}

func describeHandle(k handleKey) string {
	if k.host {
		return fmt.Sprintf("host buffer %d", k.id)
	}
	return fmt.Sprintf("buffer %d", k.id)
}

func describeOwner(owner string) string {
	if owner == shared {
		return "shared"
	}
	return fmt.Sprintf("owned by tenant %q", owner)
}

// checkOwnership refuses a batch that names another tenant's buffer, host
// staging or program, before anything is routed. It reads under a shared
// lock, so tenants check in parallel; only the first batch of a new program
// takes the lock exclusively, to record it as the tenant's.
func (s *Scheduler) checkOwnership(tenant string, b *lanes.Batch) error {
	s.ownMu.RLock()
	err := s.checkOwnershipLocked(tenant, b)
	registered := b.Program == nil || s.programs[b.Program.ID] == tenant
	s.ownMu.RUnlock()
	if err != nil || registered {
		return err
	}
	s.ownMu.Lock()
	defer s.ownMu.Unlock()
	if err := s.checkOwnershipLocked(tenant, b); err != nil { // the program may have been registered meanwhile
		return err
	}
	s.programs[b.Program.ID] = tenant
	return nil
}

func (s *Scheduler) checkOwnershipLocked(tenant string, b *lanes.Batch) error {
	if b.Program != nil {
		if owner, ok := s.programs[b.Program.ID]; ok && owner != tenant {
			return fmt.Errorf("%w: program %s was registered by tenant %q; register your own under another name", ErrNotYours, b.Program.ID, owner)
		}
	}
	for i, e := range b.Entries {
		if e.Invoke != nil {
			if owner, ok := s.programs[e.Invoke.Program]; ok && owner != tenant {
				return fmt.Errorf("%w: entry %d invokes program %s of tenant %q", ErrNotYours, i, e.Invoke.Program, owner)
			}
		}
	}
	return s.checkHandlesLocked(tenant, b.ForHandles)
}

// checkHandlesLocked checks every handle a walk visits (ownMu held).
func (s *Scheduler) checkHandlesLocked(tenant string, walk func(func(cuda.Buffer) error, func(cuda.HostBuffer) error) error) error {
	if len(s.owners) == 0 && !s.cfg.StrictOwnership {
		return nil // nothing is owned: nothing can be another tenant's
	}
	check := func(k handleKey) error {
		owner, ok := s.owners[k]
		switch {
		case ok && owner != shared && owner != tenant:
			return fmt.Errorf("%w: the batch names %s, owned by tenant %q; a tenant may use only its own buffers and shared ones", ErrNotYours, describeHandle(k), owner)
		case !ok && s.cfg.StrictOwnership:
			return fmt.Errorf("%w: the batch names %s, which no tenant owns and is not shared; Own or Share it first", ErrNotYours, describeHandle(k))
		}
		return nil
	}
	return walk(func(b cuda.Buffer) error {
		return check(handleKey{device: b.Device, id: b.ID})
	}, func(h cuda.HostBuffer) error {
		return check(handleKey{device: h.Device, id: h.ID, host: true})
	})
}

// checkStaged checks a staged program's handles (slots and compute) for a
// tenant.
func (s *Scheduler) checkStaged(tenant string, st *lanes.Staged) error {
	if err := checkTenant(tenant); err != nil {
		return err
	}
	if st == nil {
		return fmt.Errorf("%w: nil staged program", lanes.ErrStagedInput)
	}
	s.ownMu.RLock()
	defer s.ownMu.RUnlock()
	return s.checkHandlesLocked(tenant, st.ForHandles)
}
