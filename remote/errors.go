// What a front or a lane host answers when it cannot serve: the errors
// of remote, defined with the wire that carries them (remote/internal/wire)
// and named here, where a user finds them. errors.Is and errors.As take
// these names; the types' fields are listed on each.

package remote

import (
	"github.com/lanesched/lanes/remote/internal/system"
	"github.com/lanesched/lanes/remote/internal/wire"
)

// The sentinels a call's error is errors.Is.
var (
	// ErrHostLost marks a call that a lane host did not answer because the
	// host was lost (killed, crashed, hung past the heartbeat bound, or cut
	// off). A submission in flight on it ends with a *HostLostError that
	// is also errors.Is actors.ErrIndeterminate: it may or may not have run.
	ErrHostLost = wire.ErrHostLost
	// ErrDeviceStateLost marks a tenant's call refused because the host
	// that held its device state (its buffers, what it uploaded) was lost.
	// Nothing is replayed elsewhere: the tenant calls Front.Forget, then
	// sets itself up again, and is placed on a serving host.
	ErrDeviceStateLost = wire.ErrDeviceStateLost
	// ErrHostLeaving marks a submission refused because its tenant's host
	// is leaving (Host.Leave, lanehost on SIGTERM): it finishes what it
	// has and takes no new work; definitely not submitted.
	ErrHostLeaving = wire.ErrHostLeaving
	// ErrNoHost marks a call refused because no lane host is serving now
	// (all lost, restarting or not yet registered): retry later;
	// definitely not submitted.
	ErrNoHost = wire.ErrNoHost
	// ErrRefused marks a registration refused: by the front for good
	// (another protocol, a malformed hello) or by the host for now (it
	// serves its most fronts, or it is leaving).
	ErrRefused = wire.ErrRefused
	// ErrStopped marks a call on a stopped front: actors.ErrStopped.
	ErrStopped = wire.ErrStopped
	// ErrConfig marks a front's or a host's configuration refused before
	// anything started; the message says what to fix.
	ErrConfig = wire.ErrConfig
	// ErrWire marks a message that broke the wire's contract (malformed,
	// over a limit); the message says which field.
	ErrWire = wire.ErrWire
	// ErrUnauthenticated marks a front or host whose peer refused its
	// credential, or did not prove it holds the same one: the token of
	// another file, or a certificate another CA signed. Nothing was
	// submitted.
	ErrUnauthenticated = system.ErrUnauthenticated
	// ErrUnknownCall marks a library call no lane host serves (not in its
	// HostConfig.Calls).
	ErrUnknownCall = wire.ErrUnknownCall
)

// The errors a call's error is errors.As.
type (
	// HostLostError is the end of a call in flight on a host that was
	// lost: Host (its name), Epoch (the registration the call was sent
	// under) and Cause (how the front learned it, as HostStatus.LostHow
	// says). It is errors.Is ErrHostLost and actors.ErrIndeterminate.
	HostLostError = wire.HostLostError
	// DeviceStateLostError is the refusal of a tenant's call after its
	// host was lost, or left (Left: after its last submission ended,
	// nothing lost in flight): Tenant, Host, Epoch. Definitely not
	// submitted; errors.Is ErrDeviceStateLost.
	DeviceStateLostError = wire.DeviceStateLostError
	// HostLeavingError is the refusal of a submission to a leaving host:
	// Tenant, Host. errors.Is ErrHostLeaving.
	HostLeavingError = wire.HostLeavingError
	// RefusedError is a registration refused (Host, Reason), by the front
	// for good or by the host for now (ForNow: retryable). errors.Is
	// ErrRefused.
	RefusedError = wire.RefusedError
	// PeerError is an error a lane host reported for a call: its stable
	// Code (cuda.Code), its message (Msg), the names of the sentinels it
	// wrapped (Kinds; nil from an older host, when errors.Is matches every
	// sentinel of the code), and for a submission the host withdrew, the
	// front's caller's context error (Cause). errors.Is finds those
	// sentinels and Cause on this side; Class is its classification.
	PeerError = wire.PeerError
)
