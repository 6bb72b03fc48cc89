// Package simhook is what tests reach in the simulated device beyond its
// public API: the cost model it is calibrated with (an H200's, measured),
// which no user tunes.
package simhook

// MemoryBandwidth sets a sim.Config's device memory bandwidth, bytes per
// second (cfg is a *sim.Config): kernels, copies and memsets then take
// their bytes' worth of device time at it. Package sim sets it at init.
var MemoryBandwidth func(cfg any, bytesPerSecond float64)
