// The workload: devices, tenants, their buffers and the decode-like step
// each submits.

package demo

import (
	"errors"
	"fmt"
	"math/rand"

	"github.com/lanesched/lanes/internal/backend"

	serving "github.com/lanesched/lanes"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/lanes"
)

// Model dimensions: the shared weights are maxRows x maxCols; a tenant uses
// a rows x cols corner of them.
const (
	maxRows = 256
	maxCols = 128
)

const provider = "lanedemo.kernels.v1"

// tenant is one serving tenant: its own activations on one device, over
// the device's shared weights.
type tenant struct {
	name       string
	dev        backend.Device
	replay     bool
	rows, cols int32
	weights    cuda.Region // plan-owned, shared by the device's tenants
	x, h, y    cuda.Buffer // the tenant's own: input, hidden, output
	out        cuda.Buffer // where readout copies y
	owner      cache.Scope
	compute    []lanes.Entry // the compute chain, built once
	rng        *rand.Rand
	// in is where each step's input lands (of element type inElem),
	// result what readout copies into readout; with --kernels-from, the
	// manifest's input and output buffers.
	in, result, readout cuda.Region
	inElem              cuda.ElementType
	provider            string // replay keys' provider
	// staging holds one pinned input buffer per closed-loop worker: a
	// worker rewrites its own only after its previous step ended, and the
	// input is copied from pinned memory (no pageable-copy staging in the
	// driver). Empty where the device has no pinned staging.
	staging []cuda.HostBuffer
	// entries holds one reusable batch per closed-loop worker: a worker
	// builds its next step only after the previous one ended.
	entries [][]lanes.Entry
	// built is each worker with staging's last step: its next one is the
	// same batch (a worker submits it again only after it ended), with
	// new bytes in its staging.
	built  []lanes.Batch
	inputs [][]byte // one input buffer per worker with staging
	// fused: the staged input and readout copies of the first fusedSlots
	// workers carry replay contracts (--transfers graph), so they are nodes
	// of the replayed graph.
	fused                 bool
	stageReplay, cpReplay *lanes.ReplayContract

	stats   *tenantAgg  // what its clients saw
	hostile bool        // the --hostile tenant
	big     cuda.Buffer // the hostile tenant's churned uploads land here
}

