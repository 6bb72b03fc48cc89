//go:build race

// The race detector's slowdown, for tests whose figures depend on speed.

package demo_test

// raceEnabled reports whether the race detector is on: the simulated
// kernels run several times slower under it.
const raceEnabled = true
