// Soak runs: samples over time, and whether memory and latency stayed flat.

package demo

import (
	"fmt"
	"io"
	"runtime"
	"sort"
	"time"

	"github.com/lanesched/lanes/cuda"
)

// SoakSample is one soak measurement.
type SoakSample struct {
	Seconds      float64 `json:"at_s"`
	Goroutines   int     `json:"goroutines"`
	HeapBytes    uint64  `json:"heap_bytes"`          // live heap after a collection
	DeviceMemory uint64  `json:"device_memory_bytes"` // bytes allocated on the devices
	Ended        int64   `json:"ended"`               // submissions ended so far
}

// SoakReport says whether resources stayed flat over a soak.
type SoakReport struct {
	Samples        []SoakSample `json:"samples"`
	GoroutinesFlat bool         `json:"goroutines_flat"`
	HeapFlat       bool         `json:"heap_flat"`
	MemoryFlat     bool         `json:"device_memory_flat"`
}

// OK reports whether everything stayed flat.
func (s *SoakReport) OK() bool { return s.GoroutinesFlat && s.HeapFlat && s.MemoryFlat }

// soaker samples while the load runs.
type soaker struct {
	devs    []cuda.Device
	agg     *aggregate
	start   time.Time
	samples []SoakSample
}

func (s *soaker) sample() {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	var mem uint64
	for _, d := range s.devs {
		mem += d.Memory().InUse
	}
	s.samples = append(s.samples, SoakSample{Seconds: time.Since(s.start).Seconds(), Goroutines: runtime.NumGoroutine(),
		HeapBytes: ms.HeapAlloc, DeviceMemory: mem, Ended: s.agg.endedN.Load()})
}

// run samples every period until done, then once more.
func (s *soaker) run(period time.Duration, done <-chan struct{}) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	s.sample()
	for {
		select {
		case <-done:
			s.sample()
			return
		case <-tick.C:
			s.sample()
		}
	}
}

func median(v []float64) float64 {
	sort.Float64s(v)
	return v[len(v)/2]
}

// report compares the last third of the samples with the first third.
func (s *soaker) report() *SoakReport {
	r := &SoakReport{Samples: s.samples, GoroutinesFlat: true, HeapFlat: true, MemoryFlat: true}
	n := len(s.samples)
	if n < 3 {
		return r
	}
	third := max(n/3, 1)
	pick := func(from, to int, f func(SoakSample) float64) float64 {
		var v []float64
		for _, x := range s.samples[from:to] {
			v = append(v, f(x))
		}
		return median(v)
	}
	g := func(x SoakSample) float64 { return float64(x.Goroutines) }
	h := func(x SoakSample) float64 { return float64(x.HeapBytes) }
	m := func(x SoakSample) float64 { return float64(x.DeviceMemory) }
	r.GoroutinesFlat = pick(n-third, n, g) <= pick(0, third, g)+8
	r.HeapFlat = pick(n-third, n, h) <= 1.5*pick(0, third, h)+16<<20
	r.MemoryFlat = pick(n-third, n, m) <= pick(0, third, m)
	return r
}

func (r *SoakReport) write(w io.Writer) {
	first, last := r.Samples[0], r.Samples[len(r.Samples)-1]
	verdict := func(ok bool) string {
		if ok {
			return "flat"
		}
		return "GROWING"
	}
	fmt.Fprintf(w, "soak: %d samples over %.0fs: goroutines %d -> %d (%s), heap %.1f -> %.1f MiB (%s), device memory %d -> %d B (%s)\n",
		len(r.Samples), last.Seconds, first.Goroutines, last.Goroutines, verdict(r.GoroutinesFlat),
		float64(first.HeapBytes)/(1<<20), float64(last.HeapBytes)/(1<<20), verdict(r.HeapFlat),
		first.DeviceMemory, last.DeviceMemory, verdict(r.MemoryFlat))
}
