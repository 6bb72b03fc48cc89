// Command customkernels runs a serving backend's own GPU work through
// lanes: an RMSNorm kernel of its own (rmsnorm.cu, loaded as a module) and
// a cuBLAS SGEMM (a library call, cuBLAS loaded at run time), chained in
// one batch, eagerly and replayed, checked against their Go references.
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
	"flag"
	"fmt"
	"math"
	"math/rand"
	"os"
	"slices"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/lanes"
)

// tolerance is the largest normwise error (largest difference over the
// largest value) accepted against the Go reference: the GPU sums in
// another order (and cuBLAS blocks its products), so results agree to
// float32 rounding over k terms, not bit for bit.
const tolerance = 1e-4

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "customkernels:", err)
		os.Exit(1)
	}
}

// shape is one step's sizes: x is rows×k, B is k×n.
type shape struct{ rows, k, n, steps int }

func run(args []string) error {
	var sh shape
	fs := flag.NewFlagSet("customkernels", flag.ContinueOnError)
	fs.IntVar(&sh.rows, "rows", 32, "rows of x (tokens)")
	fs.IntVar(&sh.k, "k", 256, "columns of x, rows of B (hidden size)")
	fs.IntVar(&sh.n, "n", 256, "columns of B (output size)")
	fs.IntVar(&sh.steps, "steps", 50, "steps timed per mode")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if sh.rows < 1 || sh.k < 1 || sh.n < 1 || sh.steps < 1 {
		return fmt.Errorf("--rows, --k, --n and --steps must be at least 1")
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
	s, err := actors.Start(ctx, actors.Config{Devices: []cuda.Device{dev}})
	if err != nil {
		return err
	}
	defer s.Stop(ctx)
	w, err := newWorkload(ctx, s, dev, sh)
	if err != nil {
		return err
	}
	fmt.Printf("customkernels on %s: rmsnorm_f32 (own module) then cuBLAS-style sgemm (library call), %dx%d · %dx%d, %d steps per mode\n",
		dev.Info().Name, sh.rows, sh.k, sh.k, sh.n, sh.steps)
	for _, mode := range []lanes.Path{lanes.PathEagerOnly, lanes.PathAdaptive} {
		if err := w.measure(ctx, mode); err != nil {
			return err
		}
	}
	if f := syncingCall(); f != nil {
		return w.syncDuringCapture(ctx, f)
	}
	return nil
}

// workload is the step's buffers and commands.
type workload struct {
	s       *actors.Scheduler
	dev     cuda.Device
	sh      shape
	x, wt   []float32
	b       []float32
	y, c    cuda.Buffer
	step    lanes.Batch
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
	w := &workload{s: s, dev: dev, sh: sh, x: randF32(sh.rows * sh.k), wt: randF32(sh.k), b: randF32(sh.k * sh.n), perStep: map[lanes.Path]time.Duration{}, device: map[lanes.Path]time.Duration{}}
	alloc := func(n int) (cuda.Buffer, error) {
		buf, err := dev.Alloc(cuda.BufferSpec{Size: uint64(4 * n), Elem: cuda.F32})
		if err == nil {
			err = s.Own("serving", buf)
		}
		return buf, err
	}
	var bufs [5]cuda.Buffer
	for i, n := range []int{sh.rows * sh.k, sh.k, sh.rows * sh.k, sh.k * sh.n, sh.rows * sh.n} {
		b, err := alloc(n)
		if err != nil {
			return nil, err
		}
		bufs[i] = b
	}
	x, wt, y, b, c := bufs[0], bufs[1], bufs[2], bufs[3], bufs[4]
	w.y, w.c = y, c
	for _, u := range []struct {
		dst cuda.Buffer
		v   []float32
	}{{x, w.x}, {wt, w.wt}, {b, w.b}} {
		cmd, err := cuda.Upload(u.dst.Whole(), encode(u.v))
		if err != nil {
			return nil, err
		}
		// One batch each: a batch carries at most Config.MaxBatchBytes.
		if _, err := s.Submit(ctx, "serving", lanes.Batch{Entries: []lanes.Entry{lanes.Eager(cache.PhaseInitialization, cmd)}}); err != nil {
			return nil, err
		}
	}
	rms, err := cuda.LaunchNamed(dev.Kernels(), rmsnorm, cuda.LaunchConfig{Grid: cuda.Dim3{X: uint32(sh.rows), Y: 1, Z: 1}, Block: cuda.Dim3{X: 256, Y: 1, Z: 1}},
		cuda.BufferArg(y.Whole()), cuda.BufferArg(x.Whole()), cuda.BufferArg(wt.Whole()), cuda.I32Arg(int32(sh.rows)), cuda.I32Arg(int32(sh.k)), cuda.F32Arg(1e-5))
	if err != nil {
		return nil, err
	}
	gemm, err := sgemm(y.Whole(), b.Whole(), c.Whole(), sh.rows, sh.n, sh.k)
	if err != nil {
		return nil, err
	}
	w.step = lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("customkernels/v1", 0, rms), lanes.Replayed("customkernels/v1", 1, gemm)}}
	return w, nil
}

