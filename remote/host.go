// The lane host's face: its configuration, Serve, and what a running host
// answers. The host itself is remote/internal/host.

package remote

import (
	"context"
	"crypto/tls"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/notstarted"
	"github.com/lanesched/lanes/remote/internal/host"
)

// HostConfig configures a lane host.
type HostConfig struct {
	// Name is the host's name in its front's reports and errors; empty:
	// "host-" and the process id.
	Name string
	// Address is where the host listens (host:port); empty: 127.0.0.1:0
	// (loopback, a port the system picks: Host.Address says which). Any
	// address that is not loopback requires TLS.
	Address string
	// Advertise is the address fronts reach the host at when it is not
	// Address (a NAT, a container's port mapping, a proxy); empty:
	// Address. Not loopback requires TLS.
	Advertise string
	// TLS secures and authenticates the connections both ways with the
	// certificates of your CA (LoadTLS); nil: with certificates rooted in
	// the token (TokenFile), loopback only.
	TLS *tls.Config
	// TokenFile is the token the host and its fronts derive their
	// credentials from when TLS is nil: a file only this user can read
	// (DefaultTokenFile when empty; created when missing). It is never
	// sent; a connection that does not prove it holds it is refused before
	// any of its messages is read.
	TokenFile string
	// Scheduler configures the host's lanes, exactly as a local scheduler:
	// Devices are the devices this host owns (one GPU, usually).
	Scheduler actors.Config
	// Heartbeat is how often the host tells its front it is alive; 0:
	// 100 ms. A front's LostAfter must be a few of these.
	Heartbeat time.Duration
	// Protocol is the wire protocol the host claims at registration; 0 is
	// this build's. Set another only to see a front refuse a host of another
	// version.
	Protocol uint32
	// MaxTemplates bounds the templated batches kept per epoch (0:
	// 16,384); a template past it is answered TemplateUnknown when a
	// Submit names it without its batch, and the front sends it whole.
	MaxTemplates int
	// Calls are the library calls the host serves, by name: a front's
	// batch that carries a cuda.LibraryCall crosses as its declaration, and
	// the host runs the call it serves under the call's name (see
	// CallBuilder); a name it does not serve is refused before any of the
	// batch runs (ErrUnknownCall). nil: none.
	Calls LibraryCalls
	// Modules are modules of one's own kernels the host loads on each of
	// its devices as it starts (kernels.Loader: with their Go references
	// on the simulated device, which runs every kernel through one; the
	// real device checks their declarations against the image). A front
	// that sends a module of the same name (FrontConfig.Modules) is served
	// when it is the same module (its image and declarations), and refused
	// when it is not. nil: none.
	Modules []kernels.Module
	// MaxFronts bounds the fronts the host serves at once (0:
	// 8); one more is refused with the reason.
	MaxFronts int
	// SilentFront is how long a front may send nothing (no call, no probe)
	// before its place goes to a new front that finds the host full (0:
	// 10 s; else 100ms to 1h).
	SilentFront time.Duration
	// NoDataPlane keeps every front's traffic on the remote: no
	// same-host data plane is offered (see "Same-host data plane" in the
	// package doc).
	NoDataPlane bool
	// RingBytes is the data area of each ring of a data plane (0:
	// 4 MiB; a power of two, 4 KiB to 64 MiB).
	RingBytes int
	// UploadAreaBytes is each data plane's upload area, after its rings
	// (0: 16 MiB; whole 4096-byte pages up to 1 GiB; -1:
	// none, every upload crosses in its message): a front writes an upload
	// of 4 KiB or more there, once, while it has room, and the host reads
	// it from there, so a tenant's large upload holds up no one's records
	// in the ring.
	UploadAreaBytes int
	// Cluster makes the host a member of a named cluster, whose fronts
	// find it there (they need not name its address); it leaves the
	// membership when it stops. nil: fronts name its address.
	Cluster *ClusterConfig
	// Logf hears what the host does not answer anyone (a refused
	// registration, a malformed message); nil: standard error.
	Logf func(format string, args ...any)
}

// room is the configuration as host takes it.
func (c HostConfig) room() host.Config {
	return host.Config{
		Name:            c.Name,
		Address:         c.Address,
		Advertise:       c.Advertise,
		TLS:             c.TLS,
		TokenFile:       c.TokenFile,
		Scheduler:       c.Scheduler,
		Heartbeat:       c.Heartbeat,
		Protocol:        c.Protocol,
		MaxTemplates:    c.MaxTemplates,
		Calls:           c.Calls.room(),
		Modules:         c.Modules,
		MaxFronts:       c.MaxFronts,
		SilentFront:     c.SilentFront,
		NoDataPlane:     c.NoDataPlane,
		RingBytes:       c.RingBytes,
		UploadAreaBytes: c.UploadAreaBytes,
		Cluster:         c.Cluster.room(),
		Logf:            c.Logf,
	}
}

