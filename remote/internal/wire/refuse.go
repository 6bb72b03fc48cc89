// Receipts of submissions refused before any device work, on either side
// of the wire.

package wire

import (
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/lanes"
)

// RefusedReceipt is the wire receipt of a submission the host turned away
// before any device work.
func RefusedReceipt(epoch, call uint64, tenant string, err error) *wirepb.Receipt {
	return ReceiptToWire(epoch, call, lanes.Receipt{Outcome: lanes.OutcomeRefused, Err: err, Tenant: tenant, Lane: -1}, nil)
}
