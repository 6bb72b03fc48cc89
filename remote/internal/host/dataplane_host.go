// A lane host's side of the same-host data plane: offered in a Hello,
// taken when the front's Welcome says it mapped it, read by a goroutine
// of its own, and written by whoever answers the registration.

package host

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/wirepb"

	dataplane "github.com/lanesched/lanes/remote/internal/dataplane"
	"google.golang.org/protobuf/proto"
)

// HostReads are the records a host reads from a front.
var HostReads = map[uint16]func() proto.Message{
	dataplane.PlaneSubmits:  func() proto.Message { return &wirepb.Submits{} },
	dataplane.PlaneAlloc:    func() proto.Message { return &wirepb.Alloc{} },
	dataplane.PlaneFree:     func() proto.Message { return &wirepb.Free{} },
	dataplane.PlaneRead:     func() proto.Message { return &wirepb.Read{} },
	dataplane.PlaneForget:   func() proto.Message { return &wirepb.Forget{} },
	dataplane.PlaneLaneOp:   func() proto.Message { return &wirepb.LaneAdmin{} },
	dataplane.PlaneStaged:   func() proto.Message { return &wirepb.StagedPrepare{} },
	dataplane.PlaneReplay:   func() proto.Message { return &wirepb.StagedReplay{} },
	dataplane.PlaneRelease:  func() proto.Message { return &wirepb.StagedRelease{} },
	dataplane.PlaneWithdraw: func() proto.Message { return &wirepb.Withdraw{} },
}

// onThisMachine reports whether a front's address is on this machine as
// far as the host can tell (loopback, or the host's own address): only
// such a front is offered a data plane. One that cannot open it declines.
func onThisMachine(front, own string) bool {
	host, _, err := net.SplitHostPort(front)
	if err != nil {
		return false
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	if host == "localhost" {
		return true
	}
	ownHost, _, err := net.SplitHostPort(own)
	return err == nil && ownHost == host
}

// offerPlane makes a data plane for a new registration and puts it in its
// Hello, for a front on this machine; a host that cannot make one (out of
// memory for its pages, say) offers none and says why.
func (h *Host) offerPlane(r *registration, hello *wirepb.Hello) {
	switch {
	case h.cfg.NoDataPlane:
		hello.NoDataPlane = "the host keeps its traffic on the remote (HostConfig.NoDataPlane, lanehost --no-data-plane)"
		return
	case !onThisMachine(r.front.Address, h.sys.Addr):
		hello.NoDataPlane = fmt.Sprintf("the front (%s) is on another machine than the host (%s)", r.front.Address, h.sys.Addr)
		return
	}
	p, offer, err := dataplane.MakePlane(h.cfg.RingBytes, h.cfg.UploadAreaBytes)
	if err != nil {
		h.cfg.Logf("no data plane for the front at %s (its traffic goes through the remote): %v", r.front.Address, err)
		hello.NoDataPlane = "the host could not make one: " + err.Error()
		return
	}
	r.offered.Store(p)
	hello.DataPlane = offer
}

// frontStopWord bounds how long a host whose data plane the front closed
// waits for the front's word that it stopped (sent on the remote just
// before the close) before it drops the registration itself. (A front's
// actor that ended drops its registration at once: a restarted front is
// served at once.)
const frontStopWord = 250 * time.Millisecond

// takePlane starts the registration's data plane when the front's Welcome
// says it mapped it; otherwise the plane offered is let go.
func (h *Host) takePlane(r *registration, m *wirepb.Welcome) {
	p := r.offered.Swap(nil)
	if p == nil {
		return
	}
	p.Release() // the front opened it, or never will
	if !m.DataPlane {
		p.Close()
		if m.DataPlaneRefusal != "" {
			h.cfg.Logf("the front at %s declined the data plane (its traffic goes through the remote): %s", r.front.Address, m.DataPlaneRefusal)
		}
		return
	}
	drop := func(why string, err error) {
		if h.drop(r, "its data plane "+why+": "+err.Error()) {
			h.cfg.Logf("the data plane of the front at %s (epoch %d) %s: %v; registration dropped (a front that did not stop joins again)", r.front.Address, r.epoch, why, err)
		}
	}
	p.Held = func() bool {
		h.Mu.Lock()
		defer h.Mu.Unlock()
		return h.Regs[r.epoch] == r || h.replaced[r.epoch] == r
	}
	p.Stalled = func(err error) { drop("stalled", err) }
	h.pinArea(r, p)
	if !p.StartReading() {
		return
	}
	r.plane.Store(p)
	go func() {
		alive := func() bool { _, ok := h.serving(r.epoch); return ok }
		switch err := p.Read(func(kind uint16, b []byte) error { return h.fromPlane(r, kind, b) }, alive); {
		case errors.Is(err, dataplane.ErrPeerClosed):
			// A front that stops lets the host go on the remote, then
			// closes the plane, which the host sees first: its word that
			// it stopped comes within moments, and then the registration
			// went for that reason, not this one.
			for deadline := time.Now().Add(frontStopWord); time.Now().Before(deadline) && alive(); {
				time.Sleep(5 * time.Millisecond)
			}
			if alive() {
				drop("was closed by the front", err)
			}
		case err != nil:
			drop("broke", err)
		}
	}()
}

// fromPlane takes one record of a front's data plane as the actor takes
// the same message from the remote: it is the registration's own.
func (h *Host) fromPlane(r *registration, kind uint16, b []byte) error {
	msg, err := dataplane.DecodePlane(kind, b, HostReads)
	if err != nil {
		return err
	}
	switch m := msg.(type) {
	case *wirepb.Submits:
		h.submits(m, r.front, true)
		return nil
	case *wirepb.Withdraw:
		// Its submission, read before it from this plane, was admitted
		// already (the reader admits them itself).
		if m.Epoch != r.epoch {
			h.sys.Guard.Dropped.Add(1)
			return nil
		}
		r.heard()
		r.watched.withdraw(m.Call, m.Deadline)
		return nil
	}
	op := msg.(tenantOp) // hostReads holds nothing else
	if op.GetEpoch() != r.epoch {
		h.sys.Guard.Dropped.Add(1) // another registration's message on this one's plane
		return nil
	}
	r.heard()
	h.takeOp(op)
	return nil
}

// PlaneFor is the registration's data plane, or nil: its messages go
// through the remote.
func (r *registration) PlaneFor() *dataplane.DataPlane { return r.plane.Load() }

// lastRecordWait bounds how long a plane's last record waits for room.
const lastRecordWait = 100 * time.Millisecond

// pinArea pins a plane's upload area with the host's first device that
// can (backend.HostPinner: the GPU), so that the steps' copies read uploads
// there, in place; where none can, or pinning fails (said once), uploads
// are copied out of the area as they are decoded.
func (h *Host) pinArea(r *registration, p *dataplane.DataPlane) {
	if len(p.Area) == 0 {
		return
	}
	for _, d := range h.cfg.Scheduler.Devices {
		pinner, ok := d.(backend.HostPinner)
		if !ok {
			continue
		}
		p.MapMu.Lock() // the segment stays mapped while it is pinned
		defer p.MapMu.Unlock()
		if p.Unmapped {
			return
		}
		var unpin func() error
		err := onBoundThread(d, func() (err error) {
			unpin, err = pinner.PinHost(p.Area)
			return err
		})
		if err != nil {
			h.cfg.Logf("the upload area of the front at %s (epoch %d) is not pinned (its uploads are copied out of it): %v", r.front.Address, r.epoch, err)
			return
		}
		p.Unpin = func() error { return onBoundThread(d, unpin) }
		return
	}
}

// onBoundThread runs fn on a goroutine of its own bound to d (the
// device's context current on its thread, as every call into a device
// needs), whose thread ends with it: no other goroutine inherits that
// context.
func onBoundThread(d cuda.Device, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		if _, err := d.BindThread(); err != nil {
			done <- err
			return
		}
		done <- fn() // returning still locked to the thread ends the thread
	}()
	return <-done
}

