// The workload: devices, tenants, their buffers and the decode-like step
// each submits.

package demo

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand"

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
	dev        cuda.Device
	replay     bool
	rows, cols int32
	weights    cuda.Region // plan-owned, shared by the device's tenants
	x, h, y    cuda.Buffer // the tenant's own: input, hidden, output
	out        cuda.Buffer // where readout copies y
	owner      cache.Scope
	compute    []lanes.Entry // the compute chain, built once
	rng        *rand.Rand
	// staging holds one pinned input buffer per closed-loop worker: a
	// worker rewrites its own only after its previous step ended, and the
	// input is copied from pinned memory (no pageable-copy staging in the
	// driver). Empty where the device has no pinned staging.
	staging []cuda.HostBuffer
	// entries holds one reusable batch per closed-loop worker: a worker
	// builds its next step only after the previous one ended.
	entries [][]lanes.Entry
	inputs  [][]byte // one input buffer per worker with staging

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
	if cfg.Clock == "zero" {
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
		d, err := sim.New(sim.Config{Clock: clock, Ordinal: i, Seed: cfg.Seed + int64(i), Faults: faults})
		if err != nil {
			return nil, err
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// setup allocates and initializes every device's weights and every tenant's
// buffers, on a bound thread per device.
func setup(cfg Config, devs []cuda.Device) ([]*tenant, error) {
	var tenants []*tenant
	for di, dev := range devs {
		ts, err := setupDevice(cfg, di, len(devs), dev)
		if err != nil {
			return nil, fmt.Errorf("device %d: %w", di, err)
		}
		tenants = append(tenants, ts...)
	}
	return tenants, nil
}

func setupDevice(cfg Config, di, ndev int, dev cuda.Device) ([]*tenant, error) {
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
	d := deviceSetup{cfg: cfg, dev: dev, st: st}
	if d.weights, err = d.sharedWeights(cfg.Seed + int64(di)); err != nil {
		return nil, err
	}
	var out []*tenant
	for t := di; t < cfg.Tenants; t += ndev {
		tn, err := d.newTenant(t, fmt.Sprintf("tenant-%02d", t))
		if err != nil {
			return nil, err
		}
		out = append(out, tn)
	}
	if cfg.Hostile != "" && di == 0 {
		h, err := d.newTenant(cfg.Tenants, hostileName)
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
// weights its tenants share.
type deviceSetup struct {
	cfg     Config
	dev     cuda.Device
	st      cuda.Stream
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
	tn := &tenant{name: name, dev: d.dev, replay: t >= cfg.EagerTenants,
		rows: int32(64 + 64*(t%4)), cols: int32(32 + 32*(t%4)), owner: cache.LaneScope(uint64(1 + t)),
		rng: rand.New(rand.NewSource(cfg.Seed*1000 + int64(t))), stats: newTenantAgg()}
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
	if err := tn.buildCompute(d.dev, cfg.Kernels); err != nil {
		return nil, err
	}
	for range max(cfg.Concurrency, 1) {
		h, err := d.dev.AllocHost(uint64(4 * tn.cols))
		if err != nil {
			return nil, err
		}
		tn.staging = append(tn.staging, h)
	}
	return tn, nil
}

func upload(st cuda.Stream, r cuda.Region, v []float32) error {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	c, err := cuda.Upload(r, b)
	if err != nil {
		return err
	}
	return st.Enqueue(c)
}

// buildCompute makes the tenant's decode-like chain of k kernels: h = W·x,
// y = 0, then y += h/2 and h += y in turn.
func (tn *tenant) buildCompute(dev cuda.Device, k int) error {
	reg, ok := dev.Kernels().(kernels.Registry)
	if !ok {
		return fmt.Errorf("the device's kernels are not the built-in registry")
	}
	r, c := tn.rows, tn.cols
	hr, _ := tn.h.Region(0, uint64(4*r))
	yr, _ := tn.y.Region(0, uint64(4*r))
	xr, _ := tn.x.Region(0, uint64(4*c))
	lin := cuda.Linear(uint32(r), 128)
	add := func(name string, args ...cuda.Arg) error {
		cmd, err := cuda.Launch(reg.MustSpec(name), lin, args...)
		if err != nil {
			return err
		}
		e := lanes.Entry{Phase: cache.PhaseCompute, Node: len(tn.compute), Command: cmd,
			Work: lanes.Work{Form: lanes.FormSingle, ParticipantCount: 1, Tokens: 1}}
		if tn.replay {
			e.Replay = &lanes.ReplayContract{Key: cache.LaunchKey(provider, cmd)}
			_ = cmd.ForRegions(func(rg cuda.Region) error {
				scope := tn.owner
				if rg.Buffer == tn.weights.Buffer {
					scope = cache.PlanScope()
				}
				e.Replay.Scopes = append(e.Replay.Scopes, scope)
				return nil
			})
		}
		tn.compute = append(tn.compute, e)
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
			tn.inputs = append(tn.inputs, make([]byte, 4*tn.cols))
		}
		b = tn.inputs[slot]
	} else {
		b = make([]byte, 4*tn.cols) // retained by the upload until the step ends
	}
	var bits uint64
	for i := range int(tn.cols) {
		if i%16 == 0 {
			bits = tn.rng.Uint64() // sixteen inputs from one draw
		}
		v := float32(int(bits&15)%9-4) / 8
		bits >>= 4
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	xr, _ := tn.x.Region(0, uint64(len(b)))
	var up cuda.Command
	var err error
	if staged {
		if err := tn.dev.WriteHost(tn.staging[slot].Whole(), b); err != nil {
			return lanes.Batch{}, err
		}
		up, err = cuda.StageIn(xr, tn.staging[slot].Whole())
	} else {
		up, err = cuda.Upload(xr, b)
	}
	if err != nil {
		return lanes.Batch{}, err
	}
	yr, _ := tn.y.Region(0, uint64(4*tn.rows))
	outr, _ := tn.out.Region(0, uint64(4*tn.rows))
	cp, err := cuda.Copy(outr, yr)
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
	entries = append(entries, lanes.Entry{Phase: cache.PhaseDynamicBinding, Node: cache.NoNode, Command: up})
	entries = append(entries, tn.compute...)
	entries = append(entries, lanes.Entry{Phase: cache.PhaseReadout, Node: cache.NoNode, Command: cp})
	return lanes.Batch{Entries: entries, Timing: timing}, nil
}
