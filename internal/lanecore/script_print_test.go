// How the scripts print what a lane did: receipts, preparation, counters,
// the exactly-once ledger and coverage, with keys and instances scrubbed.

package lanecore_test

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	discovery "github.com/lanesched/lanes/internal/discovery"
	"github.com/lanesched/lanes/lanes"
)

// seg names a segment fingerprint, in the order the script meets them.
func (s *script) seg(fingerprint string) string {
	if n, ok := s.segs[fingerprint]; ok {
		return n
	}
	s.nsegs++
	n := fmt.Sprintf("seg%d", s.nsegs)
	s.segs[fingerprint] = n
	return n
}

var (
	hexKey   = regexp.MustCompile(`\b[0-9a-f]{64}\b`)
	shortKey = regexp.MustCompile(`\b[0-9a-f]{12}\b`)
	instance = regexp.MustCompile(`instance \d+`)
)

// scrub makes an error message deterministic: segment keys become their
// script names and device instance numbers (global to the process) go.
func (s *script) scrub(msg string) string {
	msg = hexKey.ReplaceAllStringFunc(msg, s.seg)
	msg = shortKey.ReplaceAllStringFunc(msg, func(k string) string {
		for fp, n := range s.segs {
			if strings.HasPrefix(fp, k) {
				return n
			}
		}
		return "<key>"
	})
	return instance.ReplaceAllString(msg, "instance N")
}

func (s *script) printErr(p func(string, ...any), err error) {
	var le *lanes.Error
	if !errors.As(err, &le) {
		s.t.Errorf("error %v: got %T, want a *lanes.Error", err, err)
		p("error (%T): %s", err, s.scrub(err.Error()))
		return
	}
	flags := []string{"blame " + le.Blame.String()}
	if le.NotSubmitted {
		flags = append(flags, "not submitted")
	}
	if le.Retryable {
		flags = append(flags, "retryable")
	}
	if le.Sticky {
		flags = append(flags, "sticky")
	}
	p("error %s: %s (%s)", le.Op, le.Code, strings.Join(flags, ", "))
	p("  %s", s.scrub(err.Error()))
}

func (s *script) printPrep(p func(string, ...any), prep cache.Preparation, err error) {
	if err != nil {
		s.printErr(p, err)
	}
	p("preparation: %v, capacity %d, resident %d, rejected %d, batches %d, captured %d, uploaded %d, capacity_deferred %d",
		prep.State, prep.Capacity, prep.Resident, prep.Rejected, prep.Batches, prep.Captured, prep.Uploaded, prep.CapacityDeferred)
}

func (s *script) printReceipts(p func(string, ...any), rcs []lanes.Receipt) {
	if len(rcs) == 0 {
		p("no receipts")
	}
	for _, rc := range rcs {
		s.note(rc)
		line := fmt.Sprintf("receipt fence %d: %v", rc.Fence, rc.Outcome)
		if rc.Err != nil {
			c := cuda.Classify(rc.Err)
			line += fmt.Sprintf(" (%s, blame %s", c.Code, c.Blame)
			if c.Sticky {
				line += ", sticky"
			}
			line += ")"
		}
		if len(rc.Released) > 0 {
			line += ", released " + s.bufNames(rc.Released)
		}
		p("%s", line)
	}
}

// printCounters prints the counters that differ between two snapshots, by
// field name, in declaration order.
func (s *script) printCounters(p func(string, ...any), before, after lanes.Counters, prefix string) {
	b, a := reflect.ValueOf(before), reflect.ValueOf(after)
	var parts []string
	for i := range a.NumField() {
		if a.Type().Field(i).Name == "ExecutableDeviceBytes" {
			continue // the cost model's figure, a gauge: its own tests check it
		}
		var d int64
		switch f := a.Field(i); f.Kind() {
		case reflect.Uint64:
			d = int64(f.Uint() - b.Field(i).Uint())
		case reflect.Int64:
			d = f.Int() - b.Field(i).Int()
		}
		if d == 0 {
			continue
		}
		if prefix == "" {
			parts = append(parts, fmt.Sprintf("%s=%d", a.Type().Field(i).Name, d))
		} else {
			parts = append(parts, fmt.Sprintf("%s%+d", a.Type().Field(i).Name, d))
		}
	}
	switch {
	case len(parts) > 0:
		p("%s%s", prefix, strings.Join(parts, " "))
	case prefix == "":
		p("all counters zero")
	}
}

func (s *script) ledger(p func(string, ...any)) {
	ended := 0
	for _, f := range s.accepted {
		if s.receipts[f] > 0 {
			ended++
		}
	}
	p("accepted %d: ended %d (succeeded %d, indeterminate %d, refused %d), still in flight %d",
		len(s.accepted), ended, s.outcomes[lanes.OutcomeSucceeded], s.outcomes[lanes.OutcomeIndeterminate], s.outcomes[lanes.OutcomeRefused], s.r.lane.InFlight())
	p("failed at submit after enqueue began: %d; refused before enqueue: %d", s.submitFailed, s.refused)
}

// coverage prints the dispositions and gap reasons the script has not
// shown yet, so a script that means to show them all says so.
func (s *script) coverage(p func(string, ...any)) {
	var dis, rs []string
	n := 0
	for d := discovery.DispositionHit; d <= discovery.DispositionOutsidePreparation; d++ {
		n++
		if !s.dispositions[d] {
			dis = append(dis, d.String())
		}
	}
	for _, r := range cache.Reasons() {
		if !s.reasons[r] {
			rs = append(rs, r.String())
		}
	}
	list := func(v []string) string {
		if len(v) == 0 {
			return "none"
		}
		return strings.Join(v, " ")
	}
	p("dispositions not shown (of %d): %s", n, list(dis))
	p("gap reasons not shown (of %d): %s", len(cache.Reasons()), list(rs))
}
