package lanes

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
)

// Server serves tenants' work: an in-process scheduler over devices of
// this process, or a front to lane host processes. Both keep each tenant's
// buffers its own, run its batches in the order it submitted them on one
// lane, and end every accepted submission exactly once. It is safe for
// concurrent use.
type Server interface {
	// Alloc allocates a buffer that the tenant alone may name, on the
	// device (in process) or the host (lane hosts) its work runs on.
	Alloc(ctx context.Context, tenant string, spec BufferSpec) (Buffer, error)
	// Upload writes data into dst, a region of the tenant's buffer, after
	// the tenant's submissions accepted before it, and waits for it: one
	// submission per 8 MiB. Like Submit, it may return a
	// *actors.DetachedError when ctx ends while it waits (the write goes
	// on).
	Upload(ctx context.Context, tenant string, dst Region, data []byte) error
	// Read copies a region of the tenant's buffer (or of a shared one)
	// back, after the tenant's submissions accepted before it.
	Read(ctx context.Context, tenant string, src Region) ([]byte, error)
	// Free frees one of the tenant's buffers after the tenant's
	// submissions accepted before it have ended (it waits for them); a
	// submission accepted later that names the buffer is refused.
	Free(ctx context.Context, tenant string, b Buffer) error
	// Forget frees every buffer the tenant allocated and forgets it: what
	// it registered, its routing and its fault record. It is refused
	// (retryable) while the tenant has work in flight.
	Forget(ctx context.Context, tenant string) error
	// Submit runs a batch for the tenant and waits for its receipt. An
	// error says why it did not succeed; Classify says what it means.
	Submit(ctx context.Context, tenant string, b Batch) (Receipt, error)
	// SubmitAsync admits a batch and returns at once; the Pending ends
	// exactly once. An error here means it was not admitted (nothing ran).
	// The batch belongs to the server until Done is closed.
	SubmitAsync(ctx context.Context, tenant string, b Batch) (Pending, error)
	// Kernels are the kernels a batch may launch: the device's (in
	// process), or the built-in kernels and FrontConfig.Modules' (lane
	// hosts).
	Kernels() Kernels
	// Status says where work runs and how each lane or host stands.
	Status() Status
	// Stop drains: every pending submission ends, and every Upload and
	// Free going on (detached or not) goes on to its end, then the server
	// stops. A Stop whose context ends first cuts those short: an Upload
	// part-written ends indeterminate, a Free not yet done ends stopped.
	// Devices given in Config.Devices stay open (they are the caller's).
	// If ctx ends first, Stop returns: in process the drain goes on (Stop
	// again waits for it); through a front, the calls still in flight end
	// indeterminate then (the front's answers stop with it). Give Stop a
	// context that outlasts the work in flight.
	Stop(ctx context.Context) error
	// Scheduler is the in-process scheduler behind the server, for what
	// only it does; nil on lane hosts.
	Scheduler() *actors.Scheduler
	// Front is the front to lane hosts behind the server, for what only it
	// does; nil in process.
	Front() *remote.Front
}

// Pending is a submission in flight, whichever side runs it.
type Pending = lanes.Pending

// Status is how a server stands.
type Status struct {
	// InProcess: the lanes run in this process (Lanes); else on lane
	// hosts (Hosts).
	InProcess bool
	// InFlight counts submissions and operations admitted and not ended.
	InFlight int
	// Serving and Total count the lanes (in process) or hosts that take
	// work now, and all of them.
	Serving, Total int
	Lanes          []actors.LaneStatus
	Hosts          []remote.HostStatus
}

// Config says where a server's lanes run: set exactly one of Devices (in
// this process) and Hosts (lane hosts, through a front).
type Config struct {
	// Devices are the devices of this process whose lanes serve tenants;
	// Scheduler tunes them (its own Devices field must be empty; its
	// LanesPerDevice defaults to 1, where lanehost's --lanes is 4).
	Devices   []Device
	Scheduler actors.Config
	// Hosts, when set, serves tenants from lane host processes through a
	// front: hosts at addresses, hosts the front launches itself, or a
	// cluster's (remote.FrontConfig). Start returns once every host has
	// registered (FrontConfig.JoinTimeout). A host lost later ends its
	// calls in flight indeterminate, and its tenants' calls answer
	// device_state_lost until they Forget and set up again (on it once it
	// serves again, or on another host).
	// A host's lanes are its own: set Scheduler only with Devices.
	Hosts *remote.FrontConfig
}

// Start starts a server as cfg says: an in-process scheduler over
// cfg.Devices, or a front to cfg.Hosts. A bad configuration is refused
// with an error that Classify calls invalid_argument.
func Start(ctx context.Context, cfg Config) (Server, error) {
	switch {
	case ctx == nil:
		return nil, fmt.Errorf("%w: lanes.Start: a nil context.Context; pass context.Background()", actors.ErrInvalidArgument)
	case len(cfg.Devices) > 0 && cfg.Hosts != nil:
		return nil, fmt.Errorf("%w: lanes.Config: both Devices and Hosts are set; set Devices to serve in this process, Hosts to serve from lane hosts", actors.ErrInvalidArgument)
	case cfg.Hosts != nil && !reflect.ValueOf(cfg.Scheduler).IsZero():
		return nil, fmt.Errorf("%w: lanes.Config: Scheduler is set with Hosts; a lane host's lanes are its own (lanehost's flags: --lanes, ...), so set Scheduler only with Devices", actors.ErrInvalidArgument)
	case cfg.Hosts != nil:
		f, err := remote.StartFront(ctx, *cfg.Hosts)
		if err != nil {
			return nil, err
		}
		ks := kernels.Builtin()
		for _, m := range cfg.Hosts.Modules {
			ks = ks.With(m.Kernels)
		}
		return newServer(&onHosts{f: f, ks: ks}), nil
	case len(cfg.Devices) == 0:
		return nil, fmt.Errorf("%w: lanes.Config: no Devices and no Hosts; open a device (sim.New, driver.Open) and set Devices, or set Hosts", actors.ErrInvalidArgument)
	case len(cfg.Scheduler.Devices) > 0:
		return nil, fmt.Errorf("%w: lanes.Config: Scheduler.Devices is set; give the devices in Config.Devices alone", actors.ErrInvalidArgument)
	}
	seen := map[uint64]int{}
	for i, d := range cfg.Devices {
		if d == nil {
			return nil, fmt.Errorf("%w: lanes.Config: Devices[%d] is nil", actors.ErrInvalidArgument, i)
		}
		if j, dup := seen[d.Info().Instance]; dup {
			return nil, fmt.Errorf("%w: lanes.Config: Devices[%d] is Devices[%d] again; give each device once (Scheduler.LanesPerDevice gives a device more lanes)", actors.ErrInvalidArgument, i, j)
		}
		seen[d.Info().Instance] = i
	}
	sc := cfg.Scheduler
	sc.Devices = cfg.Devices
	s, err := actors.Start(ctx, sc)
	if err != nil {
		return nil, err
	}
	for _, l := range s.Lanes() {
		if errors.Is(l.Cause, cuda.ErrDeviceClosed) {
			_ = s.Stop(ctx)
			return nil, fmt.Errorf("%w: lanes.Config: Devices[%d] is closed; open it again", actors.ErrInvalidArgument, l.Device)
		}
	}
	return newServer(newInProcess(s, cfg.Devices)), nil
}
