// A front's link to one lane host: its registration and epoch, its loss
// or leaving, and the sender that packs many submissions into one message
// (its supervision: front_supervise.go).

package front

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/lanesched/lanes/actors"
	laneerr "github.com/lanesched/lanes/internal/laneerr"
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/lanes"

	dataplane "github.com/lanesched/lanes/remote/internal/dataplane"

	system "github.com/lanesched/lanes/remote/internal/system"

	wire "github.com/lanesched/lanes/remote/internal/wire"
	"golang.org/x/sync/semaphore"
	"google.golang.org/protobuf/proto"
)

// HostHealth is a host's standing with a front.
type HostHealth uint8

// Host states: see remote.HostJoining and the rest.
const (
	HostJoining HostHealth = iota
	HostServing
	HostLost
	HostRefused
	HostStopped
	HostLeft
)

// String names the state.
func (s HostHealth) String() string {
	return [...]string{"joining", "serving", "lost", "refused", "stopped", "left", "unknown"}[min(int(s), 6)]
}

// HostStatus is remote.HostStatus as this package makes it: see there for
// what each field means.
type HostStatus struct {
	Name                         string
	Address                      string
	Health                       HostHealth
	Epoch                        uint64
	Tenants                      int
	InFlight                     int
	Losses                       int
	Restarts                     int
	Stale                        uint64
	Refusal                      string
	LostHow                      string
	PID                          int
	Since                        time.Time
	HostName                     string
	Lanes                        int
	Runtime                      string
	RoundTrip                    RoundTrip
	FromCluster, Member          bool
	DataPlane                    bool
	DataPlaneSent, DataPlaneRead uint64
	NoDataPlane                  string
	AreaUploads, AreaBytesInUse  uint64
}

// Hosts reports every host of the front.
func (f *Front) Hosts() []HostStatus {
	if f == nil {
		return nil
	}
	links := f.AllLinks()
	out := make([]HostStatus, len(links))
	for i, l := range links {
		out[i] = l.Status()
		out[i].InFlight = f.calls.InFlight(l.Name, out[i].Epoch)
	}
	return out
}

// Link is the front's side of one host.
type Link struct {
	F      *Front
	Name   string
	launch *Process // nil: a host at a fixed address

	// maxEntries and maxBytes are the host's batch bounds under its
	// current registration (0: not said): see Front.register.
	maxEntries, maxBytes atomic.Int64

	fromCluster bool         // found in the front's cluster
	listed      atomic.Bool  // a member of the cluster now (fromCluster)
	unlistedAt  atomic.Int64 // when it last left the membership (unix nanoseconds)
	pruned      atomic.Bool  // forgotten by the front (pruneGone)

	// The hot path's lock-free view of the link, written under mu with
	// what it mirrors: the epoch the host serves under (0 while it does
	// not), when its last message of that epoch came, and its address.
	Serving atomic.Uint64
	heardAt atomic.Int64 // unix nanoseconds
	at      atomic.Pointer[string]
	leaving atomic.Uint64 // the epoch under which the host said it is leaving
	left    atomic.Uint64 // the epoch under which it left
	// The way to the host: probes sent (and when, by seq, the last few),
	// and the newest it echoed.
	probeSeq    atomic.Uint64
	probeSent   [64]atomic.Int64 // when each is due: unix nanoseconds, by seq % 64
	echoed      atomic.Uint64
	uploadBytes atomic.Int64          // upload bytes in flight to the host: probes queue behind them
	credErr     atomic.Pointer[error] // why the host's address and this front do not admit each other, if they do not (checkCredential)
	found       atomic.Pointer[error] // what the last check found at the address, when it is not a peer that admits the front
	checking    atomic.Bool
	Plane       atomic.Pointer[linkPlane] // the same-host data plane of an epoch, if the host offered one

	mu            sync.Mutex
	State         HostHealth
	addr          string
	pid           *actor.PID
	Epoch         uint64
	tenants       int
	losses        int
	restarts      int
	refusal       string
	refusedForNow bool // the host's own refusal (full, leaving): it may take the front later
	lostHow       string
	dropped       bool        // the host said it dropped the registration: it is up, joined again as it is
	since         time.Time   // when state last changed
	attempt       uint64      // the join in progress
	pending       *pendingReg // the registration welcomed in this join, until the host's first heartbeat under it
	lanes         int         // the lanes the host serves, from its Hello
	hostName      string      // the name the host gave
	runtime       string      // the runtime fingerprint of its programs
	noPlane       string      // why the registration's traffic takes the remote, when it does
	startErr      error       // why the first launch failed, if it did
	proc          *os.Process
	stdin         io.Closer
	exited        chan struct{} // closed when the launched process exited

	knownMu  sync.RWMutex
	known    map[uint64]bool                  // templates the host holds under epoch (knownMu)
	lastRows map[uint64][]lanes.Row           // the rows of each template's last receipt (the front actor's)
	lastSegs map[uint64][]lanes.SegmentRecord // and its segments
	rowsAt   uint64                           // the epoch lastRows belongs to

	bytes       *semaphore.Weighted // upload and read bytes in flight (maxBytesInFlight)
	stale       atomic.Uint64
	readBytes   atomic.Int64 // read-back bytes in flight from the host
	trips       roundTrips
	out         system.Combiner[frontOut] // submissions and operations, in the order callers made them
	events      chan string               // "registered", "dropped", "refused", "busy", "lost", "left", "exited": to the supervisor
	firstAnswer chan struct{}             // closed at the first registration or refusal
	answerOnce  sync.Once
}

