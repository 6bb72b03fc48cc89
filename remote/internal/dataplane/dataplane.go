// The same-host data plane: a segment of shared memory a host makes for
// one registration, holding a ring of records each way, through which the
// registration's traffic goes instead of protoactor-go's remote when the
// front runs on the same machine.

package dataplane

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lanesched/lanes/internal/shmring"
	wire "github.com/lanesched/lanes/remote/internal/wire"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// DefaultRingBytes is the data area of each of a data plane's two rings
// (HostConfig.RingBytes): a record longer than a quarter of it crosses in
// fragments.
const DefaultRingBytes = 4 << 20

// The records of a data plane, by kind: the wire messages of a
// registration but the Join, Hello, Welcome, heartbeats and probes, which
// stay on the remote.
const (
	PlaneSubmits  uint16 = 1 // front to host
	PlaneAlloc    uint16 = 2
	PlaneFree     uint16 = 3
	PlaneRead     uint16 = 4
	PlaneForget   uint16 = 5
	PlaneLaneOp   uint16 = 6
	PlaneStaged   uint16 = 7  // a StagedPrepare
	PlaneReplay   uint16 = 8  // a StagedReplay
	PlaneRelease  uint16 = 9  // a StagedRelease
	PlaneWithdraw uint16 = 10 // a Withdraw, after its submission
	PlaneReceipts uint16 = 11 // host to front
	PlaneResult   uint16 = 12
	PlaneLeaving  uint16 = 13
	PlaneDropped  uint16 = 14 // a Heartbeat saying the host dropped the registration, its last record
)

// The segment: a page of header, the front's ring (front to host), the
// host's ring (host to front).
const (
	planeMagic   = "lanesdp1"
	planeHeader  = 4096
	PlaneNonce   = 32
	offPlaneRing = 16 // uint64: the data area of each ring
	offPlaneArea = 24 // uint64: the upload area's bytes
	offNonce     = 32 // the nonce, planeNonce bytes
)

// ErrPlaneClosed is a write to a data plane that was shut.
var ErrPlaneClosed = errors.New("remote: the data plane is shut")

// ErrPeerClosed is a data plane the other side closed (it stopped, let
// the registration go, or found the ring corrupt).
var ErrPeerClosed = errors.New("remote: the other side closed the data plane")

// PlaneStall bounds how long a record may wait for room while both sides
// live: a ring that does not move for this long (a reader stuck, its
// counters scribbled) is a broken plane, not a wait.
var PlaneStall = 5 * time.Second

// ringSpan is the bytes a ring of ringBytes takes in the segment, whole
// pages.
func ringSpan(ringBytes int) int { return (shmring.Size(ringBytes) + 4095) &^ 4095 }

// PlaneSize is a segment's bytes: its header, its two rings and its
// upload area (whole pages).
func PlaneSize(ringBytes, areaBytes int) int { return planeHeader + 2*ringSpan(ringBytes) + areaBytes }

// planeArea is a segment's upload area (empty when it has none).
func planeArea(mem []byte, ringBytes int) []byte { return mem[planeHeader+2*ringSpan(ringBytes):] }

// CheckRingBytes says what is wrong with a ring size, if anything.
func CheckRingBytes(n int) error {
	if n < shmring.MinCapacity || n > 64<<20 || n&(n-1) != 0 {
		return fmt.Errorf("%w: RingBytes %d: give a power of two from %d to %d", wire.ErrConfig, n, shmring.MinCapacity, 64<<20)
	}
	return nil
}