// openDevices opens the configured backend.
func openDevices(cfg Config) ([]cuda.Device, error) {
	if cfg.Device != "sim" {
		b, ok := backends[cfg.Device]
		if !ok {
			return nil, fmt.Errorf("%w: --device %s needs a build with the %s tag (scripts/build-cuda.sh)", ErrConfig, cfg.Device, cfg.Device)
		}
		return b(cfg)
	}
	clock := sim.ClockRealTime
	if cfg.Clock == "zero" || cfg.Clock == "none" {
		clock = sim.ClockZeroCost
	}
	var faults []sim.Fault
	for _, f := range []struct {
		kind sim.FaultKind
		rate float64
	}{{sim.FaultLaunch, cfg.Faults.Launch}, {sim.FaultCaptureReject, cfg.Faults.Capture}, {sim.FaultOutOfMemory, cfg.Faults.OOM},
		{sim.FaultSticky, cfg.Faults.Sticky}, {sim.FaultHang, cfg.Faults.Hang}} {
		if f.rate > 0 {
			faults = append(faults, sim.Fault{Kind: f.kind, Rate: f.rate})
		}
	}
	var devs []cuda.Device
	for i := range cfg.Devices {
		var ks kernels.Registry
		if cfg.Hosts.FaultAt > 0 {
			ks = kernels.Builtin().With(kernels.FaultInjection()) // the out-of-bounds kernel --fault-host-at runs
		}
		d, err := sim.New(sim.Config{Clock: clock, NoData: cfg.Clock == "none", Ordinal: i, Seed: cfg.Seed + int64(i), Faults: faults, Kernels: ks})
		if err != nil {
			return nil, err
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// setup allocates and initializes every device's weights and every tenant's
// buffers, on a bound thread per device.
func setup(cfg Config, w *workload, devs []cuda.Device) ([]*tenant, error) {
	var tenants []*tenant
	for di, dev := range devs {
		ts, err := setupDevice(cfg, w, di, len(devs), dev)
		if errors.Is(err, ErrConfig) {
			return nil, err // a manifest every device refuses alike
		}
		if err != nil {
			return nil, fmt.Errorf("device %d: %w", di, err)
		}
		tenants = append(tenants, ts...)
	}
	return tenants, nil
}

func setupDevice(cfg Config, w *workload, di, ndev int, cdev cuda.Device) ([]*tenant, error) {
	dev, err := backend.Of(cdev)
	if err != nil {
		return nil, cuda.Contractf("setup", cuda.ErrInvalidCommand, "device %d is %v", di, err)
	}
	unbind, err := dev.BindThread()
	if err != nil {
		return nil, err
	}
	defer unbind()
	st, err := dev.NewStream()
	if err != nil {
		return nil, err
	}
	defer st.Destroy()
	d := deviceSetup{cfg: cfg, work: w, dev: dev, st: st}
	newTenant := d.newTenant
	if w != nil {
		err, newTenant = d.loadUserModule(cfg.Seed+int64(di)), d.newUserTenant
	} else {
		d.weights, err = d.sharedWeights(cfg.Seed + int64(di))
	}
	if err != nil {
		return nil, err
	}
	var out []*tenant
	for t := di; t < cfg.Tenants; t += ndev {
		tn, err := newTenant(t, fmt.Sprintf("tenant-%02d", t))
		if err != nil {
			return nil, err
		}
		out = append(out, tn)
	}
	if cfg.Hostile != "" && di == 0 {
		h, err := newTenant(cfg.Tenants, hostileName)
		if err != nil {
			return nil, err
		}
		h.hostile = true
		if h.big, err = d.alloc(churnUpload / 4); err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, st.Synchronize()
}

// deviceSetup is one device's share of the setup: its stream, and the
// weights (or, with --kernels-from, the manifest's shared buffers) its
// tenants share.
type deviceSetup struct {
	cfg     Config
	work    *workload     // --kernels-from's, or nil
	shared  []cuda.Buffer // by manifest buffer index; zero where not shared
	dev     backend.Device
	st      backend.Stream
	weights cuda.Buffer
}

// alloc allocates n float32s.
func (d *deviceSetup) alloc(n int) (cuda.Buffer, error) {
	return d.dev.Alloc(cuda.BufferSpec{Size: uint64(4 * n), Elem: cuda.F32})
}

// sharedWeights allocates and fills the weights every tenant of the device
// reads (each a prefix of its shape).
func (d *deviceSetup) sharedWeights(seed int64) (cuda.Buffer, error) {
	w, err := d.alloc(maxRows * maxCols)
	if err != nil {
		return cuda.Buffer{}, err
	}
	rng := rand.New(rand.NewSource(seed))
	wv := make([]float32, maxRows*maxCols)
	for i := range wv {
		wv[i] = float32(rng.Intn(17)-8) / 64
	}
	return w, upload(d.st, w.Whole(), wv)
}

// newTenant sets up tenant t: its shape, its zeroed buffers, its compute
// chain and its pinned staging.
func (d *deviceSetup) newTenant(t int, name string) (*tenant, error) {
	cfg := d.cfg
	tn := d.tenantBase(t, name)
	tn.rows, tn.cols = int32(64+64*(t%4)), int32(32+32*(t%4))
	var err error
	if tn.weights, err = d.weights.Region(0, uint64(4*tn.rows*tn.cols)); err != nil {
		return nil, err
	}
	for _, b := range []*cuda.Buffer{&tn.x, &tn.h, &tn.y, &tn.out} {
		if *b, err = d.alloc(maxRows); err != nil {
			return nil, err
		}
		z, _ := cuda.Zero(b.Whole())
		if err := d.st.Enqueue(z); err != nil {
			return nil, err
		}
	}
	tn.in, _ = tn.x.Region(0, uint64(4*tn.cols))
	tn.result, _ = tn.y.Region(0, uint64(4*tn.rows))
	tn.readout, _ = tn.out.Region(0, uint64(4*tn.rows))
	tn.inElem, tn.provider = cuda.F32, provider
	if err := tn.buildCompute(d.dev, cfg.Kernels); err != nil {
		return nil, err
	}
	return tn, d.allocStaging(tn)
}

// tenantBase is tenant t before its buffers: its name, whether it
// replays, its scope and its inputs' seed.
func (d *deviceSetup) tenantBase(t int, name string) *tenant {
	replay := t >= d.cfg.EagerTenants
	return &tenant{name: name, dev: d.dev, replay: replay, fused: replay && d.cfg.Transfers == "graph", owner: cache.LaneScope(1 + t),
		rng: rand.New(rand.NewSource(d.cfg.Seed*1000 + int64(t))), stats: newTenantAgg()}
}

// allocStaging gives each closed-loop worker of tn its pinned input.
func (d *deviceSetup) allocStaging(tn *tenant) error {
	for range max(d.cfg.Concurrency, 1) {
		h, err := d.dev.AllocHost(tn.in.Length)
		if err != nil {
			return err
		}
		tn.staging = append(tn.staging, h)
	}
	return nil
}

func upload(st backend.Stream, r cuda.Region, v []float32) error {
	c, err := cuda.Upload(r, serving.EncodeF32(v))
	if err != nil {
		return err
	}
	return st.Enqueue(c)
}

// buildCompute makes the tenant's decode-like chain of k kernels: h = W·x,
// y = 0, then y += h/2 and h += y in turn.
func (tn *tenant) buildCompute(dev cuda.Device, k int) error {
	r, c := tn.rows, tn.cols
	hr, _ := tn.h.Region(0, uint64(4*r))
	yr, _ := tn.y.Region(0, uint64(4*r))
	xr := tn.in
	lin := cuda.Linear(uint32(r), 128)
	shared := func(rg cuda.Region) bool { return rg.Buffer == tn.weights.Buffer }
	add := func(name string, args ...cuda.Arg) error {
		cmd, err := cuda.LaunchNamed(dev.Kernels(), name, lin, args...)
		if err != nil {
			return err
		}
		tn.addCompute(cmd, shared)
		return nil
	}
	steps := []func() error{
		func() error {
			return add(kernels.Gemv, cuda.BufferArg(hr), cuda.BufferArg(tn.weights), cuda.BufferArg(xr), cuda.I32Arg(r), cuda.I32Arg(c))
		},
		func() error { return add(kernels.Fill, cuda.BufferArg(yr), cuda.F32Arg(0), cuda.I32Arg(r)) },
	}
	for i := 2; i < k; i++ {
		if i%2 == 0 {
			steps = append(steps, func() error {
				return add(kernels.Axpy, cuda.BufferArg(yr), cuda.BufferArg(hr), cuda.F32Arg(0.5), cuda.I32Arg(r))
			})
		} else {
			steps = append(steps, func() error {
				return add(kernels.Add, cuda.BufferArg(hr), cuda.BufferArg(hr), cuda.BufferArg(yr), cuda.I32Arg(r))
			})
		}
	}
	for _, s := range steps[:k] {
		if err := s(); err != nil {
			return err
		}
	}
	return nil
}

// addCompute appends cmd to the compute chain: on a plan node of its own,
// and, for a replaying tenant, keyed by the tenant's provider, the regions
// shared says the device's tenants share plan-scoped and the rest the
// tenant's.
func (tn *tenant) addCompute(cmd cuda.Command, shared func(cuda.Region) bool) {
	e := lanes.Entry{Phase: cache.PhaseCompute, Node: len(tn.compute), Command: cmd,
		Work: lanes.Work{Form: lanes.FormSingle, ParticipantCount: 1, Tokens: 1}}
	if tn.replay {
		e.Replay = &lanes.ReplayContract{Key: cache.LaunchKey(tn.provider, cmd)}
		_ = backend.ForRegions(cmd, func(rg cuda.Region) error {
			scope := tn.owner
			if shared(rg) {
				scope = cache.PlanScope()
			}
			e.Replay.Scopes = append(e.Replay.Scopes, scope)
			return nil
		})
	}
	tn.compute = append(tn.compute, e)
}

// fusedSlots is how many of a tenant's closed-loop workers have their
// input and readout copies in the replayed graph: a graph bakes in its
// staging's address, so each such worker's step is an executable of its
// own (warmed up and cached); the others' copies run eagerly.
const fusedSlots = 4

// step is one decode step: this step's input into the device (dynamic
// binding), the compute chain, and a readout copy of the output. A worker
// with a staging slot (>= 0) writes the input into its pinned staging and
// copies it from there; otherwise the input is an upload of retained bytes.
func (tn *tenant) step(timing lanes.TimingMode, slot int) (lanes.Batch, error) {
	staged := slot >= 0 && slot < len(tn.staging)
	var b []byte
	if staged {
		// The bytes only pass through on their way to pinned staging: one
		// buffer per worker serves every step.
		for len(tn.inputs) <= slot {
			tn.inputs = append(tn.inputs, make([]byte, tn.in.Length))
		}
		b = tn.inputs[slot]
	} else {
		b = make([]byte, tn.in.Length) // retained by the upload until the step ends
	}
	fillValues(b, tn.inElem, tn.rng)
	var up cuda.Command
	var err error
	if staged {
		if err := tn.dev.WriteHost(tn.staging[slot].Whole(), b); err != nil {
			return lanes.Batch{}, err
		}
		if slot < len(tn.built) && tn.built[slot].Timing == timing && tn.built[slot].Entries != nil {
			// The same commands as the worker's last step: only the bytes
			// in its staging changed.
			return tn.built[slot], nil
		}
		up, err = cuda.StageIn(tn.in, tn.staging[slot].Whole())
	} else {
		up, err = cuda.Upload(tn.in, b)
	}
	if err != nil {
		return lanes.Batch{}, err
	}
	cp, err := cuda.Copy(tn.readout, tn.result)
	if err != nil {
		return lanes.Batch{}, err
	}
	var entries []lanes.Entry
	if slot >= 0 {
		for len(tn.entries) <= slot {
			tn.entries = append(tn.entries, make([]lanes.Entry, 0, len(tn.compute)+2))
		}
		entries = tn.entries[slot][:0]
	} else {
		entries = make([]lanes.Entry, 0, len(tn.compute)+2)
	}
	in := lanes.Entry{Phase: cache.PhaseDynamicBinding, Node: cache.NoNode, Command: up}
	out := lanes.Entry{Phase: cache.PhaseReadout, Node: cache.NoNode, Command: cp}
	if staged && tn.fused && slot < fusedSlots {
		// Copies between fixed addresses (pinned staging, device memory):
		// keyed, they join the compute chain's graph.
		if tn.stageReplay == nil {
			tn.stageReplay = lanes.Replayable(up, cache.LaunchKey(tn.provider, up), tn.owner)
			tn.cpReplay = lanes.Replayable(cp, cache.LaunchKey(tn.provider, cp), tn.owner)
		}
		in.Replay, out.Replay = tn.stageReplay, tn.cpReplay
	}
	entries = append(entries, in)
	entries = append(entries, tn.compute...)
	entries = append(entries, out)
	batch := lanes.Batch{Entries: entries, Timing: timing}
	if staged {
		for len(tn.built) <= slot {
			tn.built = append(tn.built, lanes.Batch{})
		}
		tn.built[slot] = batch
	}
	return batch, nil
}
