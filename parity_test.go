package lanes_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lanesched/lanes"
	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/codes"
	"github.com/lanesched/lanes/internal/conformance"

	core "github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
	"github.com/lanesched/lanes/remote"
)

// The parity harness: each public call of *lanes.Server, and each
// documented mistake with it, runs in process and through lane hosts
// (launched processes, with and without the same-host data plane); what
// comes back (results, receipts field by field, Classify's class and the
// sentinels errors.Is finds) must be the same on every side, but for the
// documented differences (documentedDifferences, the same list as
// docs/lane-hosts.md's).

// hostEnv makes this test binary a lane host (hostcmd.Main, in TestMain)
// when a front of these tests launches it.
const hostEnv = "LANES_TEST_LANE_HOST"

// paritySentinels are the sentinels a parity view names when errors.Is
// finds them.
var paritySentinels = []struct {
	name string
	err  error
}{
	{"actors.ErrOverloaded", actors.ErrOverloaded}, {"actors.ErrStopped", actors.ErrStopped},
	{"actors.ErrWithdrawn", actors.ErrWithdrawn}, {"actors.ErrNoHealthyLane", actors.ErrNoHealthyLane},
	{"actors.ErrIndeterminate", actors.ErrIndeterminate}, {"actors.ErrNotYours", actors.ErrNotYours},
	{"actors.ErrInvalidTenant", actors.ErrInvalidTenant}, {"actors.ErrTenantBusy", actors.ErrTenantBusy},
	{"actors.ErrInvalidArgument", actors.ErrInvalidArgument}, {"actors.ErrBatchTooLarge", actors.ErrBatchTooLarge},
	{"actors.ErrProgramLimit", actors.ErrProgramLimit},
	{"cuda.ErrOutOfBounds", cuda.ErrOutOfBounds}, {"cuda.ErrEmptyRegion", cuda.ErrEmptyRegion},
	{"cuda.ErrForeignHandle", cuda.ErrForeignHandle}, {"cuda.ErrStaleHandle", cuda.ErrStaleHandle},
	{"cuda.ErrElementType", cuda.ErrElementType}, {"cuda.ErrKernelArity", cuda.ErrKernelArity},
	{"cuda.ErrUnknownKernel", cuda.ErrUnknownKernel}, {"cuda.ErrLaunchConfig", cuda.ErrLaunchConfig},
	{"cuda.ErrInvalidCommand", cuda.ErrInvalidCommand}, {"cuda.ErrAlignment", cuda.ErrAlignment},
	{"cuda.ErrOutOfMemory", cuda.ErrOutOfMemory}, {"cuda.ErrIllegalAddress", cuda.ErrIllegalAddress},
	{"lanes.ErrInvalidBatch", core.ErrInvalidBatch}, {"lanes.ErrPatch", core.ErrPatch},
	{"lanes.ErrStagedInput", core.ErrStagedInput},
	{"programs.ErrNotSealed", programs.ErrNotSealed}, {"programs.ErrUnknownProgram", programs.ErrUnknownProgram},
	{"cache.ErrNotOpen", cache.ErrNotOpen},
	{"remote.ErrNoHost", remote.ErrNoHost}, {"remote.ErrHostLost", remote.ErrHostLost},
	{"remote.ErrDeviceStateLost", remote.ErrDeviceStateLost}, {"remote.ErrUnknownCall", remote.ErrUnknownCall},
	{"context.Canceled", context.Canceled}, {"context.DeadlineExceeded", context.DeadlineExceeded},
}

// errView is what a parity check compares of an error.
type errView struct {
	Code         cuda.Code
	Blame        cuda.Blame
	Retryable    bool
	NotSubmitted bool
	Is           []string
	As           []string // the error types errors.As finds
}

func (v errView) String() string {
	if v.Code == codes.OK && len(v.Is) == 0 {
		return "ok"
	}
	return fmt.Sprintf("%v (blame %v, retryable %v, not submitted %v) is %s as %s", v.Code, v.Blame, v.Retryable, v.NotSubmitted, strings.Join(v.Is, ","), strings.Join(v.As, ","))
}

