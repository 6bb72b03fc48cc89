// The Lane: its configuration, states, counters, recovery, and the
// administrative calls (configure, seal, trim, catalog and preparation
// need a quiescent lane; ForgetTenant does not). None of them blocks.

package lanecore

import (
	"fmt"
	"time"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	discovery "github.com/lanesched/lanes/internal/discovery"

	catalog "github.com/lanesched/lanes/internal/catalog"

	lanes "github.com/lanesched/lanes/lanes"

	execcache "github.com/lanesched/lanes/internal/execcache"
	"github.com/lanesched/lanes/programs"
)

// State is a lane's state.
type State uint8

// Lane states.
const (
	StateReady     State = iota // nothing in flight
	StateSubmitted              // work in flight
	StateFailed                 // an error after enqueue began, or a device failure
)

// String names the state.
func (s State) String() string {
	return [...]string{"ready", "submitted", "failed", "unknown"}[min(int(s), 3)]
}

// Section is a host-side part of a submission's handling, timed when a
// SectionSink is configured.
type Section uint8

// Sections of a submission.
const (
	SectionValidatePrepare Section = iota // validation, discovery, preparation
	SectionBeginTiming                    // recording the start event
	SectionEnqueue                        // enqueuing the batch
	SectionRecordFence                    // recording the fence
)

// String names the section.
func (s Section) String() string {
	return [...]string{"validate_prepare", "begin_timing", "enqueue", "record_fence", "unknown"}[min(int(s), 4)]
}

// SectionSink receives the host-side timings of a submission's sections.
type SectionSink interface {
	Section(lane int, section Section, d time.Duration)
}

// Config configures a lane. Device and Stream are required; the stream must
// be of the device. Now is the host clock the lane reads, and the only one:
// for section timings when Sections is set, and to anchor each timed
// submission's device times on the host timeline (Receipt.HostStart).
type Config struct {
	ID       int
	Device   backend.Device
	Stream   backend.Stream
	Runtime  string // runtime implementation fingerprint of the programs
	Sections SectionSink
	Now      func() time.Duration
	// Waiter paces every wait on the device (Wait, Synchronize, Readback,
	// and the staged Prepare, Replay and ReplayWritten); nil blocks in the
	// device's calls.
	Waiter Waiter
	// CacheBytes bounds the host memory the lane's executables retain (the
	// uploads they captured); 0: no bound.
	CacheBytes int64
	// CacheDeviceBytes bounds the device memory the lane's executables
	// hold (backend.Exec.DeviceBytes), with the same per-tenant shares as
	// CacheBytes; 0: no bound.
	CacheDeviceBytes int64
	// PinBytes bounds the bytes of callers' input buffers the lane keeps
	// pinned for staged replays (see Replay); 0: DefaultPinBytes;
	// negative: none are pinned, every input is copied into its staging.
	PinBytes int64
	// Libraries are set up when the lane is made (SetUpLibrary), and again
	// when it recovers onto a fresh stream, so their first calls pay
	// nothing (one that fails then is tried again before its first call);
	// a library a call names that is not here is set up before that
	// call's submission enqueues anything.
	Libraries []*cuda.Library
	// OnWorkspace, when set, hears of every library workspace the lane
	// allocates (true) and lets go of (false): the actors scheduler makes
	// them no tenant's to name.
	OnWorkspace func(buf cuda.Buffer, allocated bool)
}

// Lane is the single-owner core of one stream: its submission pipeline,
// fences, held failed batches, executable cache and program catalog. It is the
// project's raft RawNode: no goroutines, no locks, no clock of its own; the
// lane actor owns it, feeds it submissions and polls, and takes what it
// produced. Not safe for concurrent use.
type Lane struct {
	id      int
	dev     backend.Device
	s       backend.Stream
	cache   *execcache.Cache
	catalog *catalog.Catalog
	stages  SectionSink
	now     func() time.Duration
	waiter  Waiter

	state     State
	failure   error
	nextFence uint64
	pending   []*pending
	held      []*pending
	spare     []*pending // completed submissions' records, reused by the next ones
	ready     []lanes.Receipt
	counters  lanes.Counters
	staged    lanes.StagedCounters
	scratch   []discovery.Command // plan's view of a batch, reused
	live      []cuda.Buffer       // handles found live while the device freed nothing (batch.go)
	liveFrees uint64              // the device's free count when live was filled
	planned   plan                // the plan of the Submit in progress, reused
	memo      *discovery.Memo     // keys of the commands and segments the lane has seen
	steps     stepMemo            // batches planned before, and what planning found (stepmemo.go)
	tailFence uint64              // the submission whose timed fence was the stream's last work, or 0 (borrowStart)
	ops       map[string]string   // kernel -> its row operation id
	callOps   map[string]string   // library call -> its row operation id

	// Attributions repeat step after step: rows and logical commands are
	// built in scratch slices and interned (intern.go).
	rowScratch     []lanes.Row
	logicalScratch []programs.LogicalCommand
	exeScratch     []memoExecutable
	rowsSeen       interner[lanes.Row]
	logicalSeen    interner[programs.LogicalCommand]
	attrHash       *attributionHash

	pins inputPins // callers' input buffers pinned in place (pins.go)

	libs         []*libraryState // libraries' per-lane state (libraries.go)
	libsReleased bool            // ReleaseLibraries ran: no library is set up again
	configured   []*cuda.Library // Config.Libraries
	onWorkspace  func(cuda.Buffer, bool)
}