// DataPlane is one side's view of a segment: it writes its own ring (any
// goroutine, one at a time) and one goroutine reads the other's.
type DataPlane struct {
	Mem []byte
	// area is the segment's upload area (nil: none); on the front, spans
	// hands out its room (the host only reads what a command names).
	Area        []byte
	Spans       *areaSpans
	AreaUploads atomic.Uint64 // uploads written into the area (the front's)
	// On the host: unpin lets the area go from the device that pinned it
	// (nil: not pinned; its uploads are copied out as they are decoded);
	// holds counts the steps whose uploads read the pinned area in place
	// until they end, and the segment stays mapped until the last one
	// did (unmapLater, under mapMu).
	Unpin      func() error
	Holds      atomic.Int64
	HeldSteps  atomic.Uint64 // steps that read it in place, ever
	unmapLater bool
	ReadDone   chan struct{} // closed once no reader will hand the side anything more
	readOnce   sync.Once
	// offered holds the host's descriptors the front opens (the memfd,
	// then the doorbells' ends that are the front's) until it opened them
	// (nil after, and on the front); bells are the side's own doorbells
	// (the one its reader parks on, the one its writer rings), closed with
	// the mapping.
	Offered atomic.Pointer[[]int]
	bells   []*os.File

	qmu      sync.Mutex // orders sends: the backlog, and whether it drains
	backlog  []planeRecord
	draining bool

	wmu      sync.Mutex   // writers, one at a time
	MapMu    sync.RWMutex // held to touch the segment (read) and to unmap it
	w        *shmring.Writer
	Unmapped bool // under mapMu
	reading  bool // a reader goroutine runs: it unmaps when it ends (under mapMu)
	Rd       *shmring.Reader
	Shut     atomic.Bool
	Done     chan struct{} // closed when the segment is unmapped

	Held           func() bool   // whether the other side is still held, for a backlog waiting for room (set before use)
	Stalled        func(error)   // called once the ring to the other side stopped moving (set before use)
	stallAfter     time.Duration // planeStall when it was made
	Sent, Received atomic.Uint64 // records
	order          atomic.Uint64 // bumped before each record is written, read after each is read
}

// PlaneRings is the front's ring (front to host) and the host's.
func PlaneRings(mem []byte, ringBytes int) (toHost, toFront []byte) {
	span := ringSpan(ringBytes)
	return mem[planeHeader : planeHeader+shmring.Size(ringBytes)], mem[planeHeader+span : planeHeader+span+shmring.Size(ringBytes)]
}

// newPlane is a side's view of a segment: it writes mine, ringing ring
// when the other side's reader parked, and reads theirs, parked on park
// when it is empty. The plane closes both doorbells when it unmaps; on an
// error the caller closes them.
func newPlane(mem, mine, theirs []byte, park, ring *os.File) (*DataPlane, error) {
	w, err := shmring.NewWriter(mine)
	if err != nil {
		return nil, err
	}
	rd, err := shmring.NewReader(theirs)
	if err != nil {
		return nil, err
	}
	if err := rd.UseDoorbell(park); err != nil {
		return nil, err
	}
	if err := w.UseDoorbell(ring); err != nil {
		return nil, err
	}
	p := &DataPlane{Mem: mem, w: w, Rd: rd, bells: []*os.File{park, ring}, Done: make(chan struct{}), ReadDone: make(chan struct{}), stallAfter: PlaneStall}
	return p, nil
}

// Send sends one message through the plane, in order, and never waits
// for room: a record that does not fit now (the other side stopped
// reading: SIGSTOP, or a burst) waits in a backlog that a goroutine of
// the plane writes as room comes, while alive says the other side is
// still held (held: its loss, seen by heartbeats, shuts the plane and
// drops the backlog). So a stopped peer holds up no one else's answers.
func (p *DataPlane) Send(kind uint16, msg proto.Message) error {
	b, err := proto.Marshal(msg)
	if err != nil {
		return err
	}
	p.qmu.Lock()
	defer p.qmu.Unlock()
	// Behind a backlog, in fragments (which, once begun, wait for room),
	// or with no room now: the plane's goroutine writes it.
	if !p.draining && p.w.Whole(len(b)) {
		if err = p.Write(kind, b, 0, nil); !errors.Is(err, shmring.ErrTimeout) {
			return err
		}
	}
	p.backlog = append(p.backlog, planeRecord{kind: kind, b: b})
	if !p.draining {
		p.draining = true
		go p.drain()
	}
	return nil
}

