// The scripts' submit command: parsing a batch's entries and printing what
// the lane did with it (see script_test.go for the language).

package lanecore_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
)

var (
	phases = map[string]cache.Phase{"compute": cache.PhaseCompute, "initialization": cache.PhaseInitialization,
		"dynamic_binding": cache.PhaseDynamicBinding, "readout": cache.PhaseReadout}
	paths = map[string]lanes.Path{"adaptive": lanes.PathAdaptive, "eager_only": lanes.PathEagerOnly,
		"replayed_only": lanes.PathReplayedOnly, "replayed_with_boundaries": lanes.PathReplayedWithBoundaries}
)

func (s *script) submit(t *testing.T, d *datadriven.TestData, p func(string, ...any)) {
	b := lanes.Batch{}
	var program string
	nodes := 0
	for _, arg := range d.CmdArgs {
		switch arg.Key {
		case "tenant":
			b.Tenant = arg.SingleVal(t)
		case "path":
			v := arg.SingleVal(t)
			path, ok := paths[v]
			if !ok {
				d.Fatalf(t, "path=%s: got an unknown path, want adaptive, eager_only, replayed_only or replayed_with_boundaries", v)
			}
			b.Path = path
		case "boundaries":
			for _, v := range arg.Vals {
				b.EagerBoundaries = append(b.EagerBoundaries, atoi(t, d, v))
			}
		case "program":
			program = arg.SingleVal(t)
		case "nodes":
			nodes = atoi(t, d, arg.SingleVal(t))
		case "retain":
			for _, v := range arg.Vals {
				b.Retain = append(b.Retain, s.buf(t, v))
			}
		default:
			d.Fatalf(t, "submit: got unknown argument %q, want tenant, path, boundaries, program, nodes or retain", arg.Key)
		}
	}
	if program != "" {
		eager := slices.Clone(b.EagerBoundaries)
		sort.Ints(eager)
		b.Program = &programs.Capture{ID: programs.ID{Runtime: s.r.lane.Runtime(), Name: program}, Nodes: nodes, EagerBoundaries: eager}
	}
	for _, line := range strings.Split(d.Input, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			b.Entries = append(b.Entries, s.entry(t, d, line))
		}
	}
	before := s.r.traceLen()
	sub, err := s.r.lane.Submit(b)
	ops := s.deviceOps(before)
	var le *lanes.Error
	if err != nil && !errors.As(err, &le) {
		d.Fatalf(t, "submit: got error %T %v, want a *lanes.Error", err, err)
	}
	switch {
	case err == nil:
		s.accepted = append(s.accepted, sub.Fence)
		p("accepted: fence %d", sub.Fence)
	case le.NotSubmitted:
		s.refused++
		s.printErr(p, err)
		if len(ops) > 0 {
			t.Errorf("%s: a submission refused before enqueue: got device operations %v, want none", d.Pos, ops)
		}
	case sub.Fence != 0: // the caller's error partway: fenced, ends Refused
		s.accepted = append(s.accepted, sub.Fence)
		s.printErr(p, err)
		p("fenced what was enqueued: fence %d", sub.Fence)
	default:
		s.submitFailed++
		s.printErr(p, err)
	}
	if err == nil || sub.Fence != 0 {
		s.printAttribution(t, p, sub)
	}
	if len(ops) == 0 {
		p("device: nothing scheduled")
	} else {
		p("device: %s", strings.Join(ops, ", "))
	}
}

func atoi(t *testing.T, d *datadriven.TestData, v string) int {
	n, err := strconv.Atoi(v)
	if err != nil {
		d.Fatalf(t, "%q: got %v, want an integer", v, err)
	}
	return n
}

// entry parses one entry line.
func (s *script) entry(t *testing.T, d *datadriven.TestData, line string) lanes.Entry {
	fields := strings.Fields(line)
	op := fields[0]
	var pos []string
	opts := map[string]string{}
	for _, f := range fields[1:] {
		if k, v, ok := strings.Cut(f, "="); ok {
			opts[k] = v
		} else {
			pos = append(pos, f)
		}
	}
	need := func(n int) {
		if len(pos) != n {
			d.Fatalf(t, "%q: got %d buffers, want %d", line, len(pos), n)
		}
	}
	e := lanes.Entry{Node: cache.NoNode}
	if v, ok := opts["node"]; ok {
		e.Node = atoi(t, d, v)
	}
	var err error
	switch op {
	case "inc":
		need(1)
		n := int32(16)
		if v, ok := opts["n"]; ok {
			n = int32(atoi(t, d, v))
		}
		e.Phase = cache.PhaseCompute
		e.Work = lanes.Work{Form: lanes.FormSingle, ParticipantCount: 1, Tokens: 1}
		e.Command, err = cuda.Launch(s.r.dev.Registry().MustSpec(kernels.Inc), cuda.Linear(16, 16), cuda.BufferArg(s.buf(t, pos[0]).Whole()), cuda.I32Arg(n))
		scope := cache.PlanScope()
		switch v := opts["scope"]; {
		case v == "" || v == "plan":
		case v == "none":
			scope = cache.Scope{}
		case strings.HasPrefix(v, "lane:"):
			scope = cache.LaneScope(atoi(t, d, strings.TrimPrefix(v, "lane:")))
		default:
			d.Fatalf(t, "%q: got scope %q, want plan, none or lane:K", line, v)
		}
		if opts["key"] != "none" {
			e.Replay = lanes.Replayable(e.Command, cache.LaunchKey("lanes-test", e.Command), scope)
		}
	case "upload":
		need(1)
		v := int32(0)
		if s, ok := opts["value"]; ok {
			v = int32(atoi(t, d, s))
		}
		data := make([]byte, 64)
		for i := 0; i < 64; i += 4 {
			binary.LittleEndian.PutUint32(data[i:], uint32(v))
		}
		e.Phase = cache.PhaseDynamicBinding
		e.Command, err = cuda.Upload(s.buf(t, pos[0]).Whole(), data)
	case "zero":
		need(1)
		e.Phase = cache.PhaseInitialization
		e.Command, err = cuda.Zero(s.buf(t, pos[0]).Whole())
	case "copy":
		need(2)
		e.Phase = cache.PhaseReadout
		e.Command, err = cuda.Copy(s.buf(t, pos[1]).Whole(), s.buf(t, pos[0]).Whole())
	default:
		d.Fatalf(t, "entry %q: got operation %q, want inc, upload, zero or copy", line, op)
	}
	if err != nil {
		d.Fatalf(t, "entry %q: got %v, want a valid command", line, err)
	}
	if v, ok := opts["phase"]; ok {
		ph, known := phases[v]
		if !known {
			d.Fatalf(t, "entry %q: got phase %q, want compute, initialization, dynamic_binding or readout", line, v)
		}
		e.Phase = ph
	}
	return e
}

