// A front's link to one lane host: its registration and epoch, its loss,
// its restart (for a host the front launched), and the sender that packs
// many submissions into one message.

package remote

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"

	"time"

	"golang.org/x/sync/semaphore"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote/wirepb"
)

// HostState is a host's standing with a front.
type HostState uint8

// Host states.
const (
	HostJoining HostState = iota // started or asked to join; not registered yet
	HostServing                  // registered under its epoch: routed to
	HostLost                     // lost: its calls ended, its tenants' state gone; rejoining or restarting
	HostRefused                  // registration refused: another protocol version (for good), or the host is full or leaving (asked again)
	HostStopped                  // the front stopped
	HostLeft                     // left when asked to, its work done: its tenants move; a host at an address is asked to join again
)

// String names the state.
func (s HostState) String() string {
	return [...]string{"joining", "serving", "lost", "refused", "stopped", "left", "unknown"}[min(int(s), 6)]
}

// HostStatus is a host as its front sees it.
type HostStatus struct {
	Name     string
	Address  string
	State    HostState
	Epoch    uint64    // the current (or last) registration
	Tenants  int       // tenants placed on it under its current epoch
	InFlight int       // calls in flight on it
	Losses   int       // times it was lost
	Restarts int       // times the front started it again
	Stale    uint64    // messages dropped for carrying an epoch not current
	Refusal  string    // why its registration was refused
	LostHow  string    // how it was last lost
	PID      int       // the launched host's process id; 0 for a host at a fixed address
	Since    time.Time // when it entered State
	HostName string    // the name the host gave itself (lanehost --name)
	// RoundTrip is where sampled calls' time went since the host last
	// registered: the remote's cost beside the lanes' own.
	RoundTrip RoundTrip
}

// Hosts reports every host of the front.
func (f *Front) Hosts() []HostStatus {
	if f == nil {
		return nil
	}
	out := make([]HostStatus, len(f.links))
	for i, l := range f.links {
		out[i] = l.status()
		out[i].InFlight = f.calls.InFlight(l.name, out[i].Epoch)
	}
	return out
}

// link is the front's side of one host.
type link struct {
	f      *Front
	name   string
	launch *Launch // nil: a host at a fixed address

	// The hot path's lock-free view of the link, written under mu with
	// what it mirrors: the epoch the host serves under (0 while it does
	// not), when its last message of that epoch came, and its address.
	serving atomic.Uint64
	heardAt atomic.Int64 // unix nanoseconds
	at      atomic.Pointer[string]
	leaving atomic.Uint64 // the epoch under which the host said it is leaving
	left    atomic.Uint64 // the epoch under which it left

	mu       sync.Mutex
	state    HostState
	addr     string
	pid      *actor.PID
	epoch    uint64
	tenants  int
	losses   int
	restarts int
	refusal  string
	lostHow  string
	since    time.Time // when state last changed
	attempt  uint64    // the join in progress
	hostName string    // the name the host gave
	startErr error     // why the first launch failed, if it did
	proc     *os.Process
	stdin    io.Closer
	exited   chan struct{} // closed when the launched process exited

	knownMu  sync.RWMutex
	known    map[uint64]bool        // templates the host holds under epoch (knownMu)
	lastRows map[uint64][]lanes.Row // the rows of each template's last receipt (the front actor's)
	rowsAt   uint64                 // the epoch lastRows belongs to

	bytes       *semaphore.Weighted // upload and read bytes in flight (maxBytesInFlight)
	stale       atomic.Uint64
	readBytes   atomic.Int64 // read-back bytes in flight from the host
	trips       roundTrips
	out         combiner[*wirepb.Submit]
	events      chan string   // "registered", "refused", "lost": to the supervisor
	firstAnswer chan struct{} // closed at the first registration or refusal
	answerOnce  sync.Once
}

func newLink(f *Front, name string, launch *Launch) *link {
	l := &link{f: f, name: name, launch: launch, events: make(chan string, 4), firstAnswer: make(chan struct{}),
		bytes: semaphore.NewWeighted(maxBytesInFlight)}
	l.out = combiner[*wirepb.Submit]{most: 512, send: l.sendBatch}
	if launch == nil {
		l.setAddress(name)
	}
	return l
}

// setState changes the host's state (l.mu held), and the lock-free view
// of whether and under which epoch it serves.
func (l *link) setState(s HostState) {
	l.state, l.since = s, time.Now()
	if s == HostServing {
		l.serving.Store(l.epoch)
	} else {
		l.serving.Store(0)
	}
}

// setAddress is where the host listens now (l.mu held, or before the link
// is shared).
func (l *link) setAddress(addr string) {
	l.addr, l.pid = addr, actor.NewPID(addr, HostActor)
	l.at.Store(&addr)
}

