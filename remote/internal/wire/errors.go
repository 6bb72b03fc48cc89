// What a front answers when a lane host is not there to serve: a host
// lost, a tenant whose device state went with it, no host to place on, a
// host refused at registration.

package wire

import (
	"fmt"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/codes"
)

// ErrHostLost marks a call that a lane host did not answer because the
// host was lost (killed, crashed, hung past the heartbeat bound, or cut
// off). A submission in flight on it ends with a *HostLostError that is
// also errors.Is actors.ErrIndeterminate: it may or may not have run.
var ErrHostLost = codes.NewSentinel(codes.HostLost, "remote: lane host lost")

// HostLostError is the end of a call in flight on a host that was lost.
type HostLostError struct {
	Host  string // the host's name
	Epoch uint64 // the registration the call was sent under
	Cause string // how the front learned it, in words: HostStatus.LostHow of the loss ("silent for 1.2s (bound 1s)", "the remote's connection to its address ended (…)", "the host dropped the registration: …", "the front stopped", …)
}

// Error says which host, and that the outcome is unknown.
func (e *HostLostError) Error() string {
	return fmt.Sprintf("remote: lane host %s (epoch %d) lost (%s) with the call in flight: it may or may not have run; the tenant's device state there is gone", e.Host, e.Epoch, e.Cause)
}

// Unwrap makes it errors.Is ErrHostLost and actors.ErrIndeterminate.
func (e *HostLostError) Unwrap() []error { return []error{ErrHostLost, actors.ErrIndeterminate} }

// Class is host_lost: not retryable as it stands (its effect is unknown),
// maybe submitted.
func (e *HostLostError) Class() cuda.Class { return codes.HostLost.Class() }

// ErrDeviceStateLost marks a tenant's call refused because the host that
// held its device state (its buffers, what it uploaded) was lost. Nothing
// is replayed elsewhere: the tenant calls Front.Forget, then sets itself up
// again (allocates and uploads), and is placed on a serving host.
var ErrDeviceStateLost = codes.NewSentinel(codes.DeviceStateLost, "remote: the tenant's device state was lost with its host")

// DeviceStateLostError is the refusal of a tenant's call after its host
// was lost, or left; definitely not submitted.
type DeviceStateLostError struct {
	Tenant string
	Host   string
	Epoch  uint64 // the registration that held the tenant's state
	// Left: the host left when asked to (Host.Leave, lanehost on SIGTERM)
	// after its last submission ended: nothing of the tenant's was lost
	// in flight; it moves to another host.
	Left bool
}

// Error says what was lost and what to do.
func (e *DeviceStateLostError) Error() string {
	if e.Left {
		return fmt.Sprintf("remote: tenant %q: lane host %s (epoch %d) left, its work done; move: call Forget, then allocate and upload again on another host (definitely not submitted)",
			e.Tenant, e.Host, e.Epoch)
	}
	return fmt.Sprintf("remote: tenant %q: its device state on lane host %s (epoch %d) was lost with the host; call Forget, then allocate and upload again (definitely not submitted)",
		e.Tenant, e.Host, e.Epoch)
}

// Unwrap makes it errors.Is ErrDeviceStateLost.
func (e *DeviceStateLostError) Unwrap() error { return ErrDeviceStateLost }

// ErrHostLeaving marks a submission refused because its tenant's host is
// leaving (asked to: Host.Leave, lanehost on SIGTERM): the host finishes
// the submissions it has and takes no new ones; definitely not submitted.
// Reads and the tenant's other device-state calls still work until the
// host left; then its calls answer *DeviceStateLostError with Left set.
var ErrHostLeaving = codes.NewSentinel(codes.HostLeaving, "remote: lane host leaving")

// HostLeavingError is the refusal of a submission to a leaving host.
type HostLeavingError struct {
	Tenant string
	Host   string
}

// Error says what happened and what comes next.
func (e *HostLeavingError) Error() string {
	return fmt.Sprintf("remote: tenant %q: lane host %s is leaving and takes no new submissions (definitely not submitted); read what you need back, then move once it left", e.Tenant, e.Host)
}

// Unwrap makes it errors.Is ErrHostLeaving.
func (e *HostLeavingError) Unwrap() error { return ErrHostLeaving }

// ErrNoHost marks a call refused because no lane host is serving now (all
// lost, restarting or not yet registered): retry later; definitely not
// submitted.
var ErrNoHost = codes.NewSentinel(codes.NoHost, "remote: no lane host is serving")

// ErrRefused marks a host the front refused at registration (another
// protocol version, a malformed hello: for good), or that refused the
// front for now (it serves its most fronts, or it is leaving: a running
// front asks it again).
var ErrRefused = codes.NewSentinel(codes.RegistrationRefused, "remote: registration refused")

// RefusedError is a registration refused, errors.Is ErrRefused: by the
// front for good (another protocol, a malformed hello: not retryable), or
// by the host for now (it serves its most fronts, or it is leaving:
// ForNow, retryable: a front that runs asks again on its own).
type RefusedError struct {
	Host   string
	Reason string
	ForNow bool
}

// Error says which host refused, and why.
func (e *RefusedError) Error() string {
	if e.ForNow {
		return fmt.Sprintf("%v: host %s refused for now: %s (retry later)", ErrRefused, e.Host, e.Reason)
	}
	return fmt.Sprintf("%v: host %s: %s", ErrRefused, e.Host, e.Reason)
}

// Unwrap makes it errors.Is ErrRefused.
func (e *RefusedError) Unwrap() error { return ErrRefused }

// Class is registration_refused, retryable when the host refused for now.
func (e *RefusedError) Class() cuda.Class {
	c := codes.RegistrationRefused.Class()
	c.Retryable = e.ForNow
	return c
}

// ErrStopped marks a call on a front that was stopped: it is
// actors.ErrStopped, the one sentinel of a stopped scheduler or front.
var ErrStopped = actors.ErrStopped

// ErrConfig marks a front's or a host's configuration refused before
// anything started: errors.Is finds it, the message says what to fix.
var ErrConfig = codes.NewSentinel(codes.InvalidArgument, "remote: bad configuration")
