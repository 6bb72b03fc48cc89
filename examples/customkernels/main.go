// Command customkernels runs a serving backend's own GPU work through
// lanes: an RMSNorm kernel of its own (rmsnorm.cu, loaded as a module) and
// a cuBLAS SGEMM (a library call, cuBLAS loaded at run time), chained in
// one batch, eagerly and replayed, for several tenants on several lanes
// (4 and 4 by default), checked against their Go references. Each lane has
// its own cuBLAS handle and workspace (a cuda.Library, set up on the lane
// before its first SGEMM); the weights every tenant reads are filled once
// through the scheduler (FillShared) and shared.
//
//	go run ./examples/customkernels                        # the simulated device, Go references
//	scripts/build-cuda.sh && go build -tags cuda ./examples/customkernels   # then run it on a GPU
//
// On the GPU it also shows a library call that breaks a capture rule (it
// synchronizes its stream) falling back to eager execution with its reason.
// Exit status: 0 ok, 1 a result out of tolerance or a step failed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand"
	"os"
	"slices"
	"time"

	serving "github.com/lanesched/lanes"
	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/examples/internal/cublas"
	"github.com/lanesched/lanes/examples/internal/hostio"
	"github.com/lanesched/lanes/lanes"
)

// tolerance is the largest normwise error (largest difference over the
// largest value) accepted against the Go reference: the GPU sums in
// another order (and cuBLAS blocks its products), so results agree to
// float32 rounding over k terms, not bit for bit.
const tolerance = 1e-4

func main() {
	if err := run(os.Args[1:]); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "customkernels:", err)
		os.Exit(1)
	}
}

// shape is one step's sizes (x is rows×k, B is k×n), the steps each
// tenant runs per mode, and how many tenants on how many lanes.
type shape struct{ rows, k, n, steps, tenants, lanes int }

func run(args []string) error {
	var sh shape
	fs := flag.NewFlagSet("customkernels", flag.ContinueOnError)
	fs.IntVar(&sh.rows, "rows", 32, "rows of x (tokens)")
	fs.IntVar(&sh.k, "k", 256, "columns of x, rows of B (hidden size)")
	fs.IntVar(&sh.n, "n", 256, "columns of B (output size)")
	fs.IntVar(&sh.steps, "steps", 50, "steps each tenant runs per mode")
	fs.IntVar(&sh.tenants, "tenants", 4, "tenants, each with its own x, y and C; the weights w and B are shared")
	fs.IntVar(&sh.lanes, "lanes", 4, "lanes (streams) on the device, each with its own cuBLAS handle and workspace")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if sh.rows < 1 || sh.k < 1 || sh.n < 1 || sh.steps < 1 || sh.tenants < 1 || sh.lanes < 1 || sh.lanes > 64 {
		return fmt.Errorf("--rows, --k, --n, --steps and --tenants must be at least 1, --lanes 1 to 64")
	}
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
	s, err := actors.Start(ctx, actors.Config{Devices: []cuda.Device{dev}, LanesPerDevice: sh.lanes, StrictOwnership: true,
		Libraries: []*cuda.Library{cublasLibrary}})
	if err != nil {
		return err
	}
	defer s.Stop(ctx)
	w, err := newWorkload(ctx, s, dev, sh)
	if err != nil {
		return err
	}
	fmt.Printf("customkernels on %s: rmsnorm_f32 (own module) then cuBLAS sgemm (library call, a handle and workspace per lane), %dx%d · %dx%d, %d tenants on %d lanes, %d steps each per mode\n",
		dev.Info().Name, sh.rows, sh.k, sh.k, sh.n, sh.tenants, sh.lanes, sh.steps)
	fmt.Printf("  shared weights w and B: %d B filled on lane %d in %d batch(es), %.1f µs on the device, %.1f µs in all\n",
		w.fill.Bytes, w.fill.Lane, w.fill.Batches, micros(w.fill.DeviceTime), micros(w.fill.Took))
	for _, mode := range []lanes.Path{lanes.PathEagerOnly, lanes.PathAdaptive} {
		if err := w.measure(ctx, mode); err != nil {
			return err
		}
	}
	var libs int
	var bytes int64
	for _, l := range s.Lanes() {
		libs += int(l.Counters.LibrarySetups)
		bytes += l.Counters.LibraryWorkspaceBytes
	}
	fmt.Printf("  cuBLAS set up %d times on %d lanes, %d B of workspace in all\n", libs, sh.lanes, bytes)
	if f := syncingCall(); f != nil {
		return w.syncDuringCapture(ctx, f)
	}
	return nil
}