// keyMemoLimit bounds a lane's key memo: thousands of distinct commands
// and segments, a few megabytes at most.
const keyMemoLimit = 4096

// New makes a lane over a stream.
func New(cfg Config) (*Lane, error) {
	if cfg.Device == nil || cfg.Stream == nil {
		return nil, fmt.Errorf("%w: a lane needs a device and a stream", lanes.ErrInvalidBatch)
	}
	if cfg.Stream.DeviceInstance() != cfg.Device.Info().Instance {
		return nil, fmt.Errorf("%w: the stream belongs to device instance %d, not %d", lanes.ErrInvalidBatch, cfg.Stream.DeviceInstance(), cfg.Device.Info().Instance)
	}
	if cfg.Sections != nil && cfg.Now == nil {
		return nil, fmt.Errorf("%w: section timings (Config.Sections) need a host clock (Config.Now)", lanes.ErrInvalidBatch)
	}
	if cfg.Runtime == "" {
		cfg.Runtime = "lanes/" + cfg.Device.Info().Backend
	}
	c := execcache.New()
	c.LimitBytes(cfg.CacheBytes)
	c.LimitDeviceBytes(cfg.CacheDeviceBytes)
	c.SetClock(cfg.Now)
	if sizer, ok := cfg.Device.(interface{ ExecBytes(nodes int) int64 }); ok {
		c.SetSizer(sizer.ExecBytes)
	}
	l := &Lane{id: cfg.ID, dev: cfg.Device, s: cfg.Stream, cache: c, catalog: catalog.New(cfg.Runtime, c), memo: discovery.NewMemo(keyMemoLimit),
		stages: cfg.Sections, now: cfg.Now, waiter: cfg.Waiter, attrHash: newAttributionHash(), pins: inputPins{budget: pinBudget(cfg.PinBytes)},
		configured: cfg.Libraries, onWorkspace: cfg.OnWorkspace}
	for _, lib := range cfg.Libraries {
		if err := lib.Validate(); err != nil {
			return nil, fmt.Errorf("%w: Config.Libraries: %w", lanes.ErrInvalidBatch, err)
		}
	}
	for _, lib := range cfg.Libraries {
		_ = l.SetUpLibrary(lib) // a failure is tried again before the library's first call
	}
	return l, nil
}

// Recover moves a failed lane onto a fresh stream of its device and makes
// it [StateReady], keeping its executable cache, program catalog, preparation
// state and counters: executables belong to the device, not to a stream,
// and a non-sticky stream failure leaves them valid (so a tenant's fault
// does not cost its neighbours their programs, their replays or the
// operator's seal). Everything in flight must have ended first
// (Synchronize, or Abandon); the held batches are dropped with the
// old stream. Do not recover a lane whose stream hung: launches of an
// executable are ordered after its earlier launches on any stream, so the
// hung stream's executables would hang the new one too; start a new Lane.
func (l *Lane) Recover(st backend.Stream) error {
	switch {
	case l.state != StateFailed:
		return rejected("recover", fmt.Errorf("%w: lane %d is %v, not failed", lanes.ErrInvalidBatch, l.id, l.state))
	case len(l.pending) > 0:
		return rejected("recover", fmt.Errorf("%w: %d submissions of lane %d are still pending; synchronize or abandon first", lanes.ErrNotQuiescent, len(l.pending), l.id))
	case st == nil || st.DeviceInstance() != l.dev.Info().Instance:
		return rejected("recover", fmt.Errorf("%w: the new stream is not of the lane's device", lanes.ErrInvalidBatch))
	}
	l.tearDownLibraries() // made for the old stream: set up again on the new one
	l.s = st
	l.state, l.failure, l.tailFence = StateReady, nil, 0
	for _, lib := range l.configured {
		_ = l.SetUpLibrary(lib) // on failure, the library's next call tries again
	}
	clear(l.held)
	l.held = l.held[:0]
	return nil
}

// ID is the lane's id.
func (l *Lane) ID() int { return l.id }

// State is the lane's state.
func (l *Lane) State() State { return l.state }

// Err is the failure that failed the lane, or nil.
func (l *Lane) Err() error { return l.failure }

