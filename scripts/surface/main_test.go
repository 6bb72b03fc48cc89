package main

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestTourTableIsTheCount: docs/tour.md's table of the public surface
// says what the counter counts today, package by package and in all.
func TestTourTableIsTheCount(t *testing.T) {
	counts, err := countTree("../..")
	if err != nil {
		t.Fatal(err)
	}
	tour, err := os.ReadFile("../../docs/tour.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([^`]+)`(?: \\(root\\))? \\| [0-9,]+ \\| ([0-9,]+|—) \\|")
	total := 0
	for _, n := range counts {
		total += n
	}
	seen := 0
	for _, m := range row.FindAllStringSubmatch(string(tour), -1) {
		dir := m[1]
		if dir == "cache/cachetest` + `cuda/conformance" || m[2] == "—" {
			continue
		}
		want, _ := strconv.Atoi(strings.ReplaceAll(m[2], ",", ""))
		if got := counts[dir]; got != want {
			t.Errorf("docs/tour.md says %s has %d exported names; the counter counts %d", dir, want, got)
		}
		seen++
	}
	if seen != len(counts) {
		t.Errorf("docs/tour.md lists %d public packages with a count; the counter has %d", seen, len(counts))
	}
	all := regexp.MustCompile(`(?m)^\| all public packages \| \*\*[0-9,]+\*\* \| \*\*([0-9,]+)\*\* \|`).FindStringSubmatch(string(tour))
	if all == nil {
		t.Fatal("docs/tour.md has no total row")
	}
	if want, _ := strconv.Atoi(strings.ReplaceAll(all[1], ",", "")); want != total {
		t.Errorf("docs/tour.md says %d exported names in all; the counter counts %d", want, total)
	}
}
