// What a front reports of its hosts: their status, standing and round
// trips, and what the process's endpoint refused.

package remote

import (
	"time"

	"github.com/lanesched/lanes/remote/internal/front"
	"github.com/lanesched/lanes/remote/internal/system"
)

// HostHealth is a host's standing with a front.
type HostHealth uint8

// Host states.
const (
	HostJoining HostHealth = iota // started or asked to join; not registered yet
	HostServing                   // registered under its epoch: routed to
	HostLost                      // lost: its calls ended, its tenants' state gone; rejoining or restarting
	HostRefused                   // registration refused: another protocol version (for good), or the host is full or leaving (asked again)
	HostStopped                   // the front stopped
	HostLeft                      // left when asked to, its work done: its tenants move; a host at an address is asked to join again
)

// String names the state.
func (s HostHealth) String() string { return front.HostHealth(s).String() }

// HostStatus is a host as its front sees it.
type HostStatus struct {
	Name     string
	Address  string
	Health   HostHealth
	Epoch    uint64    // the current (or last) registration
	Tenants  int       // tenants placed on it under its current epoch
	InFlight int       // calls in flight on it
	Losses   int       // times it was lost
	Restarts int       // times the front started it again
	Stale    uint64    // messages dropped for carrying an epoch not current
	Refusal  string    // why its registration was refused
	LostHow  string    // how it was last lost
	PID      int       // the launched host's process id; 0 for a host at a fixed address
	Since    time.Time // when it entered Health
	HostName string    // the name the host gave itself (lanehost --name)
	Lanes    int       // the lanes it serves (its devices' together): its share of new tenants
	// Runtime is the runtime fingerprint of the host's programs: a
	// program a batch declares or invokes on it carries it
	// (programs.ID.Runtime; lanehost's default "lanes/<backend>").
	Runtime string
	// RoundTrip is where sampled calls' time went since the host last
	// registered: the remote's cost beside the lanes' own.
	RoundTrip RoundTrip
	// FromCluster: the front found the host in its cluster; Member: the
	// host is a member now (a host that left the membership takes no new
	// tenants, and is not joined again until it is one again).
	FromCluster, Member bool
	// DataPlane: the registration's traffic goes (for a host lost or
	// left, went) through a same-host data plane (shared memory), not the
	// remote; DataPlaneSent and DataPlaneRead count its records each way.
	DataPlane                    bool
	DataPlaneSent, DataPlaneRead uint64
	// NoDataPlane says why the registration's traffic takes the remote
	// when it does: the front or the host keeps to it (NoDataPlane), the
	// front is on another machine, or the plane offered could not be
	// opened (another PID namespace, say).
	NoDataPlane string
	// AreaUploads counts the uploads written into the data plane's upload
	// area rather than carried in their messages (HostConfig.UploadAreaBytes)
	// since the host last registered (each registration has a plane of its
	// own); AreaBytesInUse is the area's bytes held by calls in flight.
	AreaUploads, AreaBytesInUse uint64
}

// hostStatus is a host's status as the front reports it.
func hostStatus(st front.HostStatus) HostStatus {
	return HostStatus{
		Name:           st.Name,
		Address:        st.Address,
		Health:         HostHealth(st.Health),
		Epoch:          st.Epoch,
		Tenants:        st.Tenants,
		InFlight:       st.InFlight,
		Losses:         st.Losses,
		Restarts:       st.Restarts,
		Stale:          st.Stale,
		Refusal:        st.Refusal,
		LostHow:        st.LostHow,
		PID:            st.PID,
		Since:          st.Since,
		HostName:       st.HostName,
		Lanes:          st.Lanes,
		Runtime:        st.Runtime,
		RoundTrip:      RoundTrip(st.RoundTrip),
		FromCluster:    st.FromCluster,
		Member:         st.Member,
		DataPlane:      st.DataPlane,
		DataPlaneSent:  st.DataPlaneSent,
		DataPlaneRead:  st.DataPlaneRead,
		NoDataPlane:    st.NoDataPlane,
		AreaUploads:    st.AreaUploads,
		AreaBytesInUse: st.AreaBytesInUse,
	}
}

// RoundTrip is where sampled calls to a host spent their time, as means
// since the host last registered. Wire is measured on the front's clock
// less the host's own time, so it holds across machines whose clocks
// differ; the rest are on the host's clock.
type RoundTrip struct {
	// Samples is how many sampled calls the means hold: 0 while none
	// ended, or with a host that sets no times (one older than the
	// front), when every field is 0.
	Samples uint64
	// Total is from the front queuing the submission to the front
	// taking its receipt off the wire.
	Total time.Duration
	// Wire is both ways through the remote (the front's sender queue, the
	// front's and the host's endpoints and actors' mailboxes, gRPC and the
	// network): Total less the host's time.
	Wire time.Duration
	// HostQueue is from the host's actor taking the submission off the
	// wire to its scheduler admitting it.
	HostQueue time.Duration
	// Lane is from admission to the end on its lane: what the same
	// submission costs in one process.
	Lane time.Duration
	// HostReply is from the end to the receipt handed to the remote.
	HostReply time.Duration
}

// WireStats is what an endpoint's guard refused: the process's fronts and
// host share one endpoint, so one set of counts.
type WireStats struct {
	// Unauthenticated are calls refused before any message was read: a
	// connection whose certificate was not checked (the handshake refuses
	// one of another authority before this), or a call that is not the
	// remote's stream.
	Unauthenticated uint64
	// Malformed are connections ended for what they sent: a batch before
	// the connection said who it is, an address it said it is where
	// another process listens, an index out of range, an unknown
	// serializer, a type this build does not know.
	Malformed uint64
	// Dropped are messages dropped unread: a system message naming an
	// actor that is not the sender's (a forged Terminated, Watch or
	// Unwatch), one no peer may send (PoisonPill, Stop), or one for an
	// actor this endpoint does not have.
	Dropped uint64
	// Panics are panics in the remote's handler, recovered: the connection
	// ended, the process served on.
	Panics uint64
	// Handshakes are connections refused at their TLS handshake: no
	// certificate, one of another authority or token, not TLS at all, or
	// none within 5 s (each is logged, at most once a second).
	Handshakes uint64
}

// String says what was refused, or "nothing refused".
func (s WireStats) String() string { return system.WireStats(s).String() }
