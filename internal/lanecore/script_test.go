package lanecore_test

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
	discovery "github.com/lanesched/lanes/internal/discovery"

	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/lanes"
)

// TestScripts runs the behaviour scripts in testdata/*.txt, in the
// datadriven style of etcd/raft: each script drives one fresh lane on the
// simulated device's virtual clock, and under every command the test prints
// what the lane did, to be compared with the expected output below it.
// Regenerate the expected outputs with
//
//	go test ./lanes -run TestScripts -rewrite
//
// and read every changed line before keeping it.
//
// The command language (one lane per script, with four zeroed int32
// counters c0..c3 of 16 elements each):
//
//	configure capacity=N   open the cache's preparation (Lane.Configure)
//	seal                   close preparation (Lane.Seal)
//	trim                   destroy every executable (Lane.Trim)
//	preparation            snapshot the preparation (Lane.Preparation)
//	catalog                print the sealed program catalog (Lane.Catalog)
//	submit [tenant=T] [path=P] [boundaries=(N,...)] [program=NAME nodes=N] [retain=(cN,...)]
//	                       submit the batch whose entries follow, one a line:
//	  inc cN [node=N] [n=16] [key=none] [scope=plan|none|lane:K] [phase=PH]
//	                       a launch of inc_i32 adding 1 to the first n
//	                       elements of counter cN; it carries a replay key
//	                       (plan scope) unless key=none
//	  upload cN [value=V] [node=N] [phase=PH]  write V to every element (dynamic_binding)
//	  zero cN [node=N] [phase=PH]              memset to zero (initialization)
//	  copy cA cB [node=N] [phase=PH]           copy cA into cB (readout)
//	poll                   Lane.Poll: the receipts that ended, without waiting
//	tick [by=DURATION]     advance the virtual clock (default 10ms: everything enqueued ends)
//	wait fence=N           Lane.Wait
//	synchronize            Lane.Synchronize
//	recover                Lane.Recover onto a new stream of the device
//	fault KIND [nth=N] [kernel=K] [times=N]
//	                       inject a sim.Fault (launch, capture_reject, sticky, hang, update_reject, out_of_memory)
//	free cN                free counter cN on the device (its handle goes stale)
//	read cN                Lane.Readback of element 0 of cN (it synchronizes the stream)
//	counters               every non-zero lane counter
//	ledger                 exactly-once accounting of the script's submissions
//	coverage               the cache dispositions and gap reasons the script has not shown
//
// Output: a submission prints its fence, one line per replay candidate
// (its entries and its cache disposition), the cache events, one row per
// entry (index, node, phase, operation, and "replayed" with its segment or
// "eager" with the gap reason), and the device operations it scheduled.
// Receipts print fence, outcome and error code. Executables are named seg1,
// seg2, ... in the order the script first meets them. Every lane command
// ends with the counters it changed and the lane's state.

func TestScripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil {
		t.Fatalf("glob testdata: got %v, want nil", err)
	}
	if len(files) == 0 {
		t.Fatal("got no scripts in testdata, want at least one")
	}
	for _, path := range files {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) {
			s := newScript(t)
			datadriven.RunTest(t, path, s.run)
			s.finish()
		})
	}
}

// scriptCounters is how many counters a script's lane starts with.
const scriptCounters = 4

// script is the state of one script: its lane and what the driver has seen.
type script struct {
	t    *testing.T
	r    *rig
	bufs map[string]cuda.Buffer

	segs  map[string]string // segment fingerprint -> seg1, seg2, ...
	nsegs int

	dispositions map[discovery.Disposition]bool // shown by a submission
	reasons      map[cache.Reason]bool          // shown on a row or a catalog gap

	accepted     []uint64       // fences of accepted submissions, in order
	receipts     map[uint64]int // fence -> receipts seen
	outcomes     map[lanes.Outcome]int
	submitFailed int // submissions that failed after enqueue began (no fence)
	refused      int // submissions refused before anything was enqueued
	counters     lanes.Counters
}

