// The lane actor's mailbox messages.

package actors

import (
	"context"
	"sync/atomic"

	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
)

// The lane actor's messages. They are plain data: a call id names the
// waiting caller in the scheduler's registry instead of a channel or a
// closure riding in the message, so the same messages could reach a lane on
// another host through protoactor's remote. (Batches name device addresses,
// which only mean something on their own host; a remote lane would take
// plans by name instead.)

// submitRequest asks a lane to submit a batch.
type submitRequest struct {
	Call     uint64
	Tenant   string
	Batch    lanes.Batch
	ctx      context.Context // the submitter's; host-local, like the call
	weight   int             // the tenant's weight in the lane's fair queue
	commands int             // the batch's commands (Scheduler.checkSize)
}

// withdrawRequest tells a lane that a submission's context ended: the
// batch, if it still waits in the lane's fair queue, is withdrawn at once
// (Scheduler.watch); on the stream already, it runs and ends as it does.
type withdrawRequest struct{ call uint64 }

// adminOp is an administrative operation on a lane.
type adminOp uint8

// Administrative operations.
const (
	opConfigure adminOp = iota + 1
	opSeal
	opTrim
	opCatalog
	opSynchronize
	opPreparation
)

// String names the operation.
func (o adminOp) String() string {
	return [...]string{"unknown", "configure", "seal", "trim", "catalog", "synchronize", "preparation"}[min(int(o), 6)]
}

// adminRequest asks a lane for an administrative operation.
type adminRequest struct {
	Call     uint64
	Op       adminOp
	Capacity int // for opConfigure
}

// pollFences tells a lane to poll its fences.
type pollFences struct{}

// forgetTenant tells a lane to forget a forgotten tenant's programs and
// executables.
type forgetTenant struct {
	tenant   string
	programs []programs.ID
}

// serveQueue tells a lane to serve its fair queue (after a staged replay,
// once the messages that arrived meanwhile are received).
type serveQueue struct{}

// stopLane tells a lane to drain, synchronize, trim and stop.
type stopLane struct{ Call uint64 }

// failLane tells a lane its device failed elsewhere (a sticky error seen by
// another lane): it drains what it can and leaves routing for good.
type failLane struct{ cause error }

// rebuildLane tells a recovering lane to start over on a fresh stream (and
// a fresh cache after a hang), once its device is healthy.
type rebuildLane struct{}

// stagedRequest asks a lane to prepare or replay a staged program. It
// carries the program by pointer and the inputs by value: pinned host
// staging lives on one host, so staged replay is a host-local facility and
// this message never crosses a wire.
type stagedRequest struct {
	Call    uint64
	Prepare bool // capture both variants instead of replaying
	Program *lanecore.Staged
	Inputs  [][]byte
	Outputs [][]byte // the caller's buffers for the outputs (ReplayInto, Repeat)
	Into    bool     // the outputs go into Outputs
	Collect bool
	Repeat  bool   // the last inputs again (Repeat)
	tenant  string // whose replay it is (for the lane's fair queue)
	weight  int
	ctx     context.Context // the caller's
	state   *atomic.Int32   // stagedWaiting, stagedRunning or stagedCanceled
}