func viewErr(err error) errView {
	c := lanes.Classify(err)
	v := errView{Code: c.Code, Blame: c.Blame, Retryable: c.Retryable, NotSubmitted: c.NotSubmitted}
	for _, s := range paritySentinels {
		if err != nil && errors.Is(err, s.err) {
			v.Is = append(v.Is, s.name)
		}
	}
	var tooLarge *actors.BatchTooLargeError
	var detached *actors.DetachedError
	var suspended *actors.SuspendedError
	var uninitialized *sim.UninitializedReadError
	for _, as := range []struct {
		name string
		ok   bool
	}{
		{"*actors.BatchTooLargeError", errors.As(err, &tooLarge)},
		{"*actors.DetachedError", errors.As(err, &detached)},
		{"*actors.SuspendedError", errors.As(err, &suspended)},
		{"*sim.UninitializedReadError", errors.As(err, &uninitialized)},
	} {
		if as.ok {
			v.As = append(v.As, as.name)
		}
	}
	return v
}

// segmentView is a replayed segment but for its fingerprint, which names
// buffers (other ids on each side): only whether it has one.
type segmentView struct {
	Start, End, Ordinal, Commands, GraphNodes int
	Program                                   string
	Fingerprinted                             bool
	Logical                                   []programs.LogicalCommand
}

// receiptView is a receipt but for what differs by nature between two
// runs: its fence, its times and its buffers' ids.
type receiptView struct {
	Outcome     core.Outcome
	Err         errView
	Tenant      string
	Timed       bool
	HostTimed   bool
	Spans       [][2]int // index, segment
	Rows        []core.Row
	Segments    []segmentView
	Prelude     int
	Events      [][3]string      // kind, reason, whether it has a detail
	Preparation []map[string]any // stage, nodes, whether timed
	Launches    int
	Released    []uint64 // sizes
}

func viewReceipt(r lanes.Receipt) receiptView {
	v := receiptView{Outcome: r.Outcome, Err: viewErr(r.Err), Tenant: r.Tenant, Timed: r.DeviceTime > 0, HostTimed: r.HostTimed,
		Rows: r.Attribution.Rows, Prelude: r.Attribution.Prelude, Launches: r.Attribution.Launches}
	for _, s := range r.Spans {
		seg := 0
		if s.Segment {
			seg = 1
		}
		v.Spans = append(v.Spans, [2]int{s.Index, seg})
	}
	for _, s := range r.Attribution.Segments {
		sv := segmentView{Start: s.Start, End: s.End, Ordinal: s.Ordinal, Commands: s.Commands, GraphNodes: s.GraphNodes, Fingerprinted: s.Fingerprint != "", Logical: s.Logical}
		if s.Program != nil {
			sv.Program = s.Program.Name
		}
		v.Segments = append(v.Segments, sv)
	}
	for _, e := range r.Attribution.Events {
		v.Events = append(v.Events, [3]string{e.Kind, e.Reason, fmt.Sprint(e.Detail != "")})
	}
	for _, p := range r.Attribution.Preparation {
		v.Preparation = append(v.Preparation, map[string]any{"stage": p.Stage, "nodes": p.Nodes, "timed": p.Took > 0})
	}
	for _, b := range r.Released {
		v.Released = append(v.Released, b.Size)
	}
	return v
}

// parityRun is one case's record on one side: what it observed, in order.
type parityRun struct {
	t    *testing.T
	srv  *lanes.Server
	side string
	ctx  context.Context
	seen []observation
	// prefix makes the case's tenant names its own on a shared server.
	prefix string
}

type observation struct {
	What string
	Got  any
}

// tenant is the case's tenant of that name.
func (r *parityRun) tenant(name string) string { return r.prefix + name }

// note records what a step observed: an error (as its view), a receipt
// (as its view), or any comparable value.
func (r *parityRun) note(what string, got any) {
	switch g := got.(type) {
	case error:
		got = viewErr(g)
	case nil:
		got = viewErr(nil)
	case lanes.Receipt:
		got = viewReceipt(g)
	}
	r.seen = append(r.seen, observation{what, got})
}

// noteErr records an error by its view.
func (r *parityRun) noteErr(what string, err error) { r.note(what, viewErr(err)) }

// must fails the case (not a parity difference: the step must work on
// every side) when err is not nil.
func (r *parityRun) must(what string, err error) {
	r.t.Helper()
	if err != nil {
		r.t.Fatalf("%s (%s): got err %v, want nil", what, r.side, err)
	}
}

