// A lane as the rest of the scheduler sees it (laneRef): its health,
// counters and status, read without asking the actor.

package actors

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/lanes"
)

// Health is a lane's standing with the router.
type Health uint8

// Lane health.
const (
	HealthStarting    Health = iota // the actor is opening its stream
	HealthServing                   // routed to
	HealthRecovering                // its stream failed: out of routing until rebuilt on a fresh one
	HealthQuarantined               // out of routing for good (its device is poisoned, or it kept failing)
	HealthStopped                   // drained and stopped
)

// String names the health.
func (h Health) String() string {
	return [...]string{"starting", "serving", "recovering", "quarantined", "stopped", "unknown"}[min(int(h), 5)]
}

// laneRef is the scheduler's handle on one lane actor: what the router
// reads, shared with the actor through atomics and a small lock.
type laneRef struct {
	id       int
	name     string // its actor's name, set before the actor starts
	device   int
	dev      backend.Device
	instance uint64 // the device instance; batches are routed to lanes of their buffers' device
	pid      *actor.PID
	disp     *threadDispatcher
	stream   backend.Stream // owned by the actor
	opened   chan struct{}  // closed once the lane first opened its stream (or failed to, or panicked): markOpened
	openOnce sync.Once

	health atomic.Uint32 // a Health; written under mu with cause
	mu     sync.Mutex
	cause  error
	tids   map[int]bool

	dead           atomic.Bool   // the actor panicked and was stopped
	inflight       atomic.Int64  // admitted, not ended
	activeWeight   atomic.Int64  // the weights of the tenants with work sent here
	stagedWeight   atomic.Int64  // the weights of the tenants with staged replays admitted here
	queued         atomic.Int64  // received, waiting in the fair queue
	received       atomic.Uint64 // batches and staged replays the mailbox delivered
	pinned         int           // tenants pinned here (Scheduler.routeMu)
	inflightFences atomic.Int64
	recoveries     atomic.Int64 // times the lane was rebuilt
	hungHeld       atomic.Int32 // lanes abandoned after a hang whose streams have not drained (pins.go)
	// lastEnd is when a submission of the lane last ended, and hungAt when
	// the lane was last declared hung (unix ns): until some lane of the
	// device ends something after hungAt, the device is still stalled
	// behind that hang. Written by the lane's thread at every poll that
	// ended something, read only when a lane hangs: kept off the cache line
	// the router reads at every admission.
	_       [64]byte
	lastEnd atomic.Int64
	hungAt  atomic.Int64
	_       [48]byte

	statsMu     sync.Mutex // the lane thread publishes, status reads: no allocation per submission
	stats       lanes.Counters
	tenantBytes map[string]int64 // device bytes of each tenant's executables (statsMu; replaced whole)
	// tenantBytesAt is when the lane last read tenantBytes, and
	// tenantBytesStale says the cache changed since (the lane's own).
	tenantBytesAt    time.Time
	tenantBytesStale bool
	staged           atomic.Value // lanes.StagedCounters
}

func (r *laneRef) setState(h Health, cause error) {
	r.mu.Lock()
	r.cause = cause
	r.health.Store(uint32(h))
	r.mu.Unlock()
}

// State is the lane's health.
func (r *laneRef) State() Health { return Health(r.health.Load()) }

func (r *laneRef) noteThread(tid int) {
	r.mu.Lock()
	if r.tids == nil {
		r.tids = map[int]bool{}
	}
	r.tids[tid] = true
	r.mu.Unlock()
}

// publish makes the lane's counters visible to status, and the device
// bytes of each tenant's executables, read (byTenant) only when the
// cache changed: at once when it holds other executables or bytes, and
// when executables only changed hands (in-place updates, which tenants
// beyond the cache's count make at every step) at most every
// tenantBytesEvery, and once the lane is idle (settled). So a step's
// cost does not grow with the tenants holding executables.
func (r *laneRef) publish(c lanes.Counters, byTenant func() map[string]int64, settled bool) {
	r.statsMu.Lock()
	held := c.ExecutableDeviceBytes != r.stats.ExecutableDeviceBytes || c.Executables != r.stats.Executables || c.Warmed != r.stats.Warmed
	moved := c.Updated != r.stats.Updated
	r.stats = c
	r.statsMu.Unlock()
	now := time.Time{}
	if !held && (moved || r.tenantBytesStale) {
		if now = time.Now(); !settled && now.Sub(r.tenantBytesAt) < tenantBytesEvery {
			r.tenantBytesStale = true
			return
		}
	}
	if held || moved || r.tenantBytesStale {
		if now.IsZero() {
			now = time.Now()
		}
		r.tenantBytesAt, r.tenantBytesStale = now, false
		m := byTenant()
		r.statsMu.Lock()
		r.tenantBytes = m
		r.statsMu.Unlock()
	}
}

// tenantBytesEvery is how often a busy lane publishes its tenants' device
// bytes when executables only change hands (laneRef.publish).
const tenantBytesEvery = 10 * time.Millisecond

// LaneStatus is a lane as Scheduler.Lanes reports it.
type LaneStatus struct {
	ID         int
	Device     int
	Health     Health
	Cause      error // why it left routing (kept once it is back: the last failure)
	Recoveries int   // times it recovered from a stream failure on a fresh stream
	InFlight   int   // admitted submissions not yet ended
	Queued     int   // of those, received and waiting in its fair queue for room on its stream
	// Received counts the batches and staged replays its mailbox delivered
	// to it since the scheduler started (one moved to another lane counts
	// on each): what was admitted to a lane and is not yet Received waits
	// in its mailbox.
	Received uint64
	Counters lanes.Counters
	// TenantDeviceBytes is the device memory each tenant's resident
	// executables on the lane hold (Counters.ExecutableDeviceBytes is
	// the lane's, retired executables and no one's included: a tenant
	// forgotten while the lane is sealed leaves its executables to
	// whoever rebinds them). While executables change hands at every step
	// (tenants beyond the cache, docs/replays.md) it is read at most every
	// 10 ms, and once the lane is idle.
	TenantDeviceBytes map[string]int64
	Staged            lanes.StagedCounters // data movement of staged replays
	// Threads are the OS thread ids its Receive ran on (with
	// Config.ThreadCheck): one run at a time, each with its thread bound
	// to the device for the run, on whichever thread the runtime gave it.
	Threads []int
}

func (r *laneRef) status() LaneStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := LaneStatus{ID: r.id, Device: r.device, Health: r.State(), Cause: r.cause, Recoveries: int(r.recoveries.Load()), InFlight: int(r.inflight.Load()), Queued: int(r.queued.Load()),
		Received: r.received.Load()}
	r.statsMu.Lock()
	st.Counters = r.stats
	if len(r.tenantBytes) > 0 {
		st.TenantDeviceBytes = maps.Clone(r.tenantBytes)
	}
	r.statsMu.Unlock()
	if c, ok := r.staged.Load().(lanes.StagedCounters); ok {
		st.Staged = c
	}
	for t := range r.tids {
		st.Threads = append(st.Threads, t)
	}
	return st
}

// markOpened tells Start the lane's opening is over (opened, failed, or
// its actor panicked), once.
func (r *laneRef) markOpened() { r.openOnce.Do(func() { close(r.opened) }) }