// servingUnder reports whether the host serves under epoch now, without
// a lock.
func (l *link) servingUnder(epoch uint64) bool { return epoch != 0 && l.serving.Load() == epoch }

// leavingUnder reports whether the host said, under epoch, that it is
// leaving.
func (l *link) leavingUnder(epoch uint64) bool { return epoch != 0 && l.leaving.Load() == epoch }

// stateLost is the refusal of a tenant whose state was on the host under
// epoch, which no longer serves: lost, or left.
func (l *link) stateLost(tenant string, epoch uint64) error {
	return &DeviceStateLostError{Tenant: tenant, Host: l.name, Epoch: epoch, Left: l.left.Load() == epoch}
}

// hasLeft takes the host's word that it left under epoch, its last
// submission answered: out of routing, its tenants move. Calls still in
// flight (sent before the front heard it was leaving) end by the host's
// refusals while it lingers, or indeterminate if it goes first
// (awaitGone).
func (l *link) hasLeft(epoch uint64) {
	l.mu.Lock()
	if l.state != HostServing || l.epoch != epoch {
		l.mu.Unlock()
		return
	}
	l.left.Store(epoch)
	l.lostHow = "it left"
	l.setState(HostLeft)
	l.mu.Unlock()
	l.f.cfg.Logf("host %s (epoch %d) left", l.name, epoch)
	l.event("left")
}

// awaitGone waits, after the host left under epoch, for its process to
// go (or its address to terminate), or for two of its heartbeat bounds,
// then ends whatever is still in flight on it indeterminate.
func (l *link) awaitGone(epoch uint64) {
	limit := time.After(2 * l.f.cfg.LostAfter)
	how := "it left and did not answer"
wait:
	for {
		select {
		case e := <-l.events:
			if e == "lost" || e == "exited" {
				how = "it left and went"
				break wait
			}
		case <-limit:
			break wait
		case <-l.f.quit:
			return
		}
	}
	l.endInFlight(epoch, how) // and closes the epoch to new calls
}

func (l *link) status() HostStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := HostStatus{Name: l.name, Address: l.addr, State: l.state, Epoch: l.epoch, Tenants: l.tenants, Losses: l.losses,
		Restarts: l.restarts, Stale: l.stale.Load(), Refusal: l.refusal, LostHow: l.lostHow, Since: l.since, HostName: l.hostName,
		RoundTrip: l.trips.means()}
	if l.proc != nil {
		st.PID = l.proc.Pid
	}
	return st
}

func (l *link) event(e string) {
	select {
	case l.events <- e:
	default: // the supervisor has one waiting already
	}
}

// registered takes a host's accepted Hello: serving under epoch.
func (l *link) registered(epoch uint64, hostName string) bool {
	l.mu.Lock()
	if l.state != HostJoining {
		l.mu.Unlock()
		return false
	}
	l.knownMu.Lock()
	l.known = map[uint64]bool{}
	l.knownMu.Unlock()
	l.epoch, l.tenants, l.hostName = epoch, 0, hostName
	l.trips.reset()
	l.heardAt.Store(time.Now().UnixNano())
	l.setState(HostServing)
	l.mu.Unlock()
	l.answered()
	l.event("registered")
	return true
}

// holds reports whether the host holds template id under epoch, and
// from now on counts it as held (the Submit about to go carries it).
func (l *link) holds(epoch, id uint64) bool {
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
	if len(l.known) < MaxTemplates {
		l.known[id] = true
	}
	return held
}

// forgetTemplate records that the host does not hold template id.
func (l *link) forgetTemplate(epoch, id uint64) {
	l.knownMu.Lock()
	defer l.knownMu.Unlock()
	if l.servingUnder(epoch) {
		delete(l.known, id)
	}
}

// joining reports whether a Hello answering attempt is the one awaited.
func (l *link) joining(attempt uint64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state == HostJoining && attempt == l.attempt
}

