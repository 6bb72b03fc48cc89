package main

import "testing"

// TestRunsOnTheSimulator: the example runs as CI runs it, on the simulated
// device with its Go references, eagerly and replayed, within tolerance.
func TestRunsOnTheSimulator(t *testing.T) {
	if err := run([]string{"--rows", "4", "--k", "64", "--n", "32", "--steps", "20"}); err != nil {
		t.Fatalf("run: got err %v, want nil", err)
	}
	if err := run([]string{"--rows", "0"}); err == nil {
		t.Fatalf("run(--rows 0): got nil, want an error")
	}
}