// tenantData is one tenant's own buffers and input.
type tenantData struct {
	name    string
	x       []float32
	y, c    cuda.Buffer
	step    lanes.Batch
	lastRow []lanes.Row
}

// workload is the shared weights, each tenant's buffers and step, and what
// each mode measured.
type workload struct {
	s       *actors.Scheduler
	dev     cuda.Device
	sh      shape
	wt, b   []float32
	fill    actors.SharedFill
	tenants []*tenantData
	perStep map[lanes.Path]time.Duration
	device  map[lanes.Path]time.Duration
}

func newWorkload(ctx context.Context, s *actors.Scheduler, dev cuda.Device, sh shape) (*workload, error) {
	rng := rand.New(rand.NewSource(1))
	randF32 := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = rng.Float32()*2 - 1
		}
		return v
	}
	w := &workload{s: s, dev: dev, sh: sh, wt: randF32(sh.k), b: randF32(sh.k * sh.n), perStep: map[lanes.Path]time.Duration{}, device: map[lanes.Path]time.Duration{}}
	alloc := func(n int) (cuda.Buffer, error) {
		return dev.Alloc(cuda.BufferSpec{Size: uint64(4 * n), Elem: cuda.F32})
	}
	// The weights every tenant reads: filled once, on a lane, then shared.
	wt, err := alloc(sh.k)
	if err != nil {
		return nil, err
	}
	b, err := alloc(sh.k * sh.n)
	if err != nil {
		return nil, err
	}
	if w.fill, err = s.FillShared(ctx, actors.SharedBytes{Buffer: wt, Bytes: serving.EncodeF32(w.wt)}, actors.SharedBytes{Buffer: b, Bytes: serving.EncodeF32(w.b)}); err != nil {
		return nil, err
	}
	for i := range sh.tenants {
		t := &tenantData{name: fmt.Sprintf("tenant-%d", i), x: randF32(sh.rows * sh.k)}
		var bufs [3]cuda.Buffer
		for j, n := range []int{sh.rows * sh.k, sh.rows * sh.k, sh.rows * sh.n} {
			if bufs[j], err = alloc(n); err != nil {
				return nil, err
			}
			if err := s.Own(t.name, bufs[j]); err != nil {
				return nil, err
			}
		}
		x := bufs[0]
		t.y, t.c = bufs[1], bufs[2]
		up, err := cuda.Upload(x.Whole(), serving.EncodeF32(t.x))
		if err != nil {
			return nil, err
		}
		if _, err := s.Submit(ctx, t.name, lanes.Batch{Entries: []lanes.Entry{lanes.Eager(cache.PhaseInitialization, up)}}); err != nil {
			return nil, err
		}
		rms, err := cuda.LaunchNamed(dev.Kernels(), rmsnorm, cuda.LaunchConfig{Grid: cuda.Dim3{X: uint32(sh.rows), Y: 1, Z: 1}, Block: cuda.Dim3{X: 256, Y: 1, Z: 1}},
			cuda.BufferArg(t.y.Whole()), cuda.BufferArg(x.Whole()), cuda.BufferArg(wt.Whole()), cuda.I32Arg(int32(sh.rows)), cuda.I32Arg(int32(sh.k)), cuda.F32Arg(1e-5))
		if err != nil {
			return nil, err
		}
		gemm, err := cublas.SgemmCall(cublasLibrary, t.y.Whole(), b.Whole(), t.c.Whole(), sh.rows, sh.n, sh.k)
		if err != nil {
			return nil, err
		}
		t.step = lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("customkernels/v1", 0, rms), lanes.Replayed("customkernels/v1", 1, gemm)}}
		w.tenants = append(w.tenants, t)
	}
	return w, nil
}

