// A lane host's fronts: registration (a Join, a Hello under a new epoch, a
// Welcome), a front gone, and the heartbeats that prove the host alive to
// each.

package host

import (
	"fmt"
	"math"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/lanesched/lanes/internal/schedhook"
	"github.com/lanesched/lanes/internal/wirepb"

	system "github.com/lanesched/lanes/remote/internal/system"

	wire "github.com/lanesched/lanes/remote/internal/wire"
)

// Join answers a front's Join with a Hello under a new epoch for that
// front. A front of another protocol hears this host's protocol and
// refuses it; the host serves nothing to it. A front past MaxFronts is
// refused with the reason.
func (h *Host) Join(m *wirepb.Join) *actor.PID {
	if m.Front == "" {
		h.cfg.Logf("a join names no front: ignored")
		return nil
	}
	front := actor.NewPID(m.Front, wire.FrontActorName)
	if err := h.DeviceFault(); err != nil {
		// A poisoned process serves no one again (lanehost exits to be
		// replaced); its fronts ask again, and find its replacement.
		h.tell(front, &wirepb.Hello{Protocol: h.cfg.Protocol, Host: h.cfg.Name, Attempt: m.Attempt, Refusal: "its device is poisoned: " + err.Error()})
		return nil
	}
	h.Mu.Lock()
	old := h.byFront[m.Front]
	if old != nil && old.hello != nil && old.attempt == m.Attempt {
		hello := old.hello // the same attempt asked again: the same answer
		h.Mu.Unlock()
		h.tell(front, hello)
		return nil
	}
	if h.Leaving.Load() {
		h.Mu.Unlock()
		h.tell(front, &wirepb.Hello{Protocol: h.cfg.Protocol, Host: h.cfg.Name, Attempt: m.Attempt, Refusal: "it is leaving"})
		return nil
	}
	h.pruneLocked()
	if old == nil && len(h.byFront) >= h.cfg.MaxFronts {
		h.evictSilentLocked()
	}
	if old == nil && len(h.byFront) >= h.cfg.MaxFronts {
		// Epoch 0: the refusal of this Hello must not reach a registration.
		busy := &wirepb.Hello{Protocol: h.cfg.Protocol, Host: h.cfg.Name, Attempt: m.Attempt,
			Refusal: fmt.Sprintf("it serves %s, its most (lanehost --max-fronts, HostConfig.MaxFronts)", frontsCount(len(h.byFront)))}
		h.Mu.Unlock()
		h.tell(front, busy)
		return nil
	}
	h.lastEpoch = max(uint64(time.Now().UnixNano()), h.lastEpoch+1)
	r := &registration{front: front, epoch: h.lastEpoch, attempt: m.Attempt, templates: map[uint64]*hostTemplate{}, joined: time.Now()}
	r.out = system.Combiner[Outgoing]{Most: 1024, Send: func(batch []Outgoing) { h.sendBatch(r, batch) }}
	if old != nil {
		delete(h.Regs, old.epoch)
		if len(h.replaced) >= maxReplaced {
			clear(h.replaced)
		}
		h.replaced[old.epoch] = old
		go old.closePlane("") // its front dropped the epoch: answers through the plane would go nowhere
	}
	h.Regs[r.epoch], h.byFront[m.Front] = r, r
	h.Mu.Unlock()
	if old != nil {
		h.ops.retire(old.epoch) // its tenants: the front told them their state was lost
	}
	entries, bytes := schedhook.BatchBounds(h.sched)
	hello := &wirepb.Hello{Protocol: h.cfg.Protocol, Host: h.cfg.Name, Epoch: r.epoch, Attempt: m.Attempt, HeartbeatNanos: int64(h.cfg.Heartbeat), Runtime: h.sched.Runtime(),
		MaxBatchEntries: uint32(min(entries, math.MaxUint32)), MaxBatchBytes: bytes}
	for _, d := range h.cfg.Scheduler.Devices {
		info := d.Info()
		hello.Devices = append(hello.Devices, &wirepb.Device{Instance: info.Instance, Name: info.Name, Backend: info.Backend,
			Lanes: uint32(max(h.cfg.Scheduler.LanesPerDevice, 1))})
	}
	if m.Protocol != h.cfg.Protocol {
		h.cfg.Logf("front %s speaks protocol %d, this host %d: answering with this host's protocol (the front refuses it)", m.Front, m.Protocol, h.cfg.Protocol)
	}
	h.offerPlane(r, hello)
	h.Mu.Lock()
	r.hello = hello
	h.Mu.Unlock()
	h.tell(front, hello)
	if AfterHello != nil {
		AfterHello(h, front)
	}
	return front
}

// afterHello, set by a test, runs on the host's actor after each Hello it
// sends (before the front's answer can be taken).
var AfterHello func(h *Host, front *actor.PID)