// alloc allocates for a tenant of the case, zeroed.
func (r *parityRun) alloc(tenant string, size uint64, elem cuda.ElementType) lanes.Buffer {
	r.t.Helper()
	b, err := r.srv.Alloc(r.ctx, r.tenant(tenant), lanes.BufferSpec{Size: size, Elem: elem})
	r.must("Alloc", err)
	r.must("Upload zeros", r.srv.Upload(r.ctx, r.tenant(tenant), b.Whole(), make([]byte, size)))
	return b
}

// read reads a tenant's region back.
func (r *parityRun) read(tenant string, reg lanes.Region) []byte {
	r.t.Helper()
	out, err := r.srv.Read(r.ctx, r.tenant(tenant), reg)
	r.must("Read", err)
	return out
}

// submit submits for a tenant of the case and notes the receipt and error.
func (r *parityRun) submit(what, tenant string, b lanes.Batch) lanes.Receipt {
	rc, err := r.srv.Submit(r.ctx, r.tenant(tenant), b)
	r.note(what+": receipt", rc)
	r.noteErr(what+": error", err)
	return rc
}

// inc is a launch of inc_i32 over n elements of b.
func (r *parityRun) inc(b lanes.Buffer, n int32) lanes.Command {
	r.t.Helper()
	cmd, err := lanes.Launch(r.srv.Kernels(), kernels.Inc, lanes.Linear(uint32(n), 64), lanes.BufferArg(b.Whole()), lanes.I32Arg(n))
	r.must("Launch", err)
	return cmd
}

// paritySide starts a server one way.
type paritySide struct {
	name  string
	start func(t *testing.T) *lanes.Server
}

