package actors

import (
	"fmt"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
)

// Own records buffers as one tenant's: no other tenant's batch may name
// them. A buffer owned by another tenant, or shared, is refused.
func (s *Scheduler) Own(tenant string, bufs ...cuda.Buffer) error {
	s.ownMu.Lock()
	defer s.ownMu.Unlock()
	for _, b := range bufs {
		k := [2]uint64{b.Device, b.ID}
		if owner, ok := s.owners[k]; ok && owner != tenant {
			return fmt.Errorf("%w: buffer %d is already %s", ErrNotYours, b.ID, describeOwner(owner))
		}
	}
	for _, b := range bufs {
		s.owners[[2]uint64{b.Device, b.ID}] = tenant
	}
	return nil
}

// Share records buffers as shared by every tenant (plan-owned weights).
func (s *Scheduler) Share(bufs ...cuda.Buffer) error { return s.Own("", bufs...) }

func describeOwner(owner string) string {
	if owner == "" {
		return "shared"
	}
	return fmt.Sprintf("owned by tenant %q", owner)
}

// checkOwnership refuses a batch that names another tenant's buffer or
// program, before anything is routed. It reads under a shared lock, so
// tenants check in parallel; only the first batch of a new program takes
// the lock exclusively, to record it as the tenant's.
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
		if len(s.owners) == 0 && !s.cfg.StrictOwnership {
			continue // nothing is owned: no buffer can be another tenant's
		}
		err := e.Command.ForRegions(func(r cuda.Region) error {
			owner, ok := s.owners[[2]uint64{r.Buffer.Device, r.Buffer.ID}]
			switch {
			case ok && owner != "" && owner != tenant:
				return fmt.Errorf("%w: entry %d names buffer %d, owned by tenant %q; a tenant may use only its own buffers and shared ones", ErrNotYours, i, r.Buffer.ID, owner)
			case !ok && s.cfg.StrictOwnership:
				return fmt.Errorf("%w: entry %d names buffer %d, which no tenant owns and is not shared; Own or Share it first", ErrNotYours, i, r.Buffer.ID)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