// frontsCount says n fronts in words.
func frontsCount(n int) string {
	if n == 1 {
		return "1 front"
	}
	return fmt.Sprintf("%d fronts", n)
}

// unwelcomedFor is how long a registration may wait for its front's
// Welcome before another front may take its place.
const unwelcomedFor = 3 * time.Second

// pruneLocked drops registrations whose front never welcomed the host
// within unwelcomedFor (h.mu held): a front that died while it joined
// leaves no place taken for long (the remote's watch of the front drops
// it too, in up to ~10 s when the connection to it never came up). A live
// front answers in milliseconds; one pruned all the same loses the host
// within its bound and joins again.
func (h *Host) pruneLocked() {
	for _, r := range h.byFront {
		if !r.welcomed && time.Since(r.joined) > unwelcomedFor {
			h.dropLockedLater(r, fmt.Sprintf("its front did not welcome it within %v", unwelcomedFor))
		}
	}
}

// tell sends the front a message from the host's actor: the front knows
// the host by the sender's address.
func (h *Host) tell(front *actor.PID, msg any) {
	h.sys.Actors.Root.RequestWithCustomSender(front, msg, h.pid)
}

// welcome takes the front's answer to the Hello: accepted, heartbeats
// begin; refused, or let go by a front that stops, the registration is
// dropped (its tenants with it).
func (h *Host) welcome(m *wirepb.Welcome) {
	h.Mu.Lock()
	r, ok := h.Regs[m.Epoch]
	if !ok {
		h.Mu.Unlock()
		return // the answer to a Hello of an epoch since replaced (or dropped: the actor tells its front)
	}
	if !m.Accepted {
		h.Mu.Unlock()
		if h.drop(r, "its front let the host go: "+m.Refusal) {
			h.cfg.Logf("the front at %s let this host go: %s", r.front.Address, m.Refusal)
		}
		return
	}
	h.Mu.Unlock()
	if err := h.loadFrontModules(m.Modules); err != nil {
		why := "its modules cannot load here: " + err.Error()
		if h.drop(r, why) {
			h.Mu.Lock()
			h.dropped[r.epoch].refused = true // told with the drop, after this returns: the front should not join again as it is
			h.Mu.Unlock()
			h.cfg.Logf("the front at %s: %s", r.front.Address, why)
		}
		return
	}
	h.Mu.Lock()
	r.welcomed = true
	h.Mu.Unlock()
	h.takePlane(r, m)
	h.beat()
}

// welcomed is the registrations whose fronts welcomed the host.
func (h *Host) welcomed() []*registration {
	h.Mu.Lock()
	defer h.Mu.Unlock()
	var regs []*registration
	for _, r := range h.Regs {
		if r.welcomed {
			regs = append(regs, r)
		}
	}
	return regs
}

// DefaultSilentFront is how long a front may send a host nothing before
// its place goes to a new front that finds the host full
// (HostConfig.SilentFront). Every message of a front proves it alive, and
// an idle front probes its hosts every FrontConfig.LostAfter/5 (200 ms by
// default), so one silent this long is stopped (SIGSTOP), hung or cut off,
// and loses the host by its own bound before it hears from it again. Keep
// SilentFront above the probe period of the fronts' LostAfter.
const DefaultSilentFront = 10 * time.Second

// evictSilentLocked drops the registration of the front silent the
// longest, if one has been silent for SilentFront (h.mu held): a stopped
// front holds no place for good.
func (h *Host) evictSilentLocked() {
	var quiet *registration
	for _, r := range h.byFront {
		heard := max(r.heardAt.Load(), r.joined.UnixNano())
		if r.welcomed && time.Since(time.Unix(0, heard)) > h.cfg.SilentFront && (quiet == nil || heard < max(quiet.heardAt.Load(), quiet.joined.UnixNano())) {
			quiet = r
		}
	}
	if quiet == nil {
		return
	}
	h.dropLockedLater(quiet, fmt.Sprintf("its front sent nothing for over %v, and its place went to a new front", h.cfg.SilentFront))
	h.cfg.Logf("the front at %s has sent nothing for over %v: its place goes to a new front (registration %d dropped)", quiet.front.Address, h.cfg.SilentFront, quiet.epoch)
}

// dropLocked forgets a registration (h.mu held), keeping why a while for
// its front (tellDropped).
func (h *Host) dropLocked(r *registration, why string) {
	delete(h.Regs, r.epoch)
	if h.byFront[r.front.Address] == r {
		delete(h.byFront, r.front.Address)
	}
	if len(h.dropped) >= maxDropped {
		clear(h.dropped)
	}
	h.dropped[r.epoch] = &droppedReg{front: r.front.Address, why: why}
}

// dropLockedLater is drop for a caller that holds h.mu: the registration
// is forgotten now, its data plane let go and its tenants retired on a
// goroutine of their own.
func (h *Host) dropLockedLater(r *registration, why string) {
	h.dropLocked(r, why)
	go func() {
		r.closePlane(why)
		r.watched.drop()
		h.ops.retire(r.epoch)
	}()
}