func newLink(f *Front, name string, launch *Process) *Link {
	l := &Link{F: f, Name: name, launch: launch, events: make(chan string, 4), firstAnswer: make(chan struct{}),
		bytes: semaphore.NewWeighted(system.MaxBytesInFlight)}
	l.out = system.Combiner[frontOut]{Most: 512, Send: l.sendBatch}
	if launch == nil {
		l.setAddress(name)
	}
	return l
}

// SetState changes the host's state (l.mu held), and the lock-free view
// of whether and under which epoch it serves.
func (l *Link) SetState(s HostHealth) {
	if l.State == HostStopped {
		return // for good: a supervisor that joins as the front stops does not undo it
	}
	l.State, l.since = s, time.Now()
	if s == HostServing {
		l.Serving.Store(l.Epoch)
	} else {
		l.Serving.Store(0)
	}
}

// setAddress is where the host listens now (l.mu held, or before the link
// is shared).
func (l *Link) setAddress(addr string) {
	l.addr, l.pid = addr, actor.NewPID(addr, wire.HostActorName)
	l.at.Store(&addr)
}

// deaf is how long the oldest probe the host has not echoed has been on
// its way past the upload bytes queued before it (0: every probe
// echoed).
func (l *Link) deaf() time.Duration {
	sent, echoed := l.probeSeq.Load(), l.echoed.Load()
	if sent <= echoed {
		return 0
	}
	return max(time.Since(time.Unix(0, l.probeSent[(echoed+1)%uint64(len(l.probeSent))].Load())), 0)
}

// excuse starts the host's silence and deafness afresh at now: the front
// did not run for a while, and could not hear it.
func (l *Link) excuse(now time.Time) {
	if heard := l.heardAt.Load(); heard < now.UnixNano() {
		l.heardAt.CompareAndSwap(heard, now.UnixNano())
	}
	sent := l.probeSeq.Load()
	for seq := l.echoed.Load() + 1; seq <= sent && seq+uint64(len(l.probeSent)) > sent; seq++ {
		due := &l.probeSent[seq%uint64(len(l.probeSent))]
		if d := due.Load(); d < now.UnixNano() {
			due.CompareAndSwap(d, now.UnixNano()) // a probe due later still waits for its bytes
		}
	}
}

// probe sends the host the next probe of epoch.
func (l *Link) probe(epoch uint64) {
	seq := l.probeSeq.Load() + 1
	// A probe queues behind the upload bytes in flight when it is sent:
	// it is due that much later (bytes sent after it do not delay it,
	// and the watch allows for those in flight when it looks).
	due := time.Now().Add(readAllowance(l.uploadBytes.Load()))
	l.probeSent[seq%uint64(len(l.probeSent))].Store(due.UnixNano())
	l.probeSeq.Store(seq) // the time first: deaf never reads a probe without one
	l.mu.Lock()
	pid := l.pid
	l.mu.Unlock()
	l.F.tell(pid, &wirepb.Probe{Epoch: epoch, Seq: seq})
}

