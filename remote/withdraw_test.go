package remote_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
)

func init() { children["gate-host"] = gateHostChild }

// gateConfig is the scheduler of a gated lane: one lane, whose stream has
// no room once it holds a batch of two commands, so that the batches a
// tenant sends while a gated one runs wait in the lane's fair queue; and a
// hang timeout no test's gate comes near.
func gateConfig(dev cuda.Device) actors.Config {
	return actors.Config{Devices: []cuda.Device{dev}, LanesPerDevice: 1, MaxBatchEntries: 2, HangTimeout: 10 * time.Minute}
}

// gate is the library call "gate": it says it entered, then waits for
// one opening (on the device's stream, which it holds meanwhile).
type gate struct {
	entered func()
	open    <-chan struct{}
}

func (g *gate) build([]cuda.Touch, []byte) (*cuda.LibraryCall, error) {
	return &cuda.LibraryCall{Reference: func([][]byte) error {
		g.entered()
		<-g.open
		return nil
	}}, nil
}

// gateHostChild serves a lane host whose lane a test holds: its gate calls
// say "entered" on standard output and wait for a byte on standard input
// each (all pass once it closes).
func gateHostChild() int {
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost})
	if err != nil {
		return 1
	}
	open := make(chan struct{})
	go func() {
		in := bufio.NewReader(os.Stdin)
		for {
			if _, err := in.ReadByte(); err != nil {
				close(open)
				return
			}
			open <- struct{}{}
		}
	}()
	g := &gate{entered: func() { fmt.Println("entered") }, open: open}
	h, err := remote.Serve(context.Background(), remote.HostConfig{Name: "gate", Scheduler: gateConfig(dev), Calls: remote.LibraryCalls{"gate": g.build}})
	if err != nil {
		fmt.Println("Serve:", err)
		return 1
	}
	fmt.Println(h.Listening())
	select {}
}

// ender is a submission in flight: a lanes.Pending.
type ender interface {
	Done() <-chan struct{}
	Result() (lanes.Receipt, error)
}

// gateSide is one way to the gated lane: one process, or a lane host
// through a front.
type gateSide struct {
	name    string
	alloc   func() cuda.Buffer
	submit  func(ctx context.Context, b lanes.Batch) (ender, error)
	read    func(r cuda.Region) []byte
	entered func() // waits until a gate call runs
	release func() // lets one gate call end
	settled func() // waits until the host took every Withdraw queued (nil: nothing to wait for)
}

// passingDeadline is a context whose deadline passes when the test says.
type passingDeadline struct {
	context.Context
	done   chan struct{}
	passed atomic.Bool
}

func newPassingDeadline() *passingDeadline {
	return &passingDeadline{Context: context.Background(), done: make(chan struct{})}
}

func (c *passingDeadline) Done() <-chan struct{} { return c.done }

func (c *passingDeadline) Err() error {
	if c.passed.Load() {
		return context.DeadlineExceeded
	}
	return nil
}

func (c *passingDeadline) pass() {
	c.passed.Store(true)
	close(c.done)
}

// withdrawnView is what a caller sees of a submission's end.
type withdrawnView struct {
	Outcome                      lanes.Outcome
	Code                         cuda.Code
	NotSubmitted                 bool
	Withdrawn, Canceled, Expired bool
	Msg                          string
}

func viewWithdrawn(r lanes.Receipt, err error) withdrawnView {
	c := cuda.Classify(err)
	v := withdrawnView{Outcome: r.Outcome, Code: c.Code, NotSubmitted: c.NotSubmitted, Withdrawn: errors.Is(err, actors.ErrWithdrawn),
		Canceled: errors.Is(err, context.Canceled), Expired: errors.Is(err, context.DeadlineExceeded)}
	if err != nil {
		v.Msg = err.Error()
	}
	return v
}

