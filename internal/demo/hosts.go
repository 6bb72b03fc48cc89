// lanedemo --host-per-gpu: the tenants' steps through a front to one lane
// host process per device (remote), or the very same loop on one
// in-process scheduler (--in-process), so the two compare as the same
// work; an out-of-bounds kernel on the first device midway (--fault-host-at)
// shows what a sticky fault costs in each.

package demo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	serving "github.com/lanesched/lanes"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
)

// HostsConfig is the --host-per-gpu mode.
type HostsConfig struct {
	PerGPU    bool          // run a lane host process per device, through a front
	InProcess bool          // the same loop on one in-process scheduler instead
	Lanehost  string        // the lanehost binary; empty: next to this executable, then $PATH
	FaultAt   time.Duration // an out-of-bounds kernel on the first device this far into the measured phase; 0: none
	Args      []string      // more lanehost flags, for every host
	// NoDataPlane keeps the front's traffic with its hosts on the remote
	// (no same-host data plane), to compare the two.
	NoDataPlane bool
	// Cluster: the hosts join a cluster on loopback and the front finds
	// them there; JoinAt starts one more host, LeaveAt asks the first to
	// leave well, KillAt kills the second, that far into the measured
	// phase (0: not).
	Cluster                 bool
	JoinAt, LeaveAt, KillAt time.Duration
	// StepUpload: each step first uploads this many bytes into a buffer
	// of the tenant's, sent with every submission as the encoded step's
	// input (remote.Input) while the rest crosses once (0: none).
	StepUpload int
}

// hostsSide is the server the loop runs on, a lanes.Server either way: a
// front to lane hosts, or (--in-process) one in-process scheduler over
// every device, which places tenant i on device i mod n as the front
// places them on hosts; and, with --cluster, the hosts' processes.
type hostsSide struct {
	srv   *serving.Server
	devs  []cuda.Device // in process: the devices, closed at stop
	fleet *fleet
}

func (h *hostsSide) alloc(ctx context.Context, tenant string, spec cuda.BufferSpec) (cuda.Buffer, error) {
	return h.srv.Alloc(ctx, tenant, spec)
}

func (h *hostsSide) submit(ctx context.Context, tenant string, b lanes.Batch) error {
	_, err := h.srv.Submit(ctx, tenant, b)
	return err
}

// submitStep submits the tenant's step and returns its receipt: through
// the front, encoded once (its upload, if any, crosses with each
// submission, the rest once).
func (h *hostsSide) submitStep(ctx context.Context, t *hostsTenant, step lanes.Batch, enc *remote.Encoded) (lanes.Receipt, error) {
	f := frontOf(h.srv)
	if f == nil || enc == nil {
		return h.srv.Submit(ctx, t.name, step)
	}
	var inputs []remote.Input
	if t.upload > 0 {
		inputs = []remote.Input{{Entry: 0, Bytes: t.input}}
	}
	p, err := f.SubmitEncoded(ctx, t.name, enc, inputs...)
	if err != nil {
		return lanes.Receipt{}, err
	}
	return p.Result()
}

func (h *hostsSide) encode(b lanes.Batch) (*remote.Encoded, error) {
	if f := frontOf(h.srv); f != nil {
		return f.Encode(b)
	}
	return nil, nil
}

func (h *hostsSide) forget(ctx context.Context, tenant string) error {
	return h.srv.Forget(ctx, tenant)
}

// hostOf is where the tenant is served: its host, or its device (the
// one its buffer is on, once it started over elsewhere).
func (h *hostsSide) hostOf(t *hostsTenant) string {
	if f := frontOf(h.srv); f != nil {
		host, _ := f.Placement(t.name)
		return host
	}
	return "device " + strconv.Itoa(int(t.device.Load()))
}

// deviceIndex is the index of the device whose instance is given, else
// (through a front, where no device is local) the tenant's by its index.
func (h *hostsSide) deviceIndex(instance uint64, tenantIndex int) int {
	for i, d := range h.devs {
		if d.Info().Instance == instance {
			return i
		}
	}
	return tenantIndex % max(len(h.devs), 1)
}