// measure runs every tenant's step steps times on one path, 16 in flight
// per tenant (as a serving loop keeps its GPU busy), checks every
// tenant's result, and reports the wall time per step (all tenants' steps
// over the wall time), the device time of one step (the median of the
// receipts', measured by CUDA events) and the lanes the steps ran on.
func (w *workload) measure(ctx context.Context, path lanes.Path) error {
	steps := make([]lanes.Batch, len(w.tenants))
	for i, t := range w.tenants {
		steps[i] = t.step
		steps[i].Path, steps[i].Timing = path, lanes.TimingCompletion
		if _, err := w.s.Submit(ctx, t.name, steps[i]); err != nil { // the first adaptive step captures
			return err
		}
	}
	const window = 16
	inFlight := make([][]lanes.Pending, len(w.tenants))
	var device []time.Duration
	used := map[int]bool{}
	wait := func(i int) error {
		rc, err := inFlight[i][0].Result()
		inFlight[i] = inFlight[i][1:]
		if err == nil {
			device = append(device, rc.DeviceTime)
			used[rc.Lane] = true
			w.tenants[i].lastRow = rc.Attribution.Rows
		}
		return err
	}
	start := time.Now()
	for range w.sh.steps {
		for i, t := range w.tenants {
			if len(inFlight[i]) == window {
				if err := wait(i); err != nil {
					return err
				}
			}
			p, err := w.s.SubmitAsync(ctx, t.name, steps[i])
			if err != nil {
				return err
			}
			inFlight[i] = append(inFlight[i], p)
		}
	}
	for i := range w.tenants {
		for len(inFlight[i]) > 0 {
			if err := wait(i); err != nil {
				return err
			}
		}
	}
	per := time.Since(start) / time.Duration(w.sh.steps*len(w.tenants))
	slices.Sort(device)
	med := device[len(device)/2]
	w.perStep[path], w.device[path] = per, med
	worst, err := w.check()
	if err != nil {
		return err
	}
	rows := w.tenants[0].lastRow
	fmt.Printf("  %-12s %8.1f µs/step wall (%6.0f steps/s on %d lanes), %8.1f µs/step on the device   rmsnorm %s, sgemm %s   error %.2g (tolerance %g)\n",
		path, micros(per), 1/per.Seconds(), len(used), micros(med), how(rows[0]), how(rows[1]), worst, tolerance)
	if path == lanes.PathAdaptive {
		fmt.Printf("  replayed/eager per step: wall %.2f, device %.2f\n",
			float64(per)/float64(w.perStep[lanes.PathEagerOnly]), float64(med)/float64(w.device[lanes.PathEagerOnly]))
	}
	if worst > tolerance {
		return fmt.Errorf("%v: error %g beyond %g", path, worst, tolerance)
	}
	return nil
}

func micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }

// how says whether a row replayed, or why not.
func how(r lanes.Row) string {
	if r.Replayed {
		return "replayed"
	}
	return "eager (" + r.Reason.String() + ")"
}

// check reads every tenant's C back (their steps have ended) and returns
// the largest error against the references, normwise: the largest
// difference over the largest reference value.
func (w *workload) check() (float64, error) {
	sh := w.sh
	var worst float64
	for _, t := range w.tenants {
		got, err := hostio.Readback(context.Background(), w.s, t.name, t.c)
		if err != nil {
			return 0, err
		}
		y := make([]float32, sh.rows*sh.k)
		rmsnormRef(y, t.x, w.wt, sh.rows, sh.k, 1e-5)
		want := make([]float32, sh.rows*sh.n)
		cublas.SgemmRef(want, y, w.b, sh.rows, sh.n, sh.k)
		var diff, scale float64
		for i := range want {
			diff = math.Max(diff, math.Abs(float64(got[i]-want[i])))
			scale = math.Max(scale, math.Abs(float64(want[i])))
		}
		worst = math.Max(worst, diff/max(scale, 1e-30))
	}
	return worst, nil
}

// syncDuringCapture submits a library call that synchronizes its stream:
// the capture it is in is invalidated, and the batch runs eagerly with the
// capture's rejection as its reason, and succeeds.
func (w *workload) syncDuringCapture(ctx context.Context, f func(uintptr) error) error {
	t := w.tenants[0]
	call, err := cuda.Call(&cuda.LibraryCall{Name: "syncs_its_stream", Regions: []cuda.Touch{{Region: t.c.Whole(), Access: cuda.AccessRead}}, Enqueue: f})
	if err != nil {
		return err
	}
	r, err := w.s.Submit(ctx, t.name, lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("customkernels/v1", 0, call)}})
	if err != nil {
		return err
	}
	fmt.Printf("  a library call that synchronizes during capture: %v, %s\n", r.Outcome, how(r.Attribution.Rows[0]))
	for _, ev := range r.Attribution.Events {
		fmt.Printf("    cache event %s: %s\n", ev.Kind, ev.Detail)
	}
	return nil
}