// measure runs the step steps times on one path, 16 in flight (as a
// serving loop keeps its GPU busy), checks the result, and reports the
// wall time per step and the device time of one step (the median of the
// receipts', measured by CUDA events).
func (w *workload) measure(ctx context.Context, path lanes.Path) error {
	step := w.step
	step.Path, step.Timing = path, lanes.TimingCompletion
	r, err := w.s.Submit(ctx, "serving", step) // the first adaptive step captures
	if err != nil {
		return err
	}
	const window = 16
	var inFlight []*actors.Pending
	var device []time.Duration
	wait := func(p *actors.Pending) error {
		rc, err := p.Result()
		if err == nil {
			device, r = append(device, rc.DeviceTime), rc
		}
		return err
	}
	start := time.Now()
	for range w.sh.steps {
		if len(inFlight) == window {
			if err := wait(inFlight[0]); err != nil {
				return err
			}
			inFlight = inFlight[1:]
		}
		p, err := w.s.SubmitAsync(ctx, "serving", step)
		if err != nil {
			return err
		}
		inFlight = append(inFlight, p)
	}
	for _, p := range inFlight {
		if err := wait(p); err != nil {
			return err
		}
	}
	per := time.Since(start) / time.Duration(w.sh.steps)
	slices.Sort(device)
	med := device[len(device)/2]
	w.perStep[path], w.device[path] = per, med
	worst, err := w.check(ctx)
	if err != nil {
		return err
	}
	rows := r.Attribution.Rows
	fmt.Printf("  %-12s %8.1f µs/step wall, %8.1f µs/step on the device   rmsnorm %s, sgemm %s   error %.2g (tolerance %g)\n",
		path, micros(per), micros(med), how(rows[0]), how(rows[1]), worst, tolerance)
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

// check reads C back and returns its error against the references,
// normwise: the largest difference over the largest reference value.
func (w *workload) check(ctx context.Context) (float64, error) {
	if err := w.s.Synchronize(ctx, 0); err != nil {
		return 0, err
	}
	got, err := readback(w.dev, w.c)
	if err != nil {
		return 0, err
	}
	sh := w.sh
	y := make([]float32, sh.rows*sh.k)
	rmsnormRef(y, w.x, w.wt, sh.rows, sh.k, 1e-5)
	want := make([]float32, sh.rows*sh.n)
	sgemmRef(want, y, w.b, sh.rows, sh.n, sh.k)
	var diff, scale float64
	for i := range want {
		diff = math.Max(diff, math.Abs(float64(got[i]-want[i])))
		scale = math.Max(scale, math.Abs(float64(want[i])))
	}
	return diff / max(scale, 1e-30), nil
}

// syncDuringCapture submits a library call that synchronizes its stream:
// the capture it is in is invalidated, and the batch runs eagerly with the
// capture's rejection as its reason, and succeeds.
func (w *workload) syncDuringCapture(ctx context.Context, f func(uintptr) error) error {
	call, err := cuda.Call(&cuda.LibraryCall{Name: "syncs_its_stream", Regions: []cuda.Touch{{Region: w.c.Whole(), Access: cuda.AccessRead}}, Enqueue: f})
	if err != nil {
		return err
	}
	r, err := w.s.Submit(ctx, "serving", lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("customkernels/v1", 0, call)}})
	if err != nil {
		return err
	}
	fmt.Printf("  a library call that synchronizes during capture: %v, %s\n", r.Outcome, how(r.Attribution.Rows[0]))
	for _, ev := range r.Attribution.Events {
		fmt.Printf("    cache event %s: %s\n", ev.Kind, ev.Detail)
	}
	return nil
}

// readback copies a buffer to the host on a stream of this goroutine's
// own, after the lane synchronized.
func readback(dev cuda.Device, b cuda.Buffer) ([]float32, error) {
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
	out := make([]byte, b.Size)
	if err := st.Readback(b.Whole(), out); err != nil {
		return nil, err
	}
	return f32s(out), nil
}

func encode(v []float32) []byte {
	b := make([]byte, 4*len(v))
	putF32s(b, v)
	return b
}
