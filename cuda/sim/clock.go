// The simulated device's clocks (real time, virtual, zero cost) and the
// H200 cost model it charges work by.

package sim

import (
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/simhook"

	"math"
	"runtime"
	"sync"
	"time"
)

// ClockMode selects how the simulated device keeps time.
type ClockMode uint8

// Clock modes.
const (
	// ClockRealTime charges the cost model in wall-clock time: an eager launch
	// spins the calling goroutine for its host cost, and work completes when
	// its modelled device time has passed. The demo runs in this mode, so it
	// feels like a GPU.
	ClockRealTime ClockMode = iota
	// ClockVirtual runs on a [VirtualClock] that only the test advances. Work
	// completes when the clock reaches its modelled finish time, so every
	// query and every trace is a pure function of the calls made and the
	// clock advances: same seed, same trace. Nothing else moves it: a
	// program that serves on such a device (lanes.Start, actors.Start)
	// must advance the clock (Device.Clock().Advance) while it waits for
	// work, or the work never ends and its lane is judged hung.
	ClockVirtual
	// ClockZeroCost charges nothing: work completes as soon as the stream's worker
	// has executed it. It measures the scheduler's own overhead.
	ClockZeroCost
)

// String names the mode.
func (m ClockMode) String() string {
	switch m {
	case ClockRealTime:
		return "real"
	case ClockVirtual:
		return "virtual"
	case ClockZeroCost:
		return "zero"
	}
	return "unknown"
}

// never is the finish time of work that never finishes (a hung kernel).
const never = time.Duration(math.MaxInt64)

// VirtualClock is a device clock that moves only when told to. The zero value
// is a clock at time 0. It is safe for concurrent use.
type VirtualClock struct {
	mu  sync.Mutex
	now time.Duration
}

// Now returns the current virtual time since the clock's origin.
func (c *VirtualClock) Now() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d (negative d is ignored).
func (c *VirtualClock) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	c.mu.Lock()
	c.now += d
	c.mu.Unlock()
}

// AdvanceTo moves the clock to t if t is later than now.
func (c *VirtualClock) AdvanceTo(t time.Duration) {
	c.mu.Lock()
	if t > c.now && t != never {
		c.now = t
	}
	c.mu.Unlock()
}

// clock is the device's time source in one of the three modes.
type clock struct {
	mode    ClockMode
	origin  time.Time
	virtual *VirtualClock
}

func (c *clock) now() time.Duration {
	if c.mode == ClockVirtual {
		return c.virtual.Now()
	}
	return time.Since(c.origin)
}

// timed reports whether work completes at its modelled finish time on the
// clock (the real-time and virtual modes), not as soon as it has run: the
// workers run each item's bytes as soon as they can, and queries, waits
// and a poisoned device's error answer by the clock.
func (c *clock) timed() bool { return c.mode != ClockZeroCost }

// spin burns d of the calling goroutine's time, as a host-side driver call
// does. Only the real-time mode spends host time.
func (c *clock) spin(d time.Duration) {
	if c.mode != ClockRealTime || d <= 0 {
		return
	}
	end := time.Now().Add(d)
	for time.Now().Before(end) {
	}
}

// sleepUntil waits for device time t in the real-time mode: sleeping for long
// waits, yielding for short ones, since timers are coarser than a kernel.
func (c *clock) sleepUntil(t time.Duration, cancel <-chan struct{}) {
	if c.mode != ClockRealTime || t == never {
		return
	}
	deadline := c.origin.Add(t)
	for {
		left := time.Until(deadline)
		switch {
		case left <= 0:
			return
		case left > 200*time.Microsecond:
			timer := time.NewTimer(left - 100*time.Microsecond)
			select {
			case <-timer.C:
			case <-cancel:
				timer.Stop()
				return
			}
		default:
			runtime.Gosched()
		}
	}
}

