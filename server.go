package lanes

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
)

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
	// registered (remote.FrontConfig.JoinTimeout). A host lost later ends its
	// calls in flight indeterminate, and its tenants' calls answer
	// device_state_lost until they Forget and set up again (on it once it
	// serves again, or on another host).
	// A host's lanes are its own: set Scheduler only with Devices.
	Hosts *remote.FrontConfig
}

// Start starts a server as cfg says: an in-process scheduler over
// cfg.Devices, or a front to cfg.Hosts. A bad configuration is refused
// with an error that Classify calls invalid_argument.
func Start(ctx context.Context, cfg Config) (_ *Server, err error) {
	defer named(&err)
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
		if _, err := backend.Of(d); err != nil {
			return nil, fmt.Errorf("%w: lanes.Config: Devices[%d] is %v", actors.ErrInvalidArgument, i, err)
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
