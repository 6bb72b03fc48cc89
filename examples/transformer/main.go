// Command transformer serves the decode step of a small GPT-2 style
// transformer block through lanes: several tenants, each with sequences of
// its own (its x, KV cache and position in device memory), share one copy
// of the block's weights and four lanes of one device. A step is one
// batch of thirteen entries: the example's own kernels (transformer.cu,
// loaded as a module: layernorm, biases, GELU, residuals, the KV-cache
// write, attention with its softmax in shared memory, the position's
// advance) and four cuBLAS SGEMMs (library calls on a per-lane cuBLAS
// handle and workspace). Every entry is replayed, and nothing in the step
// changes from one to the next (the position is read from device memory),
// so from the second step on a step is one graph launch.
//
//	go run ./examples/transformer                          # the simulated device, Go references
//	scripts/build-cuda.sh && go build -tags cuda ./examples/transformer   # then run it on a GPU
//
// It reports one tenant's steps eagerly against replayed (wall and device
// time per step, what replayed), then every tenant's at once (steps per
// second), and checks every tenant's x after its last step against a
// float64 reference of the whole block. On a GPU, time longer runs with a
// longer context: ./transformer --ctx 1024 --steps 1024.
// Exit status: 0 ok, 1 a result out of tolerance or a step failed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/examples/internal/cublas"
	"github.com/lanesched/lanes/examples/internal/hostio"
	"github.com/lanesched/lanes/internal/profiling"
	"github.com/lanesched/lanes/lanes"
)

// tolerance is the largest normwise error (largest difference over the
// largest value) accepted against the float64 reference: float32 sums in
// another order than float64's (and cuBLAS blocks its products on the
// GPU), so results agree to float32 rounding, not bit for bit.
const tolerance = 1e-4

// main runs the example and exits 1 on any error.
func main() {
	if err := run(os.Args[1:]); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "transformer:", err)
		os.Exit(1)
	}
}

// dims are the model's and the run's sizes.
type dims struct {
	channels, heads, ctx, batch   int // C, H, T, B
	tenants, lanes, steps, window int
	seed                          int64
	spin                          time.Duration // actors.Config.Spin
	// The sweep (--sweep): eager against replayed at these counts.
	sweep                       bool
	sweepTenants, sweepInFlight []int
	cpuProfile, execTrace       string // files for the run's CPU profile and execution trace
}

// headDim is C/H.
func (d dims) headDim() int { return d.channels / d.heads }

// seqStride is the elements between two sequences of a KV cache.
func (d dims) seqStride() int { return d.ctx * d.channels }

