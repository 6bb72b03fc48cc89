//go:build !race

package embedder_test

// raceOn: the race detector slows the simulator's reference kernels about
// tenfold; tests that size work in host time size it down.
const raceOn = false