// maxDropped bounds the dropped registrations a host remembers.
const maxDropped = 64

// droppedReg is what a host remembers of a registration it dropped.
type droppedReg struct {
	front   string // the front's address
	why     string
	refused bool      // the host will not serve the front as it is (Heartbeat.refused)
	told    time.Time // when the host last told the front (under Host.mu)
}

// tellDropped tells a front that speaks under a registration the host
// dropped that it did (a heartbeat saying why), at most every 100 ms: a
// live front that never learnt of it (the connection from it ended and
// came back, say) would otherwise lose the host only at its silence,
// with its calls in flight, and serve nothing there meanwhile.
func (h *Host) tellDropped(sender *actor.PID, epoch uint64) {
	h.Mu.Lock()
	d, ok := h.dropped[epoch]
	if !ok || sender == nil || sender.Address != d.front || time.Since(d.told) < 100*time.Millisecond {
		h.Mu.Unlock()
		return
	}
	d.told = time.Now()
	h.Mu.Unlock()
	h.tell(sender, &wirepb.Heartbeat{Epoch: epoch, SentUnixNano: time.Now().UnixNano(), Dropped: d.why, Refused: d.refused})
}

// frontGone: the remote lost the connection to a front (it died, or a
// message on the way broke it), so answers may have been lost. The host
// drops that front's registration and the tenants it set up: no more
// heartbeats or service under its epoch, so the front, if alive, loses it
// within its bound (every call in flight ends indeterminate, once, and its
// tenants are told their state was lost) and joins it again; a dead front
// leaves its place to another.
func (h *Host) FrontGone(who *actor.PID) {
	h.Mu.Lock()
	r, ok := h.byFront[who.Address]
	h.Mu.Unlock()
	if ok && h.drop(r, "the connection from its front ended (messages on it may be lost)") {
		h.cfg.Logf("the connection to the front at %s was lost: registration %d dropped (the front is told when it speaks under it, and joins again)", who.Address, r.epoch)
	}
}

// drop forgets a registration the host still holds (saying why to its
// front if it speaks under it again), lets its data plane go and retires
// its tenants; false if it was dropped already.
func (h *Host) drop(r *registration, why string) bool {
	h.Mu.Lock()
	held := h.Regs[r.epoch] == r
	if held {
		h.dropLocked(r, why)
	}
	h.Mu.Unlock()
	if held {
		r.closePlane(why)
		r.watched.drop()
		h.ops.retire(r.epoch)
	}
	return held
}

// heartbeatLoop proves the host alive to its front every Heartbeat.
func (h *Host) heartbeatLoop() {
	defer h.wg.Done()
	t := time.NewTicker(h.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			h.beat()
		case <-h.quit:
			return
		}
	}
}

// beat sends one heartbeat to every front that welcomed this host.
func (h *Host) beat() {
	h.Mu.Lock()
	h.heartbeat++
	seq := h.heartbeat
	h.Mu.Unlock()
	regs := h.welcomed()
	if len(regs) == 0 {
		return
	}
	fault := ""
	if err := h.DeviceFault(); err != nil {
		fault = err.Error()
	}
	for _, r := range regs {
		h.tell(r.front, &wirepb.Heartbeat{Epoch: r.epoch, Seq: seq, SentUnixNano: time.Now().UnixNano(), DeviceFault: fault, ProbeEcho: r.probed.Load()})
	}
}

// DeviceFault is the sticky error that poisoned one of the host's devices,
// or nil. A poisoned device stays poisoned for the life of its process: a
// host that reports one is replaced (lanehost exits; a front that launched
// it starts another).
func (h *Host) DeviceFault() error {
	for _, d := range h.cfg.Scheduler.Devices {
		if err := d.Err(); err != nil {
			return fmt.Errorf("device %d (%s): %w", d.Info().Ordinal, d.Info().Name, err)
		}
	}
	return nil
}

// loadFrontModules loads the modules of a front's Welcome, or says why
// the host cannot serve that front.
func (h *Host) loadFrontModules(ws []*wirepb.Module) error {
	if len(ws) > wire.MaxModules {
		return wire.WireErr("%d modules; at most %d", len(ws), wire.MaxModules)
	}
	for _, w := range ws {
		m, err := wire.ModuleFromWire(w)
		if err != nil {
			return err
		}
		if err := h.modules.Load(h.cfg.Scheduler.Devices, m); err != nil {
			if h.cfg.Scheduler.Devices[0].Info().Backend == "sim" {
				return fmt.Errorf("%w (a front's module carries no Go references, which the simulated device runs: serve it from a lane host of your own that loads it, remote.HostConfig.Modules or hostcmd.Options.Modules)", err)
			}
			return err
		}
	}
	return nil
}