// parseFlags reads the sizes from args and checks them.
func parseFlags(args []string) (dims, error) {
	var d dims
	fs := flag.NewFlagSet("transformer", flag.ContinueOnError)
	fs.IntVar(&d.channels, "channels", 128, "model width C")
	fs.IntVar(&d.heads, "heads", 4, "attention heads H (the head dimension is C/H)")
	fs.IntVar(&d.ctx, "ctx", 32, "context T: the KV cache's positions")
	fs.IntVar(&d.batch, "batch", 2, "sequences B per tenant")
	fs.IntVar(&d.tenants, "tenants", 4, "tenants served at once")
	fs.IntVar(&d.lanes, "lanes", 4, "lanes (streams) on the device")
	fs.IntVar(&d.steps, "steps", 32, "decode steps per tenant (at most --ctx)")
	fs.IntVar(&d.window, "inflight", 4, "steps each tenant keeps in flight")
	fs.Int64Var(&d.seed, "seed", 1, "seed of the weights and inputs")
	fs.DurationVar(&d.spin, "spin", 0, "how a lane waits for its fences (actors.Config.Spin): 0 spins only while a fence is due, within a quarter of the CPUs; a window such as 500us (actors.GPUSpin) spins that long after progress, a core per busy lane; negative (-1ns) never spins")
	fs.BoolVar(&d.sweep, "sweep", false, "instead: the step eager and replayed, closed loop, at each of --sweep-tenants × --sweep-inflight (--steps steps per tenant, fresh tenants each run), with replayed ÷ eager and one step in flight's wall ÷ device time")
	fs.StringVar(&d.cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
	fs.StringVar(&d.execTrace, "exectrace", "", "write an execution trace of the run to this file (go tool trace)")
	tenantList := fs.String("sweep-tenants", "1,4,8", "with --sweep: tenant counts")
	inFlightList := fs.String("sweep-inflight", "1,2,8", "with --sweep: steps in flight per tenant")
	if err := fs.Parse(args); err != nil {
		return d, err
	}
	var err error
	if d.sweepTenants, err = parseCounts("sweep-tenants", *tenantList); err != nil {
		return d, err
	}
	if d.sweepInFlight, err = parseCounts("sweep-inflight", *inFlightList); err != nil {
		return d, err
	}
	if most := slices.Max(d.sweepInFlight); d.sweep && most >= d.steps {
		return d, fmt.Errorf("--sweep-inflight %d with --steps %d: each step in flight runs (steps-1)/in-flight timed steps, so give more --steps than steps in flight (and --ctx at least --steps)", most, d.steps)
	}
	if fs.NArg() > 0 {
		return d, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	const maxCtx = (cuda.MaxSharedBytes - 4*maxBlock) / 4 // the scores and the reduction's partial[] in 48 KiB
	switch {
	case d.channels < 1 || d.heads < 1 || d.channels%d.heads != 0:
		return d, fmt.Errorf("--channels %d and --heads %d: both at least 1, and the channels a multiple of the heads", d.channels, d.heads)
	case d.ctx < 2 || d.ctx > maxCtx:
		return d, fmt.Errorf("--ctx %d: 2 to %d (the scores of attention's softmax live in shared memory)", d.ctx, maxCtx)
	case d.steps < 2 || d.steps > d.ctx:
		return d, fmt.Errorf("--steps %d: 2 to --ctx (%d): each step fills one position of the KV cache", d.steps, d.ctx)
	case d.batch < 1 || d.tenants < 1 || d.lanes < 1 || d.lanes > 64 || d.window < 1:
		return d, fmt.Errorf("--batch, --tenants and --inflight must be at least 1, --lanes 1 to 64")
	case d.spin > time.Second:
		return d, fmt.Errorf("--spin %v: give 0 (spin only while a fence is due), a negative duration (never spin) or a window up to 1s", d.spin)
	case d.batch*d.channels*d.ctx > 1<<28:
		return d, fmt.Errorf("--batch %d × --channels %d × --ctx %d: a KV cache of more than 2^28 floats per tenant is beyond this example", d.batch, d.channels, d.ctx)
	}
	return d, nil
}

// run runs the example with the flags in args.
func run(args []string) error {
	d, err := parseFlags(args)
	if err != nil {
		return err
	}
	stop, err := profiling.Start(d.cpuProfile, d.execTrace)
	if err != nil {
		return err
	}
	defer stop()
	ctx := context.Background()
	dev, err := openDevice()
	if err != nil {
		return err
	}
	defer dev.Close()
	unbind, err := dev.BindThread() // the real device serves a goroutine bound to its context
	if err != nil {
		return err
	}
	defer unbind()
	if err := dev.(kernels.Loader).LoadModule(module()); err != nil {
		return err
	}
	lib := cublas.Library(cublasWorkspace)
	s, err := actors.Start(ctx, actors.Config{Devices: []cuda.Device{dev}, LanesPerDevice: d.lanes, StrictOwnership: true, Libraries: []*cuda.Library{lib}, Spin: d.spin})
	if err != nil {
		return err
	}
	defer s.Stop(ctx)
	m := &model{d: d, dev: dev, s: s, lib: lib, host: newWeights(d)}
	f, err := m.uploadWeights(ctx)
	if err != nil {
		return err
	}
	if d.sweep {
		return m.sweep(ctx)
	}
	fmt.Printf("transformer on %s: one GPT-2 block's decode step, C=%d (%d heads of %d), context %d, %d sequences per tenant, %d steps per tenant\n",
		dev.Info().Name, d.channels, d.heads, d.headDim(), d.ctx, d.batch, d.steps)
	fmt.Printf("  weights: %d KiB in %d buffers, uploaded once (FillShared: %d batches on lane %d, %.1f µs on the device, %.1f µs in all) and shared by every tenant\n",
		f.Bytes>>10, numWeights, f.Batches, f.Lane, micros(f.DeviceTime), micros(f.Took))
	eager, replayed, err := m.alone(ctx)
	if err != nil {
		return err
	}
	ts, err := m.atOnce(ctx)
	if err != nil {
		return err
	}
	return m.check(ctx, eager, replayed, ts)
}

// alone runs two tenants of the same input one after the other, alone on
// the scheduler, one eagerly and one replayed, and reports their times.
func (m *model) alone(ctx context.Context) (eager, replayed *tenant, err error) {
	d := m.d
	input := newInput(d, d.seed+1)
	if eager, err = m.newTenant(ctx, "solo-eager", input); err != nil {
		return nil, nil, err
	}
	if replayed, err = m.newTenant(ctx, "solo-replayed", input); err != nil {
		return nil, nil, err
	}
	launches, calls := 0, 0
	for _, e := range eager.step.Entries {
		switch e.Command.Kind {
		case cuda.KindLaunch:
			launches++
		case cuda.KindCall:
			calls++
		}
	}
	fmt.Printf("  a step: %d entries, %d launches of transformer.ptx and %d cuBLAS sgemm calls (%d KiB of workspace per lane), all replayed\n",
		len(eager.step.Entries), launches, calls, m.lib.WorkspaceBytes>>10)
	fmt.Printf("  one tenant, %d steps timed after the first, %d in flight:\n", d.steps-1, d.window)
	var per [2]*stepStats
	for i, c := range []struct {
		t    *tenant
		path lanes.Path
	}{{eager, lanes.PathEagerOnly}, {replayed, lanes.PathAdaptive}} {
		if per[i], err = solo(ctx, m.s, c.t, d.steps, d.window, c.path); err != nil {
			return nil, nil, err
		}
		st := per[i]
		fmt.Printf("    %-12s %9.1f µs/step wall %9.1f µs/step on the device (median)   %2d launches/step   %d/%d entries replayed, %d/%d steps as one graph launch\n",
			c.path, micros(st.perStep()), micros(st.medianDevice()), st.launches, st.rowsReplayed, st.rows, st.whole, st.steps)
	}
	fmt.Printf("    replayed/eager per step: wall %.2f, device %.2f\n",
		ratio(per[1].perStep(), per[0].perStep()), ratio(per[1].medianDevice(), per[0].medianDevice()))
	if per[1].whole != per[1].steps {
		return nil, nil, fmt.Errorf("%d of %d replayed steps ran as one graph launch; want all (eager entries: %s)", per[1].whole, per[1].steps, per[1].why())
	}
	return eager, replayed, nil
}

// atOnce runs every tenant's steps at once, replayed, and reports the
// steps per second.
func (m *model) atOnce(ctx context.Context) ([]*tenant, error) {
	d := m.d
	ts := make([]*tenant, d.tenants)
	for i := range ts {
		var err error
		if ts[i], err = m.newTenant(ctx, fmt.Sprintf("tenant-%d", i), newInput(d, d.seed+2+int64(i))); err != nil {
			return nil, err
		}
	}
	all, err := together(ctx, m.s, ts, d.steps, d.window)
	if err != nil {
		return nil, err
	}
	fmt.Printf("  %d tenants at once from their first steps on lanes %v of %d, %d in flight each: %d steps in %.1f ms, %.0f steps/s (%.0f sequence-tokens/s), %d/%d as one graph launch (every tenant's last)\n",
		d.tenants, all.laneList(), d.lanes, d.window, all.steps, float64(all.wall.Microseconds())/1e3,
		float64(all.steps)/all.wall.Seconds(), float64(all.steps*d.batch)/all.wall.Seconds(), all.whole, all.steps)
	return ts, nil
}

// check reads back every tenant's x after its last step and compares it
// with the float64 reference; the eager and the replayed tenant, which
// started from the same input, must agree bit for bit on the simulated
// device (both ran the same Go references in the same order).
func (m *model) check(ctx context.Context, eager, replayed *tenant, ts []*tenant) error {
	for _, l := range m.s.Lanes() {
		if err := m.s.Synchronize(ctx, l.ID); err != nil {
			return err
		}
	}
	got := map[*tenant][]float32{}
	for _, t := range append([]*tenant{eager, replayed}, ts...) {
		v, err := hostio.Readback(ctx, m.s, t.name, t.x)
		if err != nil {
			return err
		}
		got[t] = v
	}
	identical := true
	for i, v := range got[eager] {
		if math.Float32bits(v) != math.Float32bits(got[replayed][i]) {
			identical = false
			break
		}
	}
	distinct := append([]*tenant{eager}, ts...) // replayed's input is eager's
	want := m.references(distinct)
	worst := normwise(got[replayed], want[0])
	for i, t := range distinct {
		worst = max(worst, normwise(got[t], want[i]))
	}
	same := "bit-identical"
	if !identical {
		same = "not bit-identical"
	}
	fmt.Printf("  every tenant's x after %d steps against the float64 reference: worst normwise error %.2g (tolerance %g); eager and replayed %s\n",
		m.d.steps, worst, tolerance, same)
	switch {
	case !(worst <= tolerance):
		return fmt.Errorf("error %g beyond %g", worst, tolerance)
	case !identical && m.dev.Info().Backend == "sim":
		return errors.New("the eager and the replayed tenant differ on the simulated device, which runs the same references either way")
	}
	return nil
}

// references are the float64 references of ts's inputs, computed side by
// side (on a GPU run of a wide model they are most of the run's time).
func (m *model) references(ts []*tenant) [][]float64 {
	out := make([][]float64, len(ts))
	var wg sync.WaitGroup
	for i, t := range ts {
		wg.Go(func() { out[i] = decodeRef(m.d, m.host, t.input, m.d.steps) })
	}
	wg.Wait()
	return out
}

// micros is d in microseconds.
func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// ratio is a over b (0 when b is).
func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