// servingUnder reports whether the host serves under epoch now, without
// a lock.
func (l *Link) servingUnder(epoch uint64) bool { return epoch != 0 && l.Serving.Load() == epoch }

// leavingUnder reports whether the host said, under epoch, that it is
// leaving.
func (l *Link) leavingUnder(epoch uint64) bool { return epoch != 0 && l.leaving.Load() == epoch }

// stateLost is the refusal of a tenant whose state was on the host under
// epoch, which no longer serves: lost, or left.
func (l *Link) stateLost(tenant string, epoch uint64) error {
	return &wire.DeviceStateLostError{Tenant: tenant, Host: l.Name, Epoch: epoch, Left: l.left.Load() == epoch}
}

// hasLeft takes the host's word that it left under epoch, its last
// submission answered: out of routing, its tenants move. Calls still in
// flight (sent before the front heard it was leaving) end by the host's
// refusals: it waits for the front's word that none is left (awaitGone),
// or they end indeterminate if it goes first.
func (l *Link) hasLeft(epoch uint64) {
	l.mu.Lock()
	if l.State != HostServing || l.Epoch != epoch {
		l.mu.Unlock()
		return
	}
	l.left.Store(epoch)
	l.lostHow = "it left"
	l.SetState(HostLeft)
	l.mu.Unlock()
	// The plane stays until the host is gone: it still refuses what was
	// sent before this was heard, until the front releases it.
	l.F.cfg.Logf("host %s (epoch %d) left", l.Name, epoch)
	l.event("left")
}

// Status is the host as the link sees it now.
func (l *Link) Status() HostStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := HostStatus{Name: l.Name, Address: l.addr, Health: l.State, Epoch: l.Epoch, Tenants: l.tenants, Losses: l.losses,
		Restarts: l.restarts, Stale: l.stale.Load(), Refusal: l.refusal, LostHow: l.lostHow, Since: l.since, HostName: l.hostName, Lanes: l.lanes, Runtime: l.runtime,
		RoundTrip: l.trips.means(), FromCluster: l.fromCluster, Member: l.listed.Load()}
	if l.proc != nil {
		st.PID = l.proc.Pid
	}
	st.NoDataPlane = l.noPlane
	if lp := l.Plane.Load(); lp != nil && lp.epoch == l.Epoch {
		st.DataPlane, st.NoDataPlane = true, ""
		st.DataPlaneSent, st.DataPlaneRead = lp.P.Sent.Load(), lp.P.Received.Load()
		if lp.P.Spans != nil {
			st.AreaUploads, st.AreaBytesInUse = lp.P.AreaUploads.Load(), lp.P.Spans.InUse()
		}
	}
	return st
}

func (l *Link) event(e string) {
	select {
	case l.events <- e:
	default: // the supervisor has one waiting already
	}
}

// pendingReg is a registration the front welcomed and the host has not
// yet shown it holds (its first heartbeat under it).
type pendingReg struct {
	welcome *wirepb.Welcome // the answer given, given again to the same Hello
	host    string          // the name the host gave
	lanes   int
	runtime string // its programs' runtime fingerprint
	noPlane string // why its traffic takes the remote, when it does
	// The most commands and upload bytes one batch may carry there (0:
	// the host did not say).
	maxEntries, maxBytes int64
}

// awaitFirstBeat notes the Welcome given to a Hello of the join in
// progress; the host serves from its first heartbeat under that epoch. It
// returns the epoch of an earlier Hello of the join it replaces, if any.
func (l *Link) awaitFirstBeat(w *wirepb.Welcome, reg pendingReg) (replaced uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending != nil && l.pending.welcome.Epoch != w.Epoch {
		replaced = l.pending.welcome.Epoch
	}
	reg.welcome = w
	l.pending = &reg
	return replaced
}

// welcomedUnder is the Welcome the front gave the Hello of epoch, if it
// awaits that registration's first heartbeat.
func (l *Link) welcomedUnder(epoch uint64) *wirepb.Welcome {
	if p := l.pendingUnder(epoch); p != nil {
		return p.welcome
	}
	return nil
}

// pendingUnder is the registration of epoch the front welcomed and awaits
// the first heartbeat of, or nil.
func (l *Link) pendingUnder(epoch uint64) *pendingReg {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.pending; p != nil && p.welcome.Epoch == epoch && l.State == HostJoining {
		return p
	}
	return nil
}