func newScript(t *testing.T) *script {
	r := newRig(t, sim.ClockVirtual, scriptCounters)
	s := &script{t: t, r: r, bufs: map[string]cuda.Buffer{}, segs: map[string]string{},
		receipts: map[uint64]int{}, outcomes: map[lanes.Outcome]int{},
		dispositions: map[discovery.Disposition]bool{}, reasons: map[cache.Reason]bool{}}
	for i, b := range r.bufs {
		s.bufs[fmt.Sprintf("c%d", i)] = b
	}
	return s
}

// run executes one command of a script and returns what it printed.
func (s *script) run(t *testing.T, d *datadriven.TestData) string {
	var out strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&out, format+"\n", args...) }
	lane := s.r.lane
	touchesLane := true
	switch d.Cmd {
	case "configure":
		var capacity int
		d.ScanArgs(t, "capacity", &capacity)
		prep, err := lane.Configure(capacity)
		s.printPrep(p, prep, err)
	case "seal":
		prep, err := lane.Seal()
		s.printPrep(p, prep, err)
	case "preparation":
		prep, err := lane.Preparation()
		s.printPrep(p, prep, err)
	case "trim":
		tr, err := lane.Trim()
		if err != nil {
			s.printErr(p, err)
		} else {
			p("trimmed: %d executables, %d remembered rejections, %d retired", tr.Executables, tr.Rejections, tr.Retired)
		}
	case "catalog":
		s.catalog(p)
	case "submit":
		s.submit(t, d, p)
	case "poll":
		s.printReceipts(p, lane.Poll())
	case "wait":
		var fence uint64
		d.ScanArgs(t, "fence", &fence)
		rc, err := lane.Wait(fence)
		if err != nil {
			s.printErr(p, err)
		} else {
			s.printReceipts(p, []lanes.Receipt{rc})
		}
	case "synchronize":
		rcs, released, err := lane.Synchronize()
		s.printReceipts(p, rcs)
		if len(released) > 0 {
			p("released (held no more): %s", s.bufNames(released))
		}
		if err != nil {
			s.printErr(p, err)
		} else {
			p("synchronized")
		}
	case "recover":
		st, err := backend.Must(s.r.dev).NewStream()
		if err != nil {
			p("new stream: %s", s.scrub(err.Error()))
			break
		}
		if err := lane.Recover(st); err != nil {
			s.printErr(p, err)
			_ = st.Destroy()
		} else {
			p("recovered onto a new stream")
		}
	case "read":
		buf := s.buf(t, d.CmdArgs[0].Key)
		reg, _ := buf.Region(0, 4)
		dst := make([]byte, 4)
		if err := lane.Readback(reg, lanecore.ReadbackLayout{Elem: cuda.I32, Count: 1}, dst); err != nil {
			s.printErr(p, err)
		} else {
			p("%s[0] = %d", d.CmdArgs[0].Key, int32(binary.LittleEndian.Uint32(dst)))
		}
	case "tick":
		by := 10 * time.Millisecond
		if d.HasArg("by") {
			var v string
			d.ScanArgs(t, "by", &v)
			var err error
			if by, err = time.ParseDuration(v); err != nil {
				d.Fatalf(t, "tick by=%q: got %v, want a duration", v, err)
			}
		}
		s.r.dev.Clock().Advance(by)
		p("clock +%v", by)
		touchesLane = false
	case "fault":
		s.fault(t, d, p)
		touchesLane = false
	case "free":
		name := d.CmdArgs[0].Key
		if err := s.r.dev.Free(s.buf(t, name)); err != nil {
			d.Fatalf(t, "free %s: got %v, want nil", name, err)
		}
		p("freed %s", name)
		touchesLane = false
	case "counters":
		s.printCounters(p, lanes.Counters{}, lane.Counters(), "")
		touchesLane = false
	case "ledger":
		s.ledger(p)
		touchesLane = false
	case "coverage":
		s.coverage(p)
		touchesLane = false
	default:
		d.Fatalf(t, "got unknown command %q, want one of those listed at the top of script_test.go", d.Cmd)
	}
	if touchesLane {
		now := lane.Counters()
		s.printCounters(p, s.counters, now, "counters: ")
		s.counters = now
		p("lane: %v, in flight %d, held %d", lane.State(), lane.InFlight(), lane.Held())
	}
	return out.String()
}

