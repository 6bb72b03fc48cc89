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
	"time"

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

// hostsAPI is what the loop needs of either side: a tenant's buffer, its
// steps, starting over, and where it is served.
type hostsAPI interface {
	alloc(ctx context.Context, tenant string, index int, spec cuda.BufferSpec) (cuda.Buffer, error)
	submit(ctx context.Context, tenant string, b lanes.Batch) error
	// submitStep submits the tenant's step: encoded once on the front.
	submitStep(ctx context.Context, t *hostsTenant, step lanes.Batch, enc *remote.Encoded) error
	encode(b lanes.Batch) (*remote.Encoded, error)
	forget(ctx context.Context, tenant string) error
	hostOf(tenant string, index int) string
	status() map[string]remote.HostStatus // by host; empty in process
	awaitServing(ctx context.Context, host string, within time.Duration)
	inFlight() int // submissions not yet ended
	stop()
}

// remoteAPI is the front (and, with --cluster, its hosts' processes).
type remoteAPI struct {
	f     *remote.Front
	fleet *fleet
}

func (r remoteAPI) alloc(ctx context.Context, tenant string, _ int, spec cuda.BufferSpec) (cuda.Buffer, error) {
	return r.f.Alloc(ctx, tenant, spec)
}
func (r remoteAPI) submit(ctx context.Context, tenant string, b lanes.Batch) error {
	_, err := r.f.Submit(ctx, tenant, b)
	return err
}
func (r remoteAPI) submitStep(ctx context.Context, t *hostsTenant, step lanes.Batch, enc *remote.Encoded) error {
	var inputs []remote.Input
	if t.upload > 0 { // the step's upload crosses with each submission, the rest once
		inputs = []remote.Input{{Entry: 0, Bytes: t.input}}
	}
	p, err := r.f.SubmitEncoded(ctx, t.name, enc, inputs...)
	if err != nil {
		return err
	}
	_, err = p.Result()
	return err
}
func (r remoteAPI) encode(b lanes.Batch) (*remote.Encoded, error)   { return r.f.Encode(b) }
func (r remoteAPI) forget(ctx context.Context, tenant string) error { return r.f.Forget(ctx, tenant) }
func (r remoteAPI) hostOf(tenant string, _ int) string {
	h, _ := r.f.Placement(tenant)
	return h
}
func (r remoteAPI) status() map[string]remote.HostStatus {
	out := map[string]remote.HostStatus{}
	for _, h := range r.f.Hosts() {
		out[h.Name] = h
	}
	return out
}
func (r remoteAPI) stop() {
	_ = r.f.Stop(context.Background())
	if r.fleet != nil {
		r.fleet.stop()
	}
}
func (r remoteAPI) inFlight() int { return r.f.InFlight() }
func (r remoteAPI) awaitServing(ctx context.Context, host string, within time.Duration) {
	deadline := time.Now().Add(within)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if st, ok := r.status()[host]; !ok || st.State == remote.HostServing || st.FromCluster && !st.Member {
			return // serving again, or gone from the cluster: placed elsewhere
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// localAPI is one in-process scheduler over every device: tenant i on
// device i mod n, as the front places them.
type localAPI struct {
	s    *actors.Scheduler
	devs []cuda.Device
}

func (l localAPI) alloc(_ context.Context, tenant string, index int, spec cuda.BufferSpec) (cuda.Buffer, error) {
	d := l.devs[index%len(l.devs)]
	var b cuda.Buffer
	err := bound(d, func() (err error) {
		b, err = d.Alloc(spec)
		return err
	})
	if err != nil {
		return b, err
	}
	return b, l.s.Own(tenant, b)
}
func (l localAPI) submit(ctx context.Context, tenant string, b lanes.Batch) error {
	_, err := l.s.Submit(ctx, tenant, b)
	return err
}
func (l localAPI) submitStep(ctx context.Context, t *hostsTenant, step lanes.Batch, _ *remote.Encoded) error {
	return l.submit(ctx, t.name, step)
}
func (l localAPI) encode(lanes.Batch) (*remote.Encoded, error) { return nil, nil }
func (l localAPI) forget(context.Context, string) error        { return nil }
func (l localAPI) hostOf(_ string, index int) string {
	return "device " + strconv.Itoa(index%len(l.devs))
}
func (l localAPI) status() map[string]remote.HostStatus                { return nil }
func (l localAPI) awaitServing(context.Context, string, time.Duration) {}
func (l localAPI) inFlight() (n int) {
	for _, st := range l.s.Lanes() {
		n += st.InFlight
	}
	return n
}
func (l localAPI) stop() {
	_ = l.s.Stop(context.Background())
	for _, d := range l.devs {
		_ = d.Close()
	}
}

// bound runs fn on a thread bound to the device.
func bound(d cuda.Device, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		unbind, err := d.BindThread()
		if err != nil {
			done <- err
			return
		}
		defer unbind()
		done <- fn()
	}()
	return <-done
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
func startHostsAPI(ctx context.Context, cfg Config) (hostsAPI, error) {
	if cfg.Hosts.InProcess {
		devs, err := openDevices(cfg)
		if err != nil {
			return nil, err
		}
		s, err := actors.Start(ctx, actors.Config{Devices: devs, LanesPerDevice: cfg.Lanes, Spin: cfg.Spin, MaxInFlightPerTenant: max(64, 2*cfg.Concurrency)})
		if err != nil {
			for _, d := range devs {
				_ = d.Close()
			}
			return nil, err
		}
		return localAPI{s: s, devs: devs}, nil
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
			fc.Launch = append(fc.Launch, remote.Launch{Name: fmt.Sprintf("gpu%d", i), Path: path, Args: hostArgs(i)})
		}
	}
	f, err := remote.StartFront(ctx, fc)
	if err != nil {
		if fl != nil {
			fl.stop()
		}
		return nil, err
	}
	return remoteAPI{f: f, fleet: fl}, nil
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
}

// setUp allocates and zeroes the tenant's buffer and builds its step.
func (t *hostsTenant) setUp(ctx context.Context, api hostsAPI, k int) error {
	b, err := api.alloc(ctx, t.name, t.index, cuda.BufferSpec{Size: 64, Elem: cuda.I32})
	if err != nil {
		return err
	}
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
		in, err := api.alloc(ctx, t.name, t.index, cuda.BufferSpec{Size: uint64(t.upload), Elem: cuda.U8})
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
func (t *hostsTenant) startOver(ctx context.Context, api hostsAPI, k, gen int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.gen != gen {
		return nil // another client did
	}
	host := api.hostOf(t.name, t.index)
	_ = api.forget(ctx, t.name)
	api.awaitServing(ctx, host, 30*time.Second) // stay on its device: wait for its host to be back
	for ctx.Err() == nil {
		err := t.setUp(ctx, api, k)
		if err == nil {
			t.gen++
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
