// Receipts of submissions refused before any device work, on either side
// of the wire.

package remote

import (
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/lanes"
)

// refusedReceipt is the wire receipt of a submission the host turned away
// before any device work.
func refusedReceipt(epoch, call uint64, tenant string, err error) *wirepb.Receipt {
	return receiptToWire(epoch, call, lanes.Receipt{Outcome: lanes.OutcomeRefused, Err: err, Tenant: tenant, Lane: -1}, nil)
}