// inProcessSide serves from a simulated device in this process.
func inProcessSide(t *testing.T) *lanes.Server {
	t.Helper()
	dev, err := sim.New(sim.Config{Clock: sim.ClockZeroCost, Modules: []kernels.Module{conformance.UserModule()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dev.Close() })
	srv, err := lanes.Start(context.Background(), lanes.Config{Devices: []lanes.Device{dev}})
	if err != nil {
		t.Fatalf("lanes.Start: got err %v, want nil", err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	return srv
}

// launchedHostSide serves from one lane host process (this test binary as
// lanehost) with one lane, as in process; extra are more lanehost flags.
func launchedHostSide(extra ...string) func(t *testing.T) *lanes.Server {
	return func(t *testing.T) *lanes.Server {
		t.Helper()
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		args := append([]string{"--device", "sim", "--sim-clock", "zero", "--lanes", "1"}, extra...)
		cfg := &remote.FrontConfig{
			Processes: []remote.HostProcess{{Name: "gpu0", Path: exe, Args: args, Env: []string{hostEnv + "=1"}}},
			Modules:   []kernels.Module{conformance.UserModule()},
			Logf:      func(string, ...any) {},
			// The harness compares answers, not how fast a lost host is
			// found (remote's tests judge that): a 9 MiB upload through
			// the remote under the race detector on a loaded machine
			// holds probes up for over a second.
			LostAfter: 10 * time.Second,
		}
		srv, err := lanes.Start(context.Background(), lanes.Config{Hosts: cfg})
		if err != nil {
			t.Fatalf("lanes.Start with a launched host: got err %v, want nil", err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = srv.Stop(ctx)
		})
		return srv
	}
}

// paritySides are the sides every case runs on; the first is the one the
// others are compared with.
var paritySides = []paritySide{
	{"in process", inProcessSide},
	{"lane host", launchedHostSide()},
	{"lane host, no data plane", launchedHostSide("--no-data-plane")},
}

// parityCase is one call, or one mistake with it. The cases of a side
// share one server (a process runs one front at most), so the last one
// stops it.
type parityCase struct {
	call, name string
	run        func(r *parityRun)
}

// documentedDifferences are the cases whose answers differ by design
// between one process and lane hosts, with why: the same list as
// docs/lane-hosts.md's "What differs from in process" (a test checks).
// None today: a host refuses an Alloc larger than its device as one
// process does (schedhook.CheckFits), and a front refuses a batch beyond its
// host's bounds at once (its Hello says them), the last two that
// differed.
var documentedDifferences = map[string]string{}

// TestParity runs every case on every side and compares each side's
// record with the first side's.
func TestParity(t *testing.T) {
	if testing.Short() {
		t.Skip("launches lane host processes")
	}
	records := map[string]map[string][]observation{} // case -> side -> seen
	for _, side := range paritySides {
		t.Run(side.name, func(t *testing.T) {
			shared := side.start(t)
			for i, c := range parityCases {
				key := c.call + "/" + c.name
				t.Run(key, func(t *testing.T) {
					r := &parityRun{t: t, srv: shared, side: side.name, ctx: context.Background(), prefix: fmt.Sprintf("c%d-", i)}
					c.run(r)
					if records[key] == nil {
						records[key] = map[string][]observation{}
					}
					records[key][side.name] = r.seen
					if os.Getenv("LANES_PARITY_DUMP") != "" {
						for _, o := range r.seen {
							t.Logf("%s: %+v", o.What, o.Got)
						}
					}
				})
			}
		})
	}
	base := paritySides[0].name
	var table []string
	for _, c := range parityCases {
		key := c.call + "/" + c.name
		want := records[key][base]
		status := "same"
		for _, side := range paritySides[1:] {
			got, ok := records[key][side.name]
			if !ok {
				continue // the case failed there, and said why
			}
			diff := diffObservations(want, got)
			_, documented := documentedDifferences[key]
			switch {
			case diff != "" && !documented:
				t.Errorf("%s: %s differs from %s, and it is not a documented difference:\n%s", key, side.name, base, diff)
				status = "DIFFERS"
			case diff == "" && documented:
				t.Errorf("%s: documented as a difference, but %s answers as %s does: take it off the list (here and in docs/lane-hosts.md)", key, side.name, base)
			case documented:
				status = "documented difference"
			}
		}
		table = append(table, fmt.Sprintf("| %s | %s | %d | %s |", c.call, c.name, len(want), status))
	}
	if out := os.Getenv("LANES_PARITY_TABLE"); out != "" {
		head := "| call | case | observations | " + strings.Join(sideNames(), " vs ") + " |\n|---|---|---|---|\n"
		if err := os.WriteFile(out, []byte(head+strings.Join(table, "\n")+"\n"), 0o644); err != nil {
			t.Error(err)
		}
	}
}

func sideNames() []string {
	var out []string
	for _, s := range paritySides {
		out = append(out, s.name)
	}
	return out
}

// diffObservations says how got differs from want, or "".
func diffObservations(want, got []observation) string {
	var b strings.Builder
	for i := range max(len(want), len(got)) {
		switch {
		case i >= len(want):
			fmt.Fprintf(&b, "  extra %s: %+v\n", got[i].What, got[i].Got)
		case i >= len(got):
			fmt.Fprintf(&b, "  missing %s: want %+v\n", want[i].What, want[i].Got)
		case want[i].What != got[i].What || !reflect.DeepEqual(want[i].Got, got[i].Got):
			fmt.Fprintf(&b, "  %s: got %+v\n  %s  want %+v\n", got[i].What, got[i].Got, strings.Repeat(" ", len(got[i].What)), want[i].Got)
		}
	}
	return b.String()
}

// TestDocumentedDifferencesAreTheDocs: the harness's list of documented
// differences is docs/lane-hosts.md's, case by case.
func TestDocumentedDifferencesAreTheDocs(t *testing.T) {
	f, err := os.Open("docs/lane-hosts.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var inList, marked bool
	var documented []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "<!-- parity differences -->"):
			inList, marked = true, true
		case strings.HasPrefix(line, "<!-- end parity differences -->"):
			inList = false
		case inList && strings.HasPrefix(line, "- `"):
			name, _, _ := strings.Cut(strings.TrimPrefix(line, "- `"), "`")
			documented = append(documented, name)
		}
	}
	if !marked {
		t.Fatal("docs/lane-hosts.md has no <!-- parity differences --> list")
	}
	var listed []string
	for k := range documentedDifferences {
		listed = append(listed, k)
	}
	slices.Sort(listed)
	slices.Sort(documented)
	if !slices.Equal(listed, documented) {
		t.Errorf("docs/lane-hosts.md lists %q between its parity-differences markers; the harness lists %q: make them the same", documented, listed)
	}
}
