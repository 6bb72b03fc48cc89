// A front's side of the same-host data plane: mapped when a host's Hello
// offers one, read by a goroutine of the link's, written by every caller
// that sends the host a registration's message.

package front

import (
	"errors"
	"runtime"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/lanesched/lanes/internal/wirepb"
	dataplane "github.com/lanesched/lanes/remote/internal/dataplane"
	"google.golang.org/protobuf/proto"
)

// frontReads are the records a front reads from a host.
var frontReads = map[uint16]func() proto.Message{
	dataplane.PlaneReceipts: func() proto.Message { return &wirepb.Receipts{} },
	dataplane.PlaneResult:   func() proto.Message { return &wirepb.OpResult{} },
	dataplane.PlaneLeaving:  func() proto.Message { return &wirepb.Leaving{} },
	dataplane.PlaneDropped:  func() proto.Message { return &wirepb.Heartbeat{} },
}

// linkPlane is a link's data plane under one epoch.
type linkPlane struct {
	epoch uint64
	P     *dataplane.DataPlane
}

// attach maps a host's offered data plane, unless the front keeps its
// traffic on the remote: the plane, or why not (the Welcome says it).
func (f *Front) attach(l *Link, offer *wirepb.DataPlane) (*dataplane.DataPlane, string) {
	if f.cfg.NoDataPlane {
		return nil, "the front keeps its traffic on the remote (FrontConfig.NoDataPlane; lanedemo --data-plane=false)"
	}
	p, err := dataplane.AttachPlane(offer)
	if err != nil {
		f.cfg.Logf("host %s: no data plane (its traffic goes through the remote): %v", l.Name, err)
		return nil, err.Error()
	}
	return p, ""
}

// startPlane makes p the link's way to the host under epoch, and reads
// the host's answers from it until it is shut.
func (l *Link) startPlane(a *FrontActor, epoch uint64, p *dataplane.DataPlane) {
	p.Held = func() bool { return l.servingUnder(epoch) || l.leavingUnder(epoch) }
	p.Stalled = func(err error) { l.lose(epoch, "its data plane stalled: "+err.Error()) }
	if old := l.Plane.Swap(&linkPlane{epoch: epoch, P: p}); old != nil {
		old.P.Close()
	}
	if !p.StartReading() {
		return
	}
	go func() {
		dropped := "" // the host's last word: why it dropped the registration
		err := p.Read(func(kind uint16, b []byte) error {
			msg, err := dataplane.DecodePlane(kind, b, frontReads)
			if err != nil {
				return err
			}
			if hb, ok := msg.(*wirepb.Heartbeat); ok {
				dropped = hb.Dropped
				return nil
			}
			a.fromHost(l, msg)
			if _, ended := msg.(*wirepb.Receipts); ended && !p.Rd.Pending() && l.F.calls.Len() < runtime.GOMAXPROCS(0) {
				// The callers whose calls just ended wait for a P, and
				// the last one readied waits in this goroutine's P, which
				// another P steals only after a sleep (3 µs, past 50 µs
				// with Linux's timer slack): with fewer calls in flight
				// than Ps, Ps sit idle and nothing takes it sooner. So
				// the reader lets it run here (it yields its P) while
				// nothing else is waiting in the ring.
				runtime.Gosched()
			}
			return nil
		}, p.Held)
		switch {
		case errors.Is(err, dataplane.ErrPeerClosed) && dropped != "":
			l.droppedBy(epoch, dropped) // after the reader ended: its loss does not wait on it
		case errors.Is(err, dataplane.ErrPeerClosed):
			// The host let the registration go (it stopped, or found a
			// record it could not take): lost now, not at its silence.
			l.lose(epoch, "it closed its data plane")
		case err != nil:
			l.F.cfg.Logf("host %s: the data plane (epoch %d) broke: %v", l.Name, epoch, err)
			l.lose(epoch, "its data plane broke: "+err.Error())
		}
	}()
}

