package telemetry

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/lanes"
)

func newTestIntake(limit int) (*intake, *dropCounts) {
	d := &dropCounts{names: &tenantNames{max: 100}}
	return newIntake(limit, d), d
}

func ended(tenant string) item {
	return item{isSub: true, sub: Submission{Tenant: tenant, Lane: 0, Receipt: lanes.Receipt{Outcome: lanes.OutcomeSucceeded}}}
}

func refusal(tenant string, err error) item {
	return item{isSub: true, sub: Submission{Tenant: tenant, Lane: -1, Err: err, Start: time.Now(), End: time.Now()}}
}

// TestIntakeTakesTurns: tenants' work is taken in turns, quarantines
// first, each tenant's in the order it was handed over.
func TestIntakeTakesTurns(t *testing.T) {
	in, _ := newTestIntake(100)
	for range 3 {
		in.put(ended("flood"))
	}
	in.put(ended("quiet"))
	in.put(item{quarantine: &Quarantine{Lane: 1}})
	var got []string
	for it, ok := in.take(); ok; it, ok = in.take() {
		if it.quarantine != nil {
			got = append(got, "quarantine")
			continue
		}
		got = append(got, it.sub.Tenant)
	}
	want := "[quarantine flood quiet flood flood]"
	if fmt.Sprint(got) != want {
		t.Fatalf("taken: got %v, want %s", got, want)
	}
}

// TestIntakeFloodLosesItsOwn: a full intake drops the flood's work, never
// a quiet tenant's nor a quarantine, and counts what each lost.
func TestIntakeFloodLosesItsOwn(t *testing.T) {
	in, drops := newTestIntake(10)
	for range 25 {
		in.put(ended("flood"))
	}
	in.put(ended("quiet"))
	in.put(item{quarantine: &Quarantine{Lane: 2}})
	in.put(ended("quiet"))
	counts := map[string]int{}
	for it, ok := in.take(); ok; it, ok = in.take() {
		if it.quarantine != nil {
			counts["quarantine"]++
		} else {
			counts[it.sub.Tenant]++
		}
	}
	if counts["quiet"] != 2 || counts["quarantine"] != 1 || counts["flood"] != 7 {
		t.Errorf("recorded: got %v, want both of quiet's, the quarantine, and 7 of the flood's (10 in all)", counts)
	}
	d := drops.snapshot()
	if d["flood"].Behind != 18 || d["quiet"].Behind != 0 || d[""].Behind != 0 {
		t.Errorf("drops: got %+v, want the flood's 18 alone", d)
	}
}

// TestIntakeSummarisesRefusals: a refusal handed over while the tenant's
// last waiting item is a refusal of the same kind folds into it; another
// kind, another tenant, a caller's span or an ended submission between
// them does not.
func TestIntakeSummarisesRefusals(t *testing.T) {
	in, drops := newTestIntake(100)
	over := cuda.NewSentinel(cuda.CodeOverloaded, "test: overloaded")
	for range 5 {
		in.put(refusal("a", over))
	}
	in.put(refusal("a", cuda.NewSentinel(cuda.CodeCanceled, "test: canceled"))) // another kind
	in.put(refusal("a", over))
	in.put(ended("a"))
	in.put(refusal("a", over))
	parented := refusal("a", over)
	parented.sub.Parent = trace.NewSpanContext(trace.SpanContextConfig{TraceID: [16]byte{1}, SpanID: [8]byte{1}, TraceFlags: trace.FlagsSampled})
	in.put(parented)
	in.put(refusal("b", over))
	var got []int
	for it, ok := in.take(); ok; it, ok = in.take() {
		if it.sub.Tenant == "a" {
			got = append(got, max(it.refusals, 1))
		}
	}
	if fmt.Sprint(got) != "[5 1 1 1 1 1]" {
		t.Errorf("tenant a's items, as the refusals each stands for: got %v, want [5 1 1 1 1 1]", got)
	}
	if d := drops.snapshot()["a"]; d.Summarised != 4 || d.Behind != 0 {
		t.Errorf("tenant a's counts: got %+v, want 4 summarised, nothing lost", d)
	}
}

// TestIntakeAgainstAModel: over random puts and takes by many tenants,
// every item handed over is recorded, summarised or counted as lost, the
// intake never holds more than its limit (a quarantine aside), and a
// tenant that never holds the most never loses anything.
func TestIntakeAgainstAModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	over := cuda.NewSentinel(cuda.CodeOverloaded, "test: overloaded")
	for trial := range 50 {
		limit := 1 + r.IntN(40)
		in, drops := newTestIntake(limit)
		put, taken, quiet := map[string]int{}, map[string]int{}, 0
		for range 2000 {
			switch n := r.IntN(100); {
			case n < 60:
				in.put(refusal("flood", over))
				put["flood"]++
			case n < 70:
				in.put(ended("flood"))
				put["flood"]++
			case n < 72:
				in.put(ended("quiet"))
				put["quiet"]++
				quiet++
			default:
				if it, ok := in.take(); ok {
					taken[it.sub.Tenant] += max(it.refusals, 1)
				}
			}
			if in.waiting > limit {
				t.Fatalf("trial %d: %d waiting, want at most %d", trial, in.waiting, limit)
			}
		}
		for it, ok := in.take(); ok; it, ok = in.take() {
			taken[it.sub.Tenant] += max(it.refusals, 1)
		}
		d := drops.snapshot()
		for _, tenant := range []string{"flood", "quiet"} {
			if got := taken[tenant] + int(d[tenant].Behind); got != put[tenant] {
				t.Fatalf("trial %d: tenant %s: %d recorded + %d lost = %d, want every one of %d", trial, tenant, taken[tenant], d[tenant].Behind, got, put[tenant])
			}
		}
		if d["quiet"].Behind != 0 && limit > 2 {
			t.Fatalf("trial %d (limit %d): the quiet tenant lost %d of %d, want nothing", trial, limit, d["quiet"].Behind, quiet)
		}
	}
}