// refused records a refused registration: not routed to. A refusal the
// host passes itself (it serves its most fronts, it is leaving) is for
// now: the host is asked again (passing); the front's own (another
// protocol, a malformed hello) is for good.
func (l *link) refused(why string, passing bool) {
	l.mu.Lock()
	l.refusal = why
	l.setState(HostRefused)
	l.mu.Unlock()
	l.f.cfg.Logf("host %s refused: %s", l.name, why)
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
func (l *link) heardFrom(epoch uint64) bool {
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
func (l *link) lose(epoch uint64, how string) {
	l.mu.Lock()
	if l.state == HostLeft && l.epoch == epoch {
		l.mu.Unlock()
		l.event("lost") // gone after it left: awaitGone ends what is left
		return
	}
	if l.state != HostServing || l.epoch != epoch {
		l.mu.Unlock()
		return
	}
	l.lostHow = how
	l.setState(HostLost)
	l.losses++
	l.mu.Unlock()
	n := l.endInFlight(epoch, how)
	l.f.cfg.Logf("host %s (epoch %d) lost: %s; %d calls in flight end indeterminate", l.name, epoch, how, n)
	l.event("lost")
}

// endInFlight ends every call in flight on the host under epoch with a
// HostLostError saying how, and returns how many it ended.
func (l *link) endInFlight(epoch uint64, how string) int {
	calls := l.f.calls.Lose(l.name, epoch)
	e := &HostLostError{Host: l.name, Epoch: epoch, Cause: how}
	for _, p := range calls {
		p.lost(e)
	}
	return len(calls)
}

// answered lets StartFront see the host's first answer (registered,
// refused, or a launch that failed).
func (l *link) answered() { l.answerOnce.Do(func() { close(l.firstAnswer) }) }

// enqueue sends a submission, in one message with any others queued
// meanwhile.
func (l *link) enqueue(s *wirepb.Submit) { l.out.add(s) }

// sendBatch sends submissions of the current epoch as one message; the
// others' calls ended with the host's loss.
func (l *link) sendBatch(batch []*wirepb.Submit) {
	l.mu.Lock()
	pid, epoch, serving := l.pid, l.epoch, l.state == HostServing // the address of the epoch sent to
	l.mu.Unlock()
	keep := batch[:0]
	for _, s := range batch {
		if serving && s.Epoch == epoch {
			keep = append(keep, s)
		}
	}
	if len(keep) > 0 {
		l.f.sys.actors.Root.Send(pid, &wirepb.Submits{Submits: keep})
	}
}

// watchSilence loses a host silent for longer than LostAfter.
func (f *Front) watchSilence() {
	defer f.wg.Done()
	t := time.NewTicker(max(f.cfg.LostAfter/5, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-f.quit:
			return
		}
		for _, l := range f.links {
			epoch := l.serving.Load()
			silent := time.Since(time.Unix(0, l.heardAt.Load()))
			if bound := f.cfg.LostAfter + readAllowance(l.readBytes.Load()); epoch != 0 && silent > bound {
				l.lose(epoch, fmt.Sprintf("silent for %v (bound %v)", silent.Round(time.Millisecond), bound))
			}
		}
	}
}

// ReadRate is the slowest a host's read-back bytes are assumed to cross
// to the front: while reads are in flight, a host's heartbeats queue
// behind their bytes on the one connection, so a host is given LostAfter
// plus the time its reads in flight take at this rate before its silence
// counts (a 64 MiB read: 4 s more).
const ReadRate = 16 << 20 // bytes a second

func readAllowance(bytes int64) time.Duration {
	return time.Duration(float64(max(bytes, 0)) / ReadRate * float64(time.Second))
}

// supervise keeps the host registered: it joins (launching the process
// first for a launched host), waits while it serves, and after a loss
// joins again (killing and restarting a launched host, with backoff).
func (l *link) supervise() {
	defer l.f.wg.Done()
	backoff := l.f.cfg.RestartBackoff
	for first := true; ; first = false {
		if !first && !l.pause(backoff) {
			return
		}
		if l.launch != nil {
			if !first {
				l.mu.Lock()
				l.restarts++
				l.mu.Unlock()
			}
			if err := l.start(); err != nil {
				l.f.cfg.Logf("host %s: start: %v", l.name, err)
				if first {
					l.mu.Lock()
					l.startErr = err
					l.mu.Unlock()
					l.answered() // StartFront says why at once
				}
				backoff = min(2*backoff, 5*time.Second)
				continue
			}
		}
		switch l.join() {
		case "stopped":
			return
		case "refused":
			l.kill()
			return
		case "busy":
			// The host refused for now (it serves its most fronts, or it
			// is leaving): ask again after a while (a launched one:
			// start another). StartFront already reported a first refusal.
			if l.launch != nil {
				l.kill()
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		case "registered":
			backoff = l.f.cfg.RestartBackoff
			if !l.serve() {
				return
			}
			if st := l.status(); st.State == HostLeft {
				l.awaitGone(st.Epoch)
				if l.launch != nil {
					return // asked to leave (SIGTERM, say): it stops itself, and stays out
				}
			}
		default: // no answer in time
			backoff = min(2*backoff, 5*time.Second)
		}
		l.kill()
	}
}

// pause waits d unless the front stops (false).
func (l *link) pause(d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-l.f.quit:
		return false
	}
}

// join asks the host to register, again every second, until it answers,
// the join times out or the front stops.
func (l *link) join() string {
	l.mu.Lock()
	since, was := l.since, l.state
	l.setState(HostJoining)
	if was == HostLost {
		l.since = since // a lost host stays lost, to the eye, until it serves again
	}
	l.attempt = joinAttempts.Add(1)
	pid, attempt := l.pid, l.attempt
	l.mu.Unlock()
	deadline := time.After(l.f.cfg.JoinTimeout)
	for {
		l.f.sys.actors.Root.Send(pid, &wirepb.Join{Protocol: Protocol, Front: l.f.sys.addr, Attempt: attempt})
		select {
		case e := <-l.events:
			if e == "registered" || e == "refused" || e == "busy" || e == "exited" && l.processExited() {
				return e
			}
		case <-time.After(time.Second):
		case <-deadline:
			if l.launch == nil {
				deadline = time.After(l.f.cfg.JoinTimeout) // a fixed host: keep asking
				continue
			}
			return "timeout"
		case <-l.f.quit:
			return "stopped"
		}
	}
}

// joinAttempts numbers joins across the process's fronts.
var joinAttempts atomic.Uint64

// serve waits while the host serves; false when the front stops.
func (l *link) serve() bool {
	for {
		select {
		case e := <-l.events:
			if e == "lost" || e == "left" || e == "exited" && l.processExited() {
				return true
			}
		case <-l.f.quit:
			return false
		}
	}
}

// launchFailure is why the host's first launch failed, if it did.
func (l *link) launchFailure() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state == HostServing {
		return nil
	}
	return l.startErr
}

// processExited reports whether the launched process of now has exited
// (an "exited" event may be a previous process's, seen late).
func (l *link) processExited() bool {
	l.mu.Lock()
	ch := l.exited
	l.mu.Unlock()
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// start launches the host process and learns its address from its first
// line.
func (l *link) start() error {
	args := append(append([]string(nil), l.launch.Args...), "--name", l.launch.Name, "--exit-with-stdin")
	cmd := exec.Command(l.launch.Path, args...)
	cmd.Env = append(os.Environ(), l.launch.Env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	lines := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		line, _ := r.ReadString('\n')
		lines <- line
		_, _ = io.Copy(io.Discard, r)
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(l.f.cfg.JoinTimeout):
	case <-l.f.quit:
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return errors.New("the front stopped while the host started")
	}
	const prefix = "lanehost: listening on "
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), prefix)
	if !ok {
		_ = cmd.Process.Kill()
		err := cmd.Wait()
		return fmt.Errorf("%s %s: its first line was %q, want %q and an address (its exit: %v; its standard error says why)",
			l.launch.Path, strings.Join(args, " "), strings.TrimSpace(line), prefix+"ADDRESS", err)
	}
	exited := make(chan struct{})
	l.mu.Lock()
	l.setAddress(addr)
	l.proc, l.stdin, l.exited = cmd.Process, stdin, exited
	l.mu.Unlock()
	go func() {
		err := cmd.Wait()
		close(exited)
		l.mu.Lock()
		mine, epoch := l.proc == cmd.Process, l.epoch
		l.mu.Unlock()
		if mine {
			how := "the process exited"
			if err != nil {
				how = "the process exited: " + err.Error()
			}
			l.lose(epoch, how)
			l.event("exited")
		}
	}()
	return nil
}