// planeKindOf is the record kind of a front's op message.
func planeKindOf(m proto.Message) uint16 {
	switch m.(type) {
	case *wirepb.Alloc:
		return dataplane.PlaneAlloc
	case *wirepb.Free:
		return dataplane.PlaneFree
	case *wirepb.Read:
		return dataplane.PlaneRead
	case *wirepb.LaneAdmin:
		return dataplane.PlaneLaneOp
	case *wirepb.StagedPrepare:
		return dataplane.PlaneStaged
	case *wirepb.StagedReplay:
		return dataplane.PlaneReplay
	case *wirepb.StagedRelease:
		return dataplane.PlaneRelease
	case *wirepb.Withdraw:
		return dataplane.PlaneWithdraw
	default:
		return dataplane.PlaneForget
	}
}

// planeUnder is the link's data plane under epoch, or nil.
func (l *Link) planeUnder(epoch uint64) *dataplane.DataPlane {
	if lp := l.Plane.Load(); lp != nil && lp.epoch == epoch {
		return lp.P
	}
	return nil
}

// closePlane lets the link's data plane under epoch go (it stays the
// link's record of the path that epoch took), once its reader took what
// the host wrote before: a host's loss is seen on the remote (its address
// terminated, its heartbeats stopped), which may overtake its last
// answers in the ring, and those end their calls as they say, not
// indeterminate. The wait is bounded: a reader stuck on a call's end does
// not hold the loss up.
func (l *Link) closePlane(epoch uint64) {
	if lp := l.Plane.Load(); lp != nil && lp.epoch == epoch {
		lp.P.Close() // the reader takes what is left, then ends
		select {
		case <-lp.P.Done:
		case <-time.After(2 * time.Second):
		}
	}
}

// toHost sends a registration's message to the host under epoch: through
// the data plane of the epoch when there is one (a plane shut drops it:
// the host was lost, and its calls ended so), else through the remote.
func (l *Link) toHost(pid *actor.PID, epoch uint64, kind uint16, msg proto.Message) {
	p := l.planeUnder(epoch)
	if p == nil {
		l.F.tell(pid, msg)
		return
	}
	if err := p.Send(kind, msg); err != nil && err != dataplane.ErrPlaneClosed {
		l.F.cfg.Logf("host %s: the data plane (epoch %d): %v", l.Name, epoch, err)
		l.lose(epoch, "its data plane broke: "+err.Error())
	}
}

// areaSlot is a call's upload that may go through the upload area: its
// bytes, and where to name the span instead.
type areaSlot struct {
	host *[]byte
	area **wirepb.AreaRef
}

// intoArea writes the call's uploads (each of areaMinUpload bytes or more) into
// the upload area of the host's data plane under epoch, as far as it has
// room, and names them there instead: the call gives the spans back when
// it ends (its release), when the host has read them. An upload that
// finds no room, or a plane that has none or went, keeps its bytes in the
// message.
func (l *Link) intoArea(epoch uint64, slots []areaSlot, p *Pending) {
	plane := l.planeUnder(epoch)
	if plane == nil || plane.Spans == nil {
		return
	}
	var taken []dataplane.Span
	for _, sl := range slots {
		b := *sl.host
		s, ok := plane.Spans.Alloc(uint64(len(b)))
		if !ok {
			continue
		}
		if !plane.WriteArea(s.Off, b) {
			plane.Spans.Release(s)
			break
		}
		*sl.area = &wirepb.AreaRef{Offset: s.Off, Length: uint64(len(b))}
		*sl.host = nil
		taken = append(taken, s)
	}
	if len(taken) == 0 {
		return
	}
	plane.AreaUploads.Add(uint64(len(taken)))
	before := p.release
	p.release = func() {
		if before != nil {
			before()
		}
		for _, s := range taken {
			plane.Spans.Release(s)
		}
	}
}