// SendLast sends the plane's last record, after every record sent before
// it (the backlog drained), waiting at most within for it to be written:
// the caller closes the plane next, and a record still waiting then would
// be dropped (the other side would see the plane close without hearing
// why). It gives up (ErrTimeout) on a side that reads nothing.
func (p *DataPlane) SendLast(kind uint16, msg proto.Message, within time.Duration) error {
	b, err := proto.Marshal(msg)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(within)
	for {
		p.qmu.Lock()
		if !p.draining {
			defer p.qmu.Unlock()
			return p.Write(kind, b, max(time.Until(deadline), time.Millisecond), nil)
		}
		p.qmu.Unlock()
		if time.Now().After(deadline) {
			return shmring.ErrTimeout
		}
		time.Sleep(time.Millisecond)
	}
}

// planeRecord is a record waiting for room.
type planeRecord struct {
	kind uint16
	b    []byte
}

// drain writes the backlog in order as room comes, until it is empty (or
// the plane is shut: what is left is dropped, its calls ended by the
// loss).
func (p *DataPlane) drain() {
	for {
		p.qmu.Lock()
		batch := p.backlog
		p.backlog = nil
		if len(batch) == 0 {
			p.draining = false
			p.qmu.Unlock()
			return
		}
		p.qmu.Unlock()
		for _, r := range batch {
			stalled := time.AfterFunc(p.stallAfter, func() {
				p.Close() // the write waiting for room ends
				if p.Stalled != nil {
					p.Stalled(fmt.Errorf("a record waited %v for room in the ring: the other side reads nothing", p.stallAfter))
				}
			})
			_ = p.Write(r.kind, r.b, 100*time.Millisecond, p.Held)
			stalled.Stop()
		}
	}
}

// Write writes one record, waiting for room in steps of wait while alive
// says so (nil: one attempt, ErrTimeout when there is no room).
func (p *DataPlane) Write(kind uint16, b []byte, wait time.Duration, alive func() bool) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.MapMu.RLock()
	defer p.MapMu.RUnlock()
	for {
		if p.Unmapped || p.Shut.Load() {
			return ErrPlaneClosed
		}
		p.order.Add(1) // before the record is published: see read
		err := p.w.Write(kind, b, wait)
		switch {
		case err == nil:
			p.Sent.Add(1)
			return nil
		case errors.Is(err, shmring.ErrTimeout) && alive == nil:
			return err
		case errors.Is(err, shmring.ErrTimeout) && alive():
			continue
		case errors.Is(err, shmring.ErrTimeout), errors.Is(err, shmring.ErrClosed):
			return ErrPlaneClosed
		default:
			return err
		}
	}
}

// Read runs the reading side until the plane is shut, the other side
// closes it, or alive says it is no longer held: each record goes to
// handle (which may keep nothing of its payload). It returns why it ended
// (nil for a shut plane) and unmaps the segment.
func (p *DataPlane) Read(handle func(kind uint16, payload []byte) error, alive func() bool) error {
	defer func() {
		// Rings closed first: a writer waiting for room leaves the segment.
		p.Shut.Store(true)
		p.closeRings()
		p.readEnded()
		p.unmap()
	}()
	for {
		kind, payload, err := p.Rd.Read(time.Second)
		switch {
		case err == nil:
			p.Received.Add(1)
			// An answer comes after what this process did before it
			// wrote the question, in fact; the race detector, which cannot
			// see through the other process, sees it through order.
			p.order.Load()
			if err := handle(kind, payload); err != nil {
				p.Close()
				return err
			}
		case errors.Is(err, shmring.ErrTimeout) && alive() && !p.Shut.Load():
		case errors.Is(err, shmring.ErrClosed) && !p.Shut.Load():
			return ErrPeerClosed
		case errors.Is(err, shmring.ErrTimeout), errors.Is(err, shmring.ErrClosed):
			return nil
		default:
			p.Close()
			return err
		}
	}
}