// deviceOps lists the device operations scheduled since trace entry from,
// runs of one operation collapsed ("enqueue launch x3").
func (s *script) deviceOps(from int) []string {
	tr := s.r.dev.Trace()
	var out []string
	last, n := "", 0
	flush := func() {
		if n == 1 {
			out = append(out, last)
		} else if n > 1 {
			out = append(out, fmt.Sprintf("%s x%d", last, n))
		}
	}
	for _, e := range tr[from:] {
		op := e.Op
		if e.Fault != "" {
			op += " [" + e.Fault + " fault]"
		}
		if op != last {
			flush()
			last, n = op, 0
		}
		n++
	}
	flush()
	return out
}

// dispositionReason reports whether a reason is a candidate's (a cache
// disposition's).
func dispositionReason(r cache.Reason) bool {
	switch r {
	case cache.ReasonCaptureRejected, cache.ReasonCachedRejection, cache.ReasonQuiescenceDeferred,
		cache.ReasonCapacityDeferred, cache.ReasonOutsidePreparation:
		return true
	}
	return false
}

// printAttribution prints a submission's candidates, cache events and rows.
// The candidates are the runs of rows that were replayed or carry a cache
// disposition's reason (discovery separates candidates by at least one
// other entry); the driver checks that they agree with the dispositions.
func (s *script) printAttribution(t *testing.T, p func(string, ...any), sub lanecore.Submission) {
	att, rep := sub.Attribution, sub.Preparation
	type run struct{ start, end int }
	var runs []run
	member := func(r lanes.Row) bool {
		return r.Op != "invoke" && (r.Replayed || dispositionReason(r.Reason))
	}
	for i := 0; i < len(att.Rows); {
		if !member(att.Rows[i]) {
			i++
			continue
		}
		j := i
		for j < len(att.Rows) && member(att.Rows[j]) {
			j++
		}
		runs = append(runs, run{i, j})
		i = j
	}
	segOf := map[int]string{} // entry index -> segment name
	var segs []lanes.SegmentRecord
	for _, sg := range att.Segments {
		if att.Rows[sg.Start].Op != "invoke" {
			segs = append(segs, sg)
		}
		for k := sg.Start; k < sg.End; k++ {
			segOf[k] = s.seg(sg.Fingerprint)
		}
	}
	if len(runs) != len(rep.Dispositions) {
		t.Errorf("fence %d: got %d candidate runs in the rows, want %d (one per disposition %v)", sub.Fence, len(runs), len(rep.Dispositions), rep.Dispositions)
	}
	resident := 0
	for ci, d := range rep.Dispositions {
		where := "?"
		if ci < len(runs) {
			rn := runs[ci]
			if rn.end-rn.start == 1 {
				where = fmt.Sprintf("entry %d", rn.start)
			} else {
				where = fmt.Sprintf("entries %d..%d", rn.start, rn.end-1)
			}
			for k := rn.start; k < rn.end; k++ {
				if r := att.Rows[k]; r.Replayed != d.Resident() || !r.Replayed && r.Reason != d.Reason() {
					t.Errorf("fence %d row %d: got replayed=%v reason %v, want what disposition %v says", sub.Fence, k, r.Replayed, r.Reason, d)
				}
			}
		}
		s.dispositions[d] = true
		line := fmt.Sprintf("candidate %s: %v", where, d)
		if d.Resident() {
			if resident < len(segs) {
				line += " " + s.seg(segs[resident].Fingerprint)
			}
			resident++
		}
		p("%s", line)
	}
	if resident != len(segs) {
		t.Errorf("fence %d: got %d replayed segments, want %d (the resident candidates)", sub.Fence, len(segs), resident)
	}
	for _, ev := range att.Events {
		line := "cache: " + ev.Kind
		if ev.Key != "" {
			line += " " + s.seg(ev.Key)
		}
		switch {
		case ev.Kind == "updated":
			for _, u := range rep.Updates {
				if u.To.String() == ev.Key {
					line += " in place of " + s.seg(u.From.String())
				}
			}
		case ev.Detail != "":
			line += ": " + s.scrub(ev.Detail)
		}
		p("%s", line)
	}
	for _, r := range att.Rows {
		node := "-"
		if r.Node != cache.NoNode {
			node = strconv.Itoa(r.Node)
		}
		s.reasons[r.Reason] = true
		how := "eager: " + r.Reason.String()
		if r.Replayed {
			how = "replayed " + segOf[r.Index]
		}
		p("  %d node=%s %v %s -> %s", r.Index, node, r.Phase, r.Op, how)
	}
}