// dropPending forgets the welcomed registration of epoch: false if it was
// not the one awaited.
func (l *Link) dropPending(epoch uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p := l.pending; p == nil || p.welcome.Epoch != epoch {
		return false
	}
	l.pending = nil
	return true
}

// registered takes a host's first heartbeat under a registration the
// front welcomed: serving under epoch.
func (l *Link) registered(epoch uint64, reg *pendingReg) bool {
	l.mu.Lock()
	if l.State != HostJoining || l.pending == nil || l.pending.welcome.Epoch != epoch {
		l.mu.Unlock()
		return false
	}
	l.pending = nil
	l.knownMu.Lock()
	l.known = map[uint64]bool{}
	l.knownMu.Unlock()
	l.Epoch, l.tenants, l.hostName, l.lanes, l.runtime, l.noPlane = epoch, 0, reg.host, max(reg.lanes, 1), reg.runtime, reg.noPlane
	l.maxEntries.Store(reg.maxEntries)
	l.maxBytes.Store(reg.maxBytes)
	l.trips.reset()
	l.heardAt.Store(time.Now().UnixNano())
	l.probeSeq.Store(0)
	l.echoed.Store(0)
	l.SetState(HostServing)
	// Told under the lock: a loss of the epoch (lose, which takes the lock
	// to leave HostServing) then tells its "lost" after it. Told after the
	// unlock, a loss that came between (a call already sent under the
	// epoch, the host dropping it at once) put "lost" first, which the
	// supervisor's join ignored: it then served a lost host for ever
	// (found under load: the host dropped, the front never joined again).
	l.event("registered")
	l.mu.Unlock()
	if AfterRegistered != nil {
		AfterRegistered(l)
	}
	l.answered()
	return true
}

// afterRegistered, set by a test, runs on the front's actor after a
// registration begins to serve.
var AfterRegistered func(l *Link)

// holds reports whether the host holds template id under epoch, and
// from now on counts it as held (the Submit about to go carries it).
func (l *Link) holds(epoch, id uint64) bool {
	if !l.servingUnder(epoch) {
		return false
	}
	l.knownMu.RLock()
	held := l.known[id]
	l.knownMu.RUnlock()
	if held {
		return true
	}
	l.knownMu.Lock()
	defer l.knownMu.Unlock()
	if l.known == nil || !l.servingUnder(epoch) {
		return false
	}
	held = l.known[id]
	if len(l.known) < wire.MaxTemplates {
		l.known[id] = true
	}
	return held
}

// forgetTemplate records that the host does not hold template id.
func (l *Link) forgetTemplate(epoch, id uint64) {
	l.knownMu.Lock()
	defer l.knownMu.Unlock()
	if l.servingUnder(epoch) {
		delete(l.known, id)
	}
}

// joining reports whether a Hello answering attempt is the one awaited.
func (l *Link) joining(attempt uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.State == HostJoining && attempt == l.attempt
}

// refused records a refused registration: not routed to. A refusal the
// host passes itself (it serves its most fronts, it is leaving) is for
// now: the host is asked again (passing); the front's own (another
// protocol, a malformed hello) is for good.
func (l *Link) refused(why string, passing bool) {
	l.mu.Lock()
	l.refusal, l.refusedForNow = why, passing
	l.SetState(HostRefused)
	l.mu.Unlock()
	l.F.cfg.Logf("host %s refused: %s", l.Name, why)
	l.answered()
	if passing {
		l.event("busy")
		return
	}
	l.event("refused")
}

// heardFrom notes a message of epoch from the host (or, once it left,
// an answer under the epoch it left under); false: not its
// current epoch (drop the message).
func (l *Link) heardFrom(epoch uint64) bool {
	if !l.servingUnder(epoch) {
		if epoch != 0 && l.left.Load() == epoch {
			return true // a host that left answers what it was sent before
		}
		l.stale.Add(1)
		return false
	}
	l.heardAt.Store(time.Now().UnixNano())
	return true
}