// WriteArea copies b into the upload area at off, unless the segment was
// unmapped (false).
func (p *DataPlane) WriteArea(off uint64, b []byte) bool {
	p.MapMu.RLock()
	defer p.MapMu.RUnlock()
	if p.Unmapped {
		return false
	}
	copy(p.Area[off:], b)
	return true
}

// StartReading marks the plane read by a goroutine (which unmaps it when
// it ends): false if it was shut already.
func (p *DataPlane) StartReading() bool {
	p.MapMu.Lock()
	defer p.MapMu.Unlock()
	if p.Unmapped || p.Shut.Load() {
		return false
	}
	p.reading = true
	return true
}

// Close shuts both rings (the other side's reads and writes end) and,
// with no reader to do it, unmaps the segment.
func (p *DataPlane) Close() {
	if !p.Shut.CompareAndSwap(false, true) {
		return
	}
	if !p.closeRings() {
		p.readEnded()
		p.unmap()
	}
	p.Release()
}

// closeRings closes both rings, waking a writer that waits for room
// (under the mapping's read lock, not the writers' lock, which that writer
// holds), and reports whether a reader goroutine will unmap the segment.
func (p *DataPlane) closeRings() (reading bool) {
	p.MapMu.RLock()
	defer p.MapMu.RUnlock()
	if !p.Unmapped {
		p.w.Close()
		p.Rd.Close()
	}
	return p.reading
}

// readEnded says no reader will hand the side anything more (readDone).
func (p *DataPlane) readEnded() { p.readOnce.Do(func() { close(p.ReadDone) }) }

// unmap unmaps the segment once no writer is in it and no step reads its
// pinned area (else the last such step's end does: releaseArea).
func (p *DataPlane) unmap() {
	p.MapMu.Lock() // after any writer left the segment
	defer p.MapMu.Unlock()
	if p.Unmapped {
		return
	}
	if p.Holds.Load() > 0 {
		p.unmapLater = true
		return
	}
	p.Unmapped = true
	if p.Unpin != nil {
		_ = p.Unpin() // no copy from it is in flight: every step that read it ended
	}
	_ = unix.Munmap(p.Mem)
	p.Mem, p.Area = nil, nil
	for _, b := range p.bells {
		_ = b.Close()
	}
	close(p.Done)
}

// HoldArea keeps the segment mapped for a step whose uploads read the
// pinned area in place (on the reader's goroutine, as it decodes the
// step): false once the plane is going.
func (p *DataPlane) HoldArea() bool {
	p.MapMu.RLock()
	defer p.MapMu.RUnlock()
	if p.Unmapped || p.unmapLater || p.Unpin == nil {
		return false
	}
	p.Holds.Add(1)
	p.HeldSteps.Add(1)
	return true
}

// ReleaseArea is the end of a step holdArea held the segment for.
func (p *DataPlane) ReleaseArea() {
	if p.Holds.Add(-1) > 0 {
		return
	}
	p.MapMu.RLock()
	later := p.unmapLater
	p.MapMu.RUnlock()
	if later {
		p.unmap()
	}
}

// DecodePlane decodes a record of a kind the side reads.
func DecodePlane(kind uint16, payload []byte, kinds map[uint16]func() proto.Message) (proto.Message, error) {
	mk, ok := kinds[kind]
	if !ok {
		return nil, fmt.Errorf("a record of kind %d", kind)
	}
	m := mk()
	if err := proto.Unmarshal(payload, m); err != nil {
		return nil, fmt.Errorf("a record of kind %d: %w", kind, err)
	}
	return m, nil
}
