// Package schedhook is what a front and a lane host reach in the
// in-process scheduler (package actors) beyond its public API: the checks
// both make so they answer as one process does, a scheduler's batch
// bounds, and a submit that remembers a batch's ownership check. Package
// actors fills the hooks in at init; a user never calls them.
package schedhook

import (
	"context"
	"sync/atomic"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
)

// Hooks package actors sets at init.
var (
	// CheckFits refuses an allocation larger than the device's whole
	// memory (errors.Is actors.ErrInvalidArgument and
	// cuda.ErrOutOfMemory), as the scheduler does before it allocates.
	CheckFits func(dev cuda.Device, spec cuda.BufferSpec) error
	// CheckTenant says why name is no tenant's name (errors.Is
	// actors.ErrInvalidTenant), or nil.
	CheckTenant func(name string) error
	// MeasureBatch is what a scheduler's batch bounds bound of a batch:
	// its commands (an invocation counts its segment's, a patch one), its
	// upload and patch bytes, and the largest of them.
	MeasureBatch func(b *lanes.Batch) (commands int, bytes, largest int64)
	// BatchBounds are the most commands and upload bytes one batch may
	// carry on scheduler s (an *actors.Scheduler).
	BatchBounds func(s any) (entries int, bytes int64)
	// SubmitNotifyMemo is scheduler s's SubmitNotify for a batch
	// submitted again and again: memo remembers its ownership check (nil:
	// SubmitNotify).
	SubmitNotifyMemo func(s any, ctx context.Context, tenant string, b lanes.Batch, memo *OwnershipMemo, ended func(lanes.Pending)) (lanes.Pending, error)
)

// OwnershipMemo remembers that a batch passed a scheduler's ownership
// check for a tenant, so that the same batch (the same Entries, Retain and
// Patches slices), submitted again by the same tenant through
// the scheduler's submit with a memo ([SubmitNotifyMemo]), skips the check until ownership changes
// anywhere in the scheduler (an Own, Share or free, a tenant forgotten, a
// program claimed or released). The lane still checks that each handle is
// live.
//
// A batch changed in place is not seen: its change runs unchecked. Keep
// a memo only where code that never rewrites its batch's handles reaches
// it (a lane host keeps one per encoded step), never where a tenant
// chooses it. The zero value remembers nothing; a memo is safe for
// concurrent use.
type OwnershipMemo struct {
	v atomic.Pointer[ownershipVerdict]
}

// ownershipVerdict is one passed check: by whom, of which batch, and
// under which generation of the scheduler's ownership.
type ownershipVerdict struct {
	s      any // the scheduler
	tenant string
	batch  batchIdentity
	gen    uint64
}

// batchIdentity is which batch a verdict is of: the slices that name its
// handles, by their arrays and lengths. Another batch is checked anew; a
// batch changed in place is not seen (hence the memo's rule).
type batchIdentity struct {
	entries *lanes.Entry
	retain  *cuda.Buffer
	patches *lanes.Patch
	lens    [3]int
}

func identityOf(b *lanes.Batch) batchIdentity {
	id := batchIdentity{lens: [3]int{len(b.Entries), len(b.Retain), len(b.Patches)}}
	if len(b.Entries) > 0 {
		id.entries = &b.Entries[0]
	}
	if len(b.Retain) > 0 {
		id.retain = &b.Retain[0]
	}
	if len(b.Patches) > 0 {
		id.patches = &b.Patches[0]
	}
	return id
}

// Holds reports whether the memo's last verdict stands for b, checked by
// scheduler s at ownership generation gen (which the caller holds still).
func (m *OwnershipMemo) Holds(s any, gen uint64, tenant string, b *lanes.Batch) bool {
	if m == nil {
		return false
	}
	v := m.v.Load()
	return v != nil && v.s == s && v.gen == gen && v.tenant == tenant && v.batch == identityOf(b)
}

// Passed records a check of b by scheduler s that passed at generation
// gen (which the caller holds still).
func (m *OwnershipMemo) Passed(s any, gen uint64, tenant string, b *lanes.Batch) {
	if m != nil {
		m.v.Store(&ownershipVerdict{s: s, tenant: tenant, batch: identityOf(b), gen: gen})
	}
}