// costModel is what each kind of work costs, host side (the calling thread's
// time inside the driver call) and device side (time on the stream). The
// zero value of a field means the H200 default below; defaultCost returns
// them all. The executables' device bytes are the GPU's, as measured
// (internal/backend.ExecBytesBase and ExecBytesPerNode).
type costModel struct {
	LaunchHost        time.Duration // host time of one eager kernel launch (cuLaunchKernel)
	KernelDevice      time.Duration // device time of a tiny kernel launched eagerly
	GraphNode         time.Duration // device time of a tiny kernel as a graph node
	GraphLaunchHost   time.Duration // host time of one cuGraphLaunch
	GraphLaunchDevice time.Duration // device time a graph launch adds before its first node
	TransferHost      time.Duration // host time of an async copy or memset call
	TransferDevice    time.Duration // device time of a small copy or memset
	InstantiateNode   time.Duration // host time per node of cuGraphInstantiate
	UpdateNode        time.Duration // host time per node of cuGraphExecUpdate
	RebindNode        time.Duration // host time per node of cuGraphExecKernelNodeSetParams
	UploadNode        time.Duration // device time per node of cuGraphUpload
	MemoryBandwidth   float64       // device memory bytes per second for kernels, copies, memsets
	HostBandwidth     float64       // host-to-device bytes per second for uploads
	StreamParallelism float64       // how many busy streams the device runs at full speed
	// ExecBytesBase and ExecBytesPerNode are the device memory an
	// instantiated, uploaded executable holds: a base and so much per node
	// (Exec.DeviceBytes).
	ExecBytesBase, ExecBytesPerNode int64
}

// defaultCost returns the costs measured on an H200 with the raw driver API
// (docs/measurements): eager launch about 3.5 µs of host time, a graph of tiny kernels
// about 0.9 µs per node, one graph launch a few µs of host time, and eight
// streams at about five times the throughput of one.
func defaultCost() costModel {
	return costModel{
		LaunchHost:        3500 * time.Nanosecond,
		KernelDevice:      1500 * time.Nanosecond,
		GraphNode:         900 * time.Nanosecond,
		GraphLaunchHost:   2500 * time.Nanosecond,
		GraphLaunchDevice: 1300 * time.Nanosecond,
		TransferHost:      2000 * time.Nanosecond,
		TransferDevice:    1200 * time.Nanosecond,
		InstantiateNode:   1000 * time.Nanosecond,
		UpdateNode:        200 * time.Nanosecond,
		RebindNode:        300 * time.Nanosecond,
		UploadNode:        100 * time.Nanosecond,
		MemoryBandwidth:   3.0e12,
		HostBandwidth:     25e9,
		StreamParallelism: 5,
		ExecBytesBase:     backend.ExecBytesBase,
		ExecBytesPerNode:  backend.ExecBytesPerNode,
	}
}

// withDefaults fills the zero fields from defaultCost.
func (c costModel) withDefaults() costModel {
	d := defaultCost()
	fill := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	fill(&c.LaunchHost, d.LaunchHost)
	fill(&c.KernelDevice, d.KernelDevice)
	fill(&c.GraphNode, d.GraphNode)
	fill(&c.GraphLaunchHost, d.GraphLaunchHost)
	fill(&c.GraphLaunchDevice, d.GraphLaunchDevice)
	fill(&c.TransferHost, d.TransferHost)
	fill(&c.TransferDevice, d.TransferDevice)
	fill(&c.InstantiateNode, d.InstantiateNode)
	fill(&c.UpdateNode, d.UpdateNode)
	fill(&c.RebindNode, d.RebindNode)
	fill(&c.UploadNode, d.UploadNode)
	if c.MemoryBandwidth <= 0 {
		c.MemoryBandwidth = d.MemoryBandwidth
	}
	if c.HostBandwidth <= 0 {
		c.HostBandwidth = d.HostBandwidth
	}
	if c.ExecBytesBase <= 0 && c.ExecBytesPerNode <= 0 {
		c.ExecBytesBase, c.ExecBytesPerNode = d.ExecBytesBase, d.ExecBytesPerNode
	}
	if c.StreamParallelism < 1 {
		c.StreamParallelism = d.StreamParallelism
	}
	return c
}

func perBytes(n uint64, bandwidth float64) time.Duration {
	return time.Duration(float64(n) / bandwidth * 1e9)
}

func init() {
	simhook.MemoryBandwidth = func(cfg any, bytesPerSecond float64) {
		cfg.(*Config).cost.MemoryBandwidth = bytesPerSecond
	}
}