// runWithdrawals holds the lane with a gated batch, submits two batches
// behind it whose contexts end (one canceled, one past its deadline)
// while they wait, then a gated batch whose context ends while it runs.
// It returns what each of the three ended with, and the counter every
// batch but the gate increments.
func runWithdrawals(t *testing.T, side gateSide) ([]withdrawnView, int32) {
	t.Helper()
	buf := side.alloc()
	counter, _ := buf.Region(0, 4)
	inc, err := cuda.Launch(kernels.Builtin().MustSpec(kernels.Inc), cuda.Linear(1, 1), cuda.BufferArg(counter), cuda.I32Arg(1))
	if err != nil {
		t.Fatal(err)
	}
	gated, err := cuda.Call(&cuda.LibraryCall{Name: "gate", Regions: []cuda.Touch{{Region: counter, Access: cuda.AccessRead}}, Reference: func([][]byte) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	held := lanes.Batch{Entries: []lanes.Entry{lanes.Eager(0, gated), lanes.Eager(1, inc)}}
	step := lanes.Batch{Entries: []lanes.Entry{lanes.Eager(0, inc)}}
	wait := func(p ender, what string) (lanes.Receipt, error) {
		t.Helper()
		select {
		case <-p.Done():
		case <-time.After(within(10 * time.Second)):
			t.Fatalf("%s: %s did not end", side.name, what)
		}
		return p.Result()
	}

	a, err := side.submit(context.Background(), held)
	if err != nil {
		t.Fatalf("%s: the gated batch: got err %v, want nil", side.name, err)
	}
	side.entered() // the lane's stream is held, and full
	canceled, cancel := context.WithCancel(context.Background())
	defer cancel()
	deadline := newPassingDeadline()
	b1, err := side.submit(canceled, step)
	if err != nil {
		t.Fatalf("%s: a batch behind it: got err %v, want nil", side.name, err)
	}
	b2, err := side.submit(deadline, step)
	if err != nil {
		t.Fatalf("%s: another batch behind it: got err %v, want nil", side.name, err)
	}
	cancel()
	deadline.pass()
	// Both end while the gate still holds the lane: withdrawn, not run.
	var views []withdrawnView
	for i, p := range []ender{b1, b2} {
		views = append(views, viewWithdrawn(wait(p, fmt.Sprintf("batch %d behind the gate (its context ended)", i+1))))
	}
	side.release()
	if _, err := wait(a, "the gated batch"); err != nil {
		t.Fatalf("%s: the gated batch: got err %v, want nil", side.name, err)
	}

	// A context that ends once the lane took the batch changes nothing.
	running, stop := context.WithCancel(context.Background())
	defer stop()
	c, err := side.submit(running, held)
	if err != nil {
		t.Fatalf("%s: a gated batch with a context: got err %v, want nil", side.name, err)
	}
	side.entered()
	stop()
	if side.settled != nil {
		side.settled() // the host took the Withdraw while the batch ran
	}
	side.release()
	views = append(views, viewWithdrawn(wait(c, "the gated batch whose context ended as it ran")))
	return views, int32(binary.LittleEndian.Uint32(side.read(counter)))
}

// TestWithdrawnAsInOneProcess: a batch whose context ends while it waits
// for its lane on a lane host is withdrawn as in one process: it never
// runs, and its Pending ends at once (the lane still held) with the same
// error (errors.Is actors.ErrWithdrawn and the context's error, code
// withdrawn, not submitted, the same words); a context that ends once the
// lane took its batch changes nothing. Through the data plane and through
// the remote alike.
func TestWithdrawnAsInOneProcess(t *testing.T) {
	ctx := context.Background()
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost})
	if err != nil {
		t.Fatal(err)
	}
	entered, open := make(chan struct{}, 4), make(chan struct{})
	g := &gate{entered: func() { entered <- struct{}{} }, open: open}
	s, err := actors.Start(ctx, gateConfig(dev))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop(ctx)
	local := gateSide{name: "in one process",
		alloc: func() cuda.Buffer {
			b, err := dev.Alloc(cuda.BufferSpec{Size: 64, Elem: cuda.I32})
			if err == nil {
				err = s.Own("a", b)
			}
			if err != nil {
				t.Fatal(err)
			}
			zero, _ := cuda.Zero(b.Whole())
			if _, err := s.Submit(ctx, "a", lanes.Batch{Entries: []lanes.Entry{lanes.Eager(0, zero)}}); err != nil {
				t.Fatal(err)
			}
			return b
		},
		submit: func(ctx context.Context, b lanes.Batch) (ender, error) {
			for i, e := range b.Entries {
				if e.Command.Kind == cuda.KindCall {
					lc := *e.Command.LibraryCall
					gated, _ := g.build(nil, nil)
					lc.Reference = gated.Reference
					b.Entries = append([]lanes.Entry(nil), b.Entries...)
					b.Entries[i].Command.LibraryCall = &lc
				}
			}
			return s.SubmitAsync(ctx, "a", b)
		},
		read:    func(r cuda.Region) []byte { return readLocal(t, backend.Must(dev), r) },
		entered: func() { <-entered },
		release: func() { open <- struct{}{} },
	}
	want, wantCount := runWithdrawals(t, local)
	if wantCount != 2 || !want[0].Withdrawn || !want[0].Canceled || !want[1].Expired || want[2].Code != codes.OK {
		t.Fatalf("in one process: got %+v and the counter at %d, want two withdrawn and a batch that ran (the case tests nothing)", want, wantCount)
	}

	host := startGateHost(t)
	for _, noPlane := range []bool{false, true} {
		f, err := remote.StartFront(ctx, remote.FrontConfig{Hosts: []string{host.addr}, NoDataPlane: noPlane, Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		withdrawn := make(chan struct{}, 4)
		undo := remote.OnWithdraw(func(lanes.Pending) { withdrawn <- struct{}{} })
		viaHost := gateSide{name: fmt.Sprintf("through a lane host (NoDataPlane %v)", noPlane),
			alloc: func() cuda.Buffer {
				b, err := f.Alloc(ctx, "a", cuda.BufferSpec{Size: 64, Elem: cuda.I32})
				if err != nil {
					t.Fatal(err)
				}
				zero, _ := cuda.Zero(b.Whole())
				if _, err := f.Submit(ctx, "a", lanes.Batch{Entries: []lanes.Entry{lanes.Eager(0, zero)}}); err != nil {
					t.Fatal(err)
				}
				return b
			},
			submit: func(ctx context.Context, b lanes.Batch) (ender, error) { return f.SubmitAsync(ctx, "a", b) },
			read: func(r cuda.Region) []byte {
				b, err := f.Read(ctx, "a", r)
				if err != nil {
					t.Fatal(err)
				}
				return b
			},
			entered: host.entered,
			release: host.release,
			settled: func() {
				<-withdrawn
				// After the Withdraw, in the tenant's order on the host: its
				// answer (a refusal, the lane busy) comes once the host took
				// the Withdraw.
				if _, err := f.Preparation(ctx, "a"); !errors.Is(err, lanes.ErrNotQuiescent) {
					t.Fatalf("the lane's preparation while the gate holds it: got err %v, want lanes.ErrNotQuiescent", err)
				}
			},
		}
		got, gotCount := runWithdrawals(t, viaHost)
		undo()
		if gotCount != wantCount || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %+v, the counter at %d\nin one process:  %+v, the counter at %d", viaHost.name, got, gotCount, want, wantCount)
		}
		if err := f.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// gateHost is a gate-host child process: its address, and its gate.
type gateHost struct {
	addr  string
	in    io.Writer
	lines *bufio.Reader
	t     *testing.T
}

// startGateHost runs gateHostChild, killed when the test ends.
func startGateHost(t *testing.T) *gateHost {
	t.Helper()
	child := exec.Command(os.Args[0], "-test.run", "^$")
	child.Env = append(os.Environ(), "LANES_CHILD=gate-host")
	child.Stderr = os.Stderr
	in, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = in.Close(); _ = child.Process.Kill(); _ = child.Wait() })
	lines := bufio.NewReader(out)
	line, _ := lines.ReadString('\n')
	said, err := remote.ParseListening(line)
	if err != nil {
		t.Fatalf("the host's process: got %q (%v), want it serving", line, err)
	}
	return &gateHost{addr: said.Address, in: in, lines: lines, t: t}
}

func (h *gateHost) entered() {
	if line, err := h.lines.ReadString('\n'); err != nil || line != "entered\n" {
		h.t.Fatalf("the gate host: got %q (%v), want a gate entered", line, err)
	}
}

func (h *gateHost) release() {
	if _, err := h.in.Write([]byte{1}); err != nil {
		h.t.Fatal(err)
	}
}
