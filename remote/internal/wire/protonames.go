// The names both sides of the wire agree on: their actors' and the
// administrative calls a front makes on a lane.

package wire

// The administrative calls a front makes on a tenant's lane
// (wirepb.LaneAdmin.op).
const (
	LaneSeal        = 1
	LanePreparation = 2
	LaneCatalog     = 3
)

// FrontActorName is the name of a front's actor: hosts answer it at the
// front's address and this name.
const FrontActorName = "lanefront"

// HostActorName is the name of a lane host's actor: a front reaches a host at
// its address and this name.
const HostActorName = "lanehost"
