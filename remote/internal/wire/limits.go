// The limits a host holds its fronts to, which fronts check first.

package wire

import (
	"github.com/lanesched/lanes/actors"
)

// MaxTemplates bounds the templated batches a host keeps per epoch; past
// it, a template is decoded for each submission that carries it.
const MaxTemplates = 1 << 14

// MaxReadBytes bounds one Read's bytes (a receipt's read-back).
const MaxReadBytes = MaxHostBytes

// MaxTenantName is the longest tenant name a front takes, in bytes: a
// host scopes each to its front (scoped), within actors.MaxTenantName.
const MaxTenantName = actors.MaxTenantName - 16

// MaxStagedPerTenant bounds the staged programs a host keeps for one
// tenant of a front, and MaxStagedSlots the slots of one program.
const (
	MaxStagedPerTenant = 64
	MaxStagedSlots     = 1 << 10
)