// status is each host's, by name; empty in process.
func (h *hostsSide) status() map[string]remote.HostStatus {
	out := map[string]remote.HostStatus{}
	for _, hs := range h.srv.Status().Hosts {
		out[hs.Name] = hs
	}
	return out
}

// awaitServing waits, up to within, for a host to serve again (or to
// leave the cluster, its tenants placed elsewhere); at once in process.
func (h *hostsSide) awaitServing(ctx context.Context, host string, within time.Duration) {
	if frontOf(h.srv) == nil {
		return
	}
	deadline := time.Now().Add(within)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if st, ok := h.status()[host]; !ok || st.Health == remote.HostServing || st.FromCluster && !st.Member {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// inFlight counts the submissions not yet ended.
func (h *hostsSide) inFlight() int { return h.srv.Status().InFlight }

func (h *hostsSide) stop() {
	_ = h.srv.Stop(context.Background())
	for _, d := range h.devs {
		_ = d.Close()
	}
	if h.fleet != nil {
		h.fleet.stop()
	}
}

// lanehostPath finds the lanehost binary.
func lanehostPath(given string) (string, error) {
	if given != "" {
		return given, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "lanehost")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("lanehost"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w: --host-per-gpu: no lanehost next to this executable or on $PATH; build it (go build -o DIR/lanehost ./cmd/lanehost, or scripts/build-cuda.sh test-binaries DIR) and give --lanehost DIR/lanehost", ErrConfig)
}

// startHostsAPI starts the side the configuration asks for.
func startHostsAPI(ctx context.Context, cfg Config) (*hostsSide, error) {
	if cfg.Hosts.InProcess {
		devs, err := openDevices(cfg)
		if err != nil {
			return nil, err
		}
		srv, err := serving.Start(ctx, serving.Config{Devices: devs, Scheduler: actors.Config{LanesPerDevice: cfg.Lanes, Spin: cfg.Spin, MaxInFlightPerTenant: max(64, 2*cfg.Concurrency)}})
		if err != nil {
			for _, d := range devs {
				_ = d.Close()
			}
			return nil, err
		}
		return &hostsSide{srv: srv, devs: devs}, nil
	}
	path, err := lanehostPath(cfg.Hosts.Lanehost)
	if err != nil {
		return nil, err
	}
	hostArgs := func(i int) []string {
		ordinal := cfg.Ordinal(i)
		if i >= cfg.Devices && len(cfg.Ordinals) <= i {
			ordinal = cfg.Ordinal(i % cfg.Devices) // a host that joins later shares a device's GPU
		}
		args := []string{"--device", cfg.Device, "--ordinal", strconv.Itoa(ordinal), "--lanes", strconv.Itoa(cfg.Lanes), "--spin", cfg.Spin.String()}
		if cfg.Device == "sim" && cfg.Clock != "real" {
			args = append(args, "--sim-clock", "zero")
		}
		if cfg.Hosts.FaultAt > 0 {
			args = append(args, "--fault-kernels")
		}
		return append(args, cfg.Hosts.Args...)
	}
	fc := remote.FrontConfig{NoDataPlane: cfg.Hosts.NoDataPlane, Logf: func(format string, a ...any) { fmt.Fprintf(os.Stderr, "lanedemo: "+format+"\n", a...) }}
	var fl *fleet
	if cfg.Hosts.Cluster {
		if fl, err = startFleet(cfg, path, hostArgs); err != nil {
			return nil, err
		}
		fc.Cluster = &remote.ClusterConfig{Name: fl.cluster, Seeds: fl.seeds}
	} else {
		for i := range cfg.Devices {
			fc.Processes = append(fc.Processes, remote.HostProcess{Name: fmt.Sprintf("gpu%d", i), Path: path, Args: hostArgs(i)})
		}
	}
	srv, err := serving.Start(ctx, serving.Config{Hosts: &fc})
	if err != nil {
		if fl != nil {
			fl.stop()
		}
		return nil, err
	}
	return &hostsSide{srv: srv, fleet: fl}, nil
}

// hostsTenant is one tenant of the loop.
type hostsTenant struct {
	name  string
	index int
	mu    sync.Mutex // one client starts over at a time
	buf   cuda.Buffer
	gen   int // bumped at each start over
	step  lanes.Batch
	enc   *remote.Encoded // step, encoded once (remote); its upload, if any, sent with each submission
	// upload is the bytes each step uploads first (HostsConfig.StepUpload),
	// from input.
	upload int
	input  []byte
	// waitsFor is the host a tenant that lost its device state waits
	// for while it starts over ("" once set up again): the report counts
	// it there, not as unplaced, when the run ends first.
	waitsFor string
	device   atomic.Int32 // the index of its buffer's device (in process; set by setUp)
}

// setUp allocates and zeroes the tenant's buffer and builds its step.
func (t *hostsTenant) setUp(ctx context.Context, api *hostsSide, k int) error {
	b, err := api.alloc(ctx, t.name, cuda.BufferSpec{Size: 64, Elem: cuda.I32})
	if err != nil {
		return err
	}
	t.device.Store(int32(api.deviceIndex(b.Device, t.index)))
	up, err := cuda.Upload(b.Whole(), make([]byte, 64))
	if err != nil {
		return err
	}
	if err := api.submit(ctx, t.name, lanes.Batch{Entries: []lanes.Entry{lanes.Eager(cache.PhaseDynamicBinding, up)}}); err != nil {
		return err
	}
	spec := kernels.Builtin().MustSpec(kernels.Inc)
	var step lanes.Batch
	for i := range k {
		cmd, err := cuda.Launch(spec, cuda.Linear(16, 16), cuda.BufferArg(b.Whole()), cuda.I32Arg(16))
		if err != nil {
			return err
		}
		step.Entries = append(step.Entries, lanes.Replayed("lanedemo-hosts", i, cmd))
	}
	if t.upload > 0 {
		in, err := api.alloc(ctx, t.name, cuda.BufferSpec{Size: uint64(t.upload), Elem: cuda.U8})
		if err != nil {
			return err
		}
		if t.input == nil {
			t.input = make([]byte, t.upload)
			for i := range t.input {
				t.input[i] = byte(i*31 + t.index)
			}
		}
		up, err := cuda.Upload(in.Whole(), t.input)
		if err != nil {
			return err
		}
		step.Entries = append([]lanes.Entry{lanes.Eager(cache.PhaseDynamicBinding, up)}, step.Entries...)
	}
	enc, err := api.encode(step)
	if err != nil {
		return err
	}
	t.buf, t.step, t.enc = b, step, enc
	return nil
}

// startOver is a tenant whose device state was lost: it forgets and sets
// up again once a host serves it (once per generation, whichever client
// sees the loss first).
func (t *hostsTenant) startOver(ctx context.Context, api *hostsSide, k, gen int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gen != gen {
		return nil // another client did
	}
	host := api.hostOf(t)
	_ = api.forget(ctx, t.name)
	t.waitsFor = host
	api.awaitServing(ctx, host, 30*time.Second) // stay on its device: wait for its host to be back
	for ctx.Err() == nil {
		err := t.setUp(ctx, api, k)
		if err == nil {
			t.gen++
			t.waitsFor = ""
			return nil
		}
		if !errors.Is(err, remote.ErrNoHost) && !errors.Is(err, remote.ErrDeviceStateLost) && !errors.Is(err, actors.ErrIndeterminate) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return ctx.Err()
}

func (t *hostsTenant) current() (lanes.Batch, *remote.Encoded, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.step, t.enc, t.gen
}

// frontOf is the front behind a server on lane hosts (nil in process).
func frontOf(srv *serving.Server) *remote.Front {
	f, _ := srv.Raw().(*remote.Front)
	return f
}