// InFlight is the number of submissions whose fences are not yet terminal.
func (l *Lane) InFlight() int { return len(l.pending) }

// Held is the number of failed submissions held until the stream is
// synchronized (their buffers are not released before), or dropped with
// it by Recover.
func (l *Lane) Held() int { return len(l.held) }

// Counters returns the lane's observation counters.
func (l *Lane) Counters() lanes.Counters {
	c := l.counters
	c.CacheBytes = l.cache.Bytes()
	c.ExecutableDeviceBytes, c.Executables = l.cache.DeviceBytes(), l.cache.Len()
	return c
}

// Runtime is the runtime fingerprint programs of this lane carry.
func (l *Lane) Runtime() string { return l.catalog.Runtime() }

func (l *Lane) stamp() time.Duration {
	if l.stages == nil {
		return 0
	}
	return l.now()
}

func (l *Lane) stage(s Section, since time.Duration) time.Duration {
	if l.stages == nil {
		return 0
	}
	t := l.now()
	l.stages.Section(l.id, s, t-since)
	return t
}

// fail marks the lane failed with the first failure.
func (l *Lane) fail(err error) {
	if l.state != StateFailed {
		l.counters.Failures++
	}
	l.state = StateFailed
	if l.failure == nil {
		l.failure = err
	}
}

// quiescent reports whether the stream has no work of this lane in flight.
func (l *Lane) quiescent() bool {
	return l.state != StateFailed && len(l.pending) == 0 && len(l.held) == 0
}

// requireQuiescent retires finished fences and fails if work remains.
func (l *Lane) requireQuiescent(op string) error {
	l.collect()
	if l.state == StateFailed {
		return rejected(op, fmt.Errorf("%w: %w", lanes.ErrFailed, l.failure))
	}
	if !l.quiescent() {
		return rejected(op, fmt.Errorf("%w: %d submissions in flight and %d failed ones held; poll or synchronize first", lanes.ErrNotQuiescent, len(l.pending), len(l.held)))
	}
	l.cache.ReleaseRetired(true)
	return nil
}

// Configure opens the cache's preparation with a capacity of executables.
func (l *Lane) Configure(capacity int) (cache.Preparation, error) {
	if err := l.requireQuiescent("configure"); err != nil {
		return l.cache.Preparation(), err
	}
	p, err := l.cache.Configure(capacity)
	if err != nil {
		return p, rejected("configure", err)
	}
	return p, nil
}

// Seal closes preparation; the catalog becomes readable.
func (l *Lane) Seal() (cache.Preparation, error) {
	if err := l.requireQuiescent("seal"); err != nil {
		return l.cache.Preparation(), err
	}
	p, err := l.cache.Seal()
	if err != nil {
		return p, rejected("seal", err)
	}
	return p, nil
}

// Trim destroys every executable and forgets every program.
func (l *Lane) Trim() (cache.TrimReport, error) {
	if err := l.requireQuiescent("trim"); err != nil {
		return cache.TrimReport{}, err
	}
	t, err := l.cache.Trim(true)
	if err != nil {
		return t, rejected("trim", err)
	}
	l.catalog.Trim()
	return t, nil
}

// ForgetTenant removes what the lane keeps for a tenant the scheduler
// forgot: its programs (so that their names may be registered afresh) and,
// while preparation is open, every executable its batches captured (so
// that they hold no room others could capture into; a sealed cache keeps
// them as no one's, for any tenant's miss of their shape to rebind, and a
// tenant that comes back under the name replays them or rebinds).
// Evicted executables are retired until the stream is quiescent if it has
// work in flight; other programs that used them turn them into gaps.
func (l *Lane) ForgetTenant(tenant string, ids []programs.ID) {
	var evicted []discovery.SegmentKey
	if l.cache.Preparation().State == cache.PrepOpen {
		evicted = l.cache.EvictOwner(tenant, l.quiescent())
	} else {
		l.cache.Disown(tenant)
	}
	for _, id := range ids {
		for _, k := range l.catalog.Remove(id) {
			if l.cache.Evict(k, l.quiescent()) {
				evicted = append(evicted, k)
			}
		}
	}
	for _, k := range evicted {
		_, _ = l.catalog.Evict(k)
	}
}

// Catalog returns the sealed program catalog.
func (l *Lane) Catalog() ([]programs.Descriptor, error) {
	if err := l.requireQuiescent("catalog"); err != nil {
		return nil, err
	}
	c, err := l.catalog.Programs()
	if err != nil {
		return nil, rejected("catalog", err)
	}
	return c, nil
}

// Preparation snapshots the cache's preparation.
func (l *Lane) Preparation() (cache.Preparation, error) {
	if err := l.requireQuiescent("preparation"); err != nil {
		return l.cache.Preparation(), err
	}
	return l.cache.Preparation(), nil
}
