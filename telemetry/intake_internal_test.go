package telemetry

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lanesched/lanes/internal/codes"
	"github.com/lanesched/lanes/internal/recording"
	"github.com/lanesched/lanes/lanes"
	"go.opentelemetry.io/otel/trace"
)

func newTestIntake(limit int) (*intake, *dropCounts) {
	d := &dropCounts{names: &tenantNames{max: 100}}
	return newIntake(limit, d), d
}

func ended(tenant string) item {
	return item{isSub: true, sub: recording.Submission{Tenant: tenant, Lane: 0, Receipt: lanes.Receipt{Outcome: lanes.OutcomeSucceeded}}}
}

func refusal(tenant string, err error) item {
	return item{isSub: true, sub: recording.Submission{Tenant: tenant, Lane: -1, Err: err, Start: time.Now(), End: time.Now()}}
}

// TestIntakeTakesTurns: tenants' work is taken in turns, quarantines
// first, each tenant's in the order it was handed over.
func TestIntakeTakesTurns(t *testing.T) {
	in, _ := newTestIntake(100)
	for range 3 {
		in.put(ended("flood"))
	}
	in.put(ended("quiet"))
	in.put(item{quarantine: &recording.Quarantine{Lane: 1}})
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
	in.put(item{quarantine: &recording.Quarantine{Lane: 2}})
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
// newest waiting refusal of the same kind waits folds into it, whatever
// came between; one of another kind, another tenant's, or one under a
// caller's span does not.
func TestIntakeSummarisesRefusals(t *testing.T) {
	in, drops := newTestIntake(100)
	over := codes.NewSentinel(codes.Overloaded, "test: overloaded")
	for range 5 {
		in.put(refusal("a", over))
	}
	in.put(refusal("a", codes.NewSentinel(codes.Canceled, "test: canceled"))) // another kind
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
	if fmt.Sprint(got) != "[7 1 1 1]" {
		t.Errorf("tenant a's items, as the refusals each stands for: got %v, want [7 1 1 1] (the overloaded ones, the canceled one, the ended one, the one under a span)", got)
	}
	if d := drops.snapshot()["a"]; d.Summarised != 6 || d.Behind != 0 {
		t.Errorf("tenant a's counts: got %+v, want 6 summarised, nothing lost", d)
	}
}

// TestIntakeAgainstAModel: over random puts and takes by many tenants,
// every item handed over is recorded, summarised or counted as lost, the
// intake never holds more than its limit (a quarantine aside), and a
// tenant that never holds the most never loses anything.
func TestIntakeAgainstAModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	over := codes.NewSentinel(codes.Overloaded, "test: overloaded")
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

// TestIntakeNewNamesLoseToTenantsThatWaited: a burst of names never seen
// before, one item each, fills the intake; a tenant that was waiting
// before them keeps its work, and the burst loses its own.
func TestIntakeNewNamesLoseToTenantsThatWaited(t *testing.T) {
	in, drops := newTestIntake(10)
	in.put(ended("quiet"))
	for i := range 100 {
		in.put(ended(fmt.Sprintf("one-shot-%d", i)))
	}
	kept := map[string]bool{}
	for it, ok := in.take(); ok; it, ok = in.take() {
		kept[it.sub.Tenant] = true
	}
	if !kept["quiet"] || len(kept) != 10 {
		t.Errorf("kept: got %d tenants' work (quiet's: %v), want 10, quiet's among them", len(kept), kept["quiet"])
	}
	if d := drops.snapshot()["quiet"]; d.Behind != 0 {
		t.Errorf("the quiet tenant: got %d lost, want none", d.Behind)
	}
}

// TestIntakeFlushWaitsForWhatCameBefore: a flush is settled once what was
// waiting when it began is taken or dropped, however much comes after.
func TestIntakeFlushWaitsForWhatCameBefore(t *testing.T) {
	in, _ := newTestIntake(100)
	for range 5 {
		in.put(ended("a"))
	}
	in.put(ended("b"))
	in.markFlush()
	old := 0
	for i := 0; !in.flushed(); i++ {
		if i > 100 {
			t.Fatalf("after %d takes: the flush not settled, want it settled once the 6 before it were taken", i)
		}
		in.put(ended("a")) // the flood goes on
		in.put(ended("c"))
		it, ok := in.take()
		if !ok {
			t.Fatalf("take %d: got nothing, want work", i)
		}
		if it.seq <= 6 {
			old++
		}
	}
	if old != 6 {
		t.Errorf("the flush settled after %d of the 6 items before it were taken, want all 6", old)
	}
}

// TestLabelKeepsBadNamesOut: a name no tenant may have becomes "invalid"
// in telemetry, and takes no place among Config.MaxTenants.
func TestLabelKeepsBadNamesOut(t *testing.T) {
	n := &tenantNames{max: 1}
	for _, bad := range []string{"", "\xff\xfe", " pad", "pad ", "tab\there", string(make([]byte, 300))} {
		if got := n.of(bad); got != invalidTenant {
			t.Errorf("of(%q): got %q, want %q", bad, got, invalidTenant)
		}
	}
	if got := n.of("alice"); got != "alice" {
		t.Errorf("of(alice) after only invalid names: got %q, want alice (invalid names take no place)", got)
	}
	if got := n.of("bob"); got != otherTenants {
		t.Errorf("of(bob) past MaxTenants 1: got %q, want %q", got, otherTenants)
	}
}