// lose takes the host out of routing at once and ends every call in
// flight on it under epoch indeterminate, exactly once (the in-flight
// table hands each to Lose or to a receipt, never both).
func (l *Link) lose(epoch uint64, how string) {
	l.mu.Lock()
	if l.State == HostLeft && l.Epoch == epoch {
		l.mu.Unlock()
		l.closePlane(epoch)
		l.event("lost") // gone after it left: awaitGone ends what is left
		return
	}
	if l.State != HostServing || l.Epoch != epoch {
		l.mu.Unlock()
		return
	}
	l.lostHow = how
	l.SetState(HostLost)
	l.losses++
	l.mu.Unlock()
	l.closePlane(epoch)
	n := l.endInFlight(epoch, how)
	l.F.cfg.Logf("host %s (epoch %d) lost: %s; %d calls in flight end indeterminate", l.Name, epoch, how, n)
	l.event("lost")
}

// droppedBy: the host says it no longer holds the registration of epoch,
// and why. The front loses it now (its calls in flight end
// indeterminate: they may have run before) rather than at its silence,
// and joins the host again as it is: it answered, so a launched host is
// not restarted.
func (l *Link) droppedBy(epoch uint64, why string) {
	l.mu.Lock()
	if l.Epoch == epoch && l.State == HostServing {
		l.dropped = true
	}
	l.mu.Unlock()
	l.lose(epoch, "the host dropped the registration: "+why)
}

// rejoinAsIs reports, once, whether the last loss was the host's word
// that it dropped the registration (droppedBy).
func (l *Link) rejoinAsIs() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.dropped
	l.dropped = false
	return d
}

// endInFlight ends every call in flight on the host under epoch with a
// HostLostError saying how, and returns how many it ended.
func (l *Link) endInFlight(epoch uint64, how string) int {
	calls := l.F.calls.Lose(l.Name, epoch)
	var e error = &wire.HostLostError{Host: l.Name, Epoch: epoch, Cause: how}
	if how == frontStopped {
		// Not a loss: the host may serve on; the front stopped waiting.
		e = laneerr.Wrap("remote", false, fmt.Errorf("%w: the front stopped (its Stop's context ended) with the call in flight on lane host %s: it may or may not have run; give Stop a context that outlasts the calls in flight to let them end", actors.ErrIndeterminate, l.Name))
	}
	for _, p := range calls {
		p.lost(e)
	}
	return len(calls)
}

// answered lets StartFront see the host's first answer (registered,
// refused, or a launch that failed).
func (l *Link) answered() { l.answerOnce.Do(func() { close(l.firstAnswer) }) }

// enqueue sends a submission, in one message with any others queued
// meanwhile.
func (l *Link) enqueue(s *wirepb.Submit) {
	if BeforeEnqueue != nil {
		BeforeEnqueue(s)
	}
	l.out.Add(frontOut{submit: s})
}

// beforeEnqueue, set by a test, runs before each submission is queued for
// its host: a caller held up between recording its call and sending it.
var BeforeEnqueue func(*wirepb.Submit)

// frontOut is a message on its way to the host: a submission (batched
// with the submissions next to it) or an operation, each after what its
// callers queued before it (a Read after the submissions that returned
// before it was called).
type frontOut struct {
	submit *wirepb.Submit
	op     proto.Message // an Alloc, Free, Read or Forget, of epoch
	epoch  uint64
}

// sendBatch sends what was queued, in order: runs of submissions of the
// current epoch as one message each, operations on their own; what was
// queued under an epoch since lost is dropped (its calls ended with the
// host's loss).
func (l *Link) sendBatch(batch []frontOut) {
	l.mu.Lock()
	// A host that left still answers (refuses) what was sent before the
	// front heard: it waits for the front's release (awaitGone).
	pid, epoch := l.pid, l.Epoch // the address of the epoch sent to
	serving := l.State == HostServing || l.State == HostLeft && l.left.Load() == epoch
	l.mu.Unlock()
	var run []*wirepb.Submit
	flush := func() {
		if len(run) > 0 {
			l.toHost(pid, epoch, dataplane.PlaneSubmits, &wirepb.Submits{Submits: run})
			run = nil
		}
	}
	for _, o := range batch {
		switch {
		case o.submit != nil && serving && o.submit.Epoch == epoch:
			run = append(run, o.submit)
		case o.op != nil && o.epoch == epoch:
			flush()
			l.toHost(pid, epoch, planeKindOf(o.op), o.op)
		}
	}
	flush()
}
