package programs_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/lanesched/lanes/programs"
)

// A capture declares a program's topology; Validate refuses every shape a
// catalog could not hold, each with ErrTopology and what to fix.
func TestCaptureValidate(t *testing.T) {
	ok := programs.Capture{ID: programs.ID{Runtime: "r", Name: "p"}, Nodes: 4, EagerBoundaries: []int{0}, Bindings: []int{1, 3}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("a valid capture: %v", err)
	}
	long := strings.Repeat("n", programs.MaxIDBytes+1)
	for name, c := range map[string]programs.Capture{
		"no runtime":              {ID: programs.ID{Name: "p"}, Nodes: 1},
		"no name":                 {ID: programs.ID{Runtime: "r"}, Nodes: 1},
		"a name too long":         {ID: programs.ID{Runtime: "r", Name: long}, Nodes: 1},
		"not UTF-8":               {ID: programs.ID{Runtime: "r", Name: "\xff"}, Nodes: 1},
		"no nodes":                {ID: ok.ID},
		"too many nodes":          {ID: ok.ID, Nodes: programs.MaxNodes + 1},
		"boundaries unsorted":     {ID: ok.ID, Nodes: 4, EagerBoundaries: []int{2, 1}},
		"a boundary out of range": {ID: ok.ID, Nodes: 4, EagerBoundaries: []int{4}},
		"a binding twice":         {ID: ok.ID, Nodes: 4, Bindings: []int{1, 1}},
		"a binding negative":      {ID: ok.ID, Nodes: 4, Bindings: []int{-1}},
		"a binding on a boundary": {ID: ok.ID, Nodes: 4, EagerBoundaries: []int{2}, Bindings: []int{2}},
	} {
		if err := c.Validate(); !errors.Is(err, programs.ErrTopology) {
			t.Errorf("%s: got %v, want ErrTopology", name, err)
		}
	}
}

// The small parts of a descriptor: an id prints as runtime/name, a
// segment contains its half-open node range, and a program without gaps is
// ready for determinism.
func TestDescriptorParts(t *testing.T) {
	if s := (programs.ID{Runtime: "lanes/sim", Name: "step"}).String(); s != "lanes/sim/step" {
		t.Fatalf("ID.String: %q", s)
	}
	seg := programs.Segment{Start: 2, End: 5}
	for n, want := range map[int]bool{1: false, 2: true, 4: true, 5: false} {
		if seg.Contains(n) != want {
			t.Fatalf("segment [2,5) contains %d: %v", n, !want)
		}
	}
	if !(programs.Descriptor{}).DeterminismReady() || (programs.Descriptor{Gaps: []programs.Gap{{Node: 1}}}).DeterminismReady() {
		t.Fatal("DeterminismReady is having no gaps")
	}
}