// Host is a running lane host: a scheduler over its devices, served to
// the fronts that join it (up to MaxFronts at once), each under an epoch
// of its own. A front's Join starts a new epoch for that front, and what
// the host held for tenants set up under its old one is dropped; other
// fronts' registrations go on. A nil or zero Host serves nothing: Leave
// and Stop answer ErrStopped, the rest are zero.
type Host struct {
	h *host.Host
}

// room is the host that serves, nil for a nil Host.
func (h *Host) room() *host.Host {
	if h == nil {
		return nil
	}
	return h.h
}

// Serve starts a lane host: its scheduler over cfg.Scheduler's devices
// (which the host closes when it stops) and its actor on the process's
// remote endpoint. A process runs one host (and at most one front) at a
// time, on one endpoint it keeps for its life: the first front or host
// started sets its address and TLS. A host with a Cluster makes that
// endpoint a member, which leaves the cluster when the host stops: a
// process serves at most one cluster host in its life (start the next in
// a new process).
func Serve(ctx context.Context, cfg HostConfig) (*Host, error) {
	h, err := host.Serve(ctx, cfg.room())
	if err != nil {
		return nil, err
	}
	return &Host{h: h}, nil
}

// Address is where fronts reach the host (what a front's Hosts names):
// HostConfig.Advertise if given, else where it listens.
func (h *Host) Address() string {
	if h.room() == nil {
		return ""
	}
	return h.room().Address()
}

// DeviceFault is the sticky error that poisoned one of the host's devices,
// or nil. A poisoned device stays poisoned for the life of its process: a
// host that reports one is replaced (lanehost exits; a front that launched
// it starts another).
func (h *Host) DeviceFault() error {
	if h.room() == nil {
		return nil
	}
	return h.room().DeviceFault()
}

// Epoch is the host's newest registration, 0 before a front joined.
func (h *Host) Epoch() uint64 {
	if h.room() == nil {
		return 0
	}
	return h.room().Epoch()
}

// Fronts is how many fronts the host serves now (registered and welcomed).
func (h *Host) Fronts() int {
	if h.room() == nil {
		return 0
	}
	return h.room().Fronts()
}

// Leave asks the host to leave well: from now on it refuses new
// submissions and allocations (the fronts hear it is leaving and place no
// new tenants on it), finishes every submission it has, then tells its
// fronts it left, whose tenants then move (DeviceStateLostError with
// Left). Reads, frees and forgets still run meanwhile, and after. It
// returns once every front it told has answered that it heard and has
// nothing more in flight on the host (what a front sent before it heard
// is answered first: a submission refused, an operation run), or a
// front's registration ended meanwhile; or with ctx's error
// (the host still leaves: Stop ends what is left, and what a front still
// has in flight on it ends indeterminate there). Stop the host after.
func (h *Host) Leave(ctx context.Context) error {
	if h.room() == nil {
		return errNoHostServed
	}
	return h.room().Leave(ctx)
}

// Listening is where the host serves, as its process's first line says
// it (cmd/lanehost prints it): its address, where it is bound when it
// advertises another, and its membership endpoint in a cluster.
func (h *Host) Listening() Listening {
	if h.room() == nil {
		return Listening{}
	}
	return h.room().Listening()
}

// Scheduler is the host's own scheduler (its lanes' status, say).
func (h *Host) Scheduler() *actors.Scheduler {
	if h.room() == nil {
		return nil
	}
	return h.room().Scheduler()
}

// Stop stops serving: the host's actor first (the front hears no more
// heartbeats and loses it within its bound), then the scheduler (every
// submission in flight ends), then the devices. The process's endpoint
// stays (see Serve).
func (h *Host) Stop(ctx context.Context) error {
	if h.room() == nil {
		return errNoHostServed
	}
	return h.room().Stop(ctx)
}

// Wire is what the process's endpoint refused: connections that did not
// authenticate, malformed ones, messages dropped unread, panics of the
// remote's handler recovered. A front and a host of one process share it.
func (h *Host) Wire() WireStats {
	if h.room() == nil {
		return WireStats{}
	}
	return WireStats(h.room().Wire())
}

// errNoHostServed answers Leave and Stop on a Host Serve did not return.
var errNoHostServed error = &notstarted.Error{Msg: "remote: this Host was not served: use the *Host that remote.Serve returns", Stopped: ErrStopped}