// kill ends a launched host's process (a hung one may not answer
// anything else).
func (l *link) kill() {
	l.mu.Lock()
	proc, stdin := l.proc, l.stdin
	l.proc, l.stdin = nil, nil
	l.mu.Unlock()
	if proc != nil {
		_ = stdin.Close()
		_ = proc.Kill()
	}
}

// stopLink ends every call still in flight on the host and lets the
// host go; a launched host's process is stopped after (stopProcess).
func (l *link) stopLink() {
	l.mu.Lock()
	epoch, was, pid := l.epoch, l.state, l.pid
	l.setState(HostStopped)
	l.mu.Unlock()
	if was == HostServing {
		// Let the host go: it may serve another front now.
		l.f.sys.actors.Root.Send(pid, &wirepb.Welcome{Refusal: "the front stopped", Protocol: Protocol, Epoch: epoch})
		l.endInFlight(epoch, "the front stopped")
	}
}

// stopProcess stops a launched host's process once its supervisor is
// done (none is started after): its standard input closed (lanehost
// --exit-with-stdin stops itself), killed if it has not exited within 3 s
// or by the end of ctx.
func (l *link) stopProcess(ctx context.Context) {
	l.mu.Lock()
	proc, stdin, exited := l.proc, l.stdin, l.exited
	l.proc, l.stdin = nil, nil // its exit is no loss
	l.mu.Unlock()
	if proc == nil {
		return
	}
	_ = stdin.Close()
	grace := time.NewTimer(3 * time.Second)
	defer grace.Stop()
	select {
	case <-exited:
		return
	case <-grace.C:
	case <-ctx.Done():
	}
	_ = proc.Kill()
	<-exited
}