// finish checks, once the script is over, that every accepted submission
// ended exactly once if nothing is left in flight.
func (s *script) finish() {
	for _, rc := range s.r.lane.Poll() { // receipts retired but not yet polled
		s.note(rc)
	}
	if s.r.lane.InFlight() > 0 {
		return
	}
	for _, f := range s.accepted {
		if n := s.receipts[f]; n != 1 {
			s.t.Errorf("fence %d: got %d receipts, want exactly 1", f, n)
		}
	}
}

// note records a receipt and checks it is the first of its fence.
func (s *script) note(rc lanes.Receipt) {
	if !slices.Contains(s.accepted, rc.Fence) {
		s.t.Errorf("receipt of fence %d: got a fence never accepted, want one of %v", rc.Fence, s.accepted)
	}
	s.receipts[rc.Fence]++
	if n := s.receipts[rc.Fence]; n > 1 {
		s.t.Errorf("fence %d: got receipt number %d, want exactly 1", rc.Fence, n)
	}
	s.outcomes[rc.Outcome]++
}

func (s *script) buf(t *testing.T, name string) cuda.Buffer {
	b, ok := s.bufs[name]
	if !ok {
		t.Fatalf("buffer %q: got an unknown name, want c0..c%d", name, scriptCounters-1)
	}
	return b
}

func (s *script) bufNames(bs []cuda.Buffer) string {
	var names []string
	for _, b := range bs {
		name := fmt.Sprintf("buffer %d", b.ID)
		for n, o := range s.bufs {
			if o == b {
				name = n
			}
		}
		names = append(names, name)
	}
	return strings.Join(names, " ")
}

var faultKinds = map[string]sim.FaultKind{}

func init() {
	for k := sim.FaultLaunch; k <= sim.FaultUpdateReject; k++ {
		faultKinds[k.String()] = k
	}
}

func (s *script) fault(t *testing.T, d *datadriven.TestData, p func(string, ...any)) {
	if len(d.CmdArgs) == 0 {
		d.Fatalf(t, "fault: got no kind, want one of launch, capture_reject, sticky, hang, update_reject, out_of_memory")
	}
	kind, ok := faultKinds[d.CmdArgs[0].Key]
	if !ok {
		d.Fatalf(t, "fault %q: got an unknown kind, want a sim.FaultKind name", d.CmdArgs[0].Key)
	}
	f := sim.Fault{Kind: kind}
	var times int
	d.MaybeScanArgs(t, "nth", &f.Nth)
	d.MaybeScanArgs(t, "kernel", &f.Kernel)
	if d.MaybeScanArgs(t, "times", &times) {
		f.Times = times
	}
	if f.Nth == 0 {
		f.Nth = 1
	}
	if err := s.r.dev.InjectFault(f); err != nil {
		d.Fatalf(t, "inject %v: got %v, want nil", kind, err)
	}
	p("injected a %v fault on match %d from now", kind, f.Nth)
}

func (s *script) catalog(p func(string, ...any)) {
	cat, err := s.r.lane.Catalog()
	if err != nil {
		s.printErr(p, err)
		return
	}
	if len(cat) == 0 {
		p("no programs")
	}
	for _, desc := range cat {
		p("program %s: %d nodes, eager boundaries %v", desc.ID.Name, desc.Nodes, desc.EagerBoundaries)
		for _, sg := range desc.Segments {
			p("  segment %d: nodes %d..%d, commands %d", sg.Ordinal, sg.Start, sg.End-1, sg.Commands)
		}
		for _, g := range desc.Gaps {
			s.reasons[g.Reason] = true
			p("  gap node %d: %v", g.Node, g.Reason)
		}
	}
}