// uploadArea is the upload area of the registration's data plane, or nil.
// Only its reader's goroutine reads it (the segment stays mapped while it
// reads).
func (r *registration) uploadArea() []byte {
	if p := r.PlaneFor(); p != nil {
		return p.Area
	}
	return nil
}

// closePlane lets the registration's data plane go (offered or taken),
// its last record saying why when why is given: the front, which sees
// the plane close, loses the registration for that reason.
func (r *registration) closePlane(why string) {
	if p := r.plane.Load(); p != nil && why != "" {
		// Written before the rings close, or not at all (a front that
		// reads nothing for lastRecordWait hears it by heartbeat instead).
		_ = p.SendLast(dataplane.PlaneDropped, &wirepb.Heartbeat{Epoch: r.epoch, SentUnixNano: time.Now().UnixNano(), Dropped: why}, lastRecordWait)
	}
	for _, p := range []*dataplane.DataPlane{r.offered.Swap(nil), r.plane.Swap(nil)} {
		if p != nil {
			p.Close()
		}
	}
}

// toFront sends a registration's message to its front: through its data
// plane when it has one (a plane shut drops it: the front dropped the
// epoch), else through the remote.
func (h *Host) toFront(r *registration, kind uint16, msg proto.Message) {
	p := r.PlaneFor()
	if p == nil {
		h.tell(r.front, msg)
		return
	}
	if err := p.Send(kind, msg); err != nil && err != dataplane.ErrPlaneClosed {
		h.cfg.Logf("the data plane of the front at %s (epoch %d): %v", r.front.Address, r.epoch, err)
	}
}

// closePlanes lets every registration's data plane go (the host stops),
// and waits for their readers to end.
func (h *Host) closePlanes() {
	h.Mu.Lock()
	var regs []*registration
	for _, r := range h.Regs {
		regs = append(regs, r)
	}
	for _, r := range h.replaced {
		regs = append(regs, r)
	}
	h.Mu.Unlock()
	for _, r := range regs {
		p := r.plane.Load()
		r.closePlane("the host stopped")
		if p != nil {
			<-p.ReadDone // its reader hands nothing to the host from now on (steps reading its area may still run)
		}
	}
}
