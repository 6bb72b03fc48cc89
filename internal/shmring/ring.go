// Package shmring is a single-producer, single-consumer ring of records in
// memory that two processes share: one writes, the other reads, with no
// system call while both are busy (the reader spins a while before it
// parks on a futex, and the writer wakes it only when it parked).
//
// A ring is a region of bytes (Size(capacity) of them, mapped by both
// processes at any address) laid out as a header of counters and the
// records after it. Records are a kind and a payload; a payload larger
// than a quarter of the ring crosses in fragments, reassembled by the
// reader. Nothing the other side wrote is trusted: a header out of range
// is an error (ErrCorrupt), never a crash, and never read past the
// region.
//
// A side parks on a futex word in the ring, or, where both sides were
// given a doorbell (a pipe: Reader.UseDoorbell, Writer.UseDoorbell), a
// reader parks in the Go runtime's poller, so that its process's other
// goroutines run while it waits.
//
// # Concurrency properties
//
// A Writer belongs to one goroutine, a Reader to one goroutine, each in
// its own process (or the same one, in tests). Both block only in Write
// (the ring full) and Read (the ring empty), each bounded by its timeout.
package shmring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"os"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// The header: each counter on a cache line of its own.
const (
	offHead       = 0   // uint64: bytes the writer has published
	offTail       = 64  // uint64: bytes the reader has consumed
	offReaderSeq  = 128 // uint32: the reader's futex word, bumped by the writer to wake it
	offReaderPark = 132 // uint32: 1 while the reader is parked (or about to)
	offWriterSeq  = 192 // uint32: the writer's futex word, bumped by the reader
	offWriterPark = 196 // uint32: 1 while the writer waits for room
	offClosed     = 256 // uint32: nonzero once either side closed the ring
	offCapacity   = 264 // uint64: the data area's size, written by whoever made the ring
	headerSize    = 320
)

// A record's header: its payload's length, its kind, its flags.
const (
	recordHeader = 8
	flagPad      = 1 // skip to the start of the data area
	flagMore     = 2 // a fragment: the record goes on in the next
)

// MinCapacity and MaxCapacity bound a ring's data area.
const (
	MinCapacity = 4 << 10
	MaxCapacity = 1 << 30
)

// Errors.
var (
	// ErrCorrupt is a ring whose counters or records do not make sense:
	// the other side is broken or hostile; stop using the ring.
	ErrCorrupt = errors.New("shmring: corrupt ring")
	// ErrTimeout is a Read or Write that waited its timeout out.
	ErrTimeout = errors.New("shmring: timed out")
	// ErrClosed is a ring that either side closed.
	ErrClosed = errors.New("shmring: closed")
	// ErrTooLarge is a record longer than MaxRecord.
	ErrTooLarge = errors.New("shmring: record too large")
)

// MaxRecord is the longest payload one record may carry (in fragments).
const MaxRecord = 256 << 20

// Size is the bytes a ring of capacity (a power of two, MinCapacity to
// MaxCapacity) takes.
func Size(capacity int) int { return headerSize + capacity }

// ring is one side's view of a region.
type ring struct {
	mem      []byte
	data     []byte
	capacity uint64
	mask     uint64
	// bell is the side's doorbell (nil: the futex): the one a Reader
	// parks on, or the one a Writer rings.
	bell *bell
}

func (r *ring) u64(off int) *uint64 { return (*uint64)(unsafe.Pointer(&r.mem[off])) }
func (r *ring) u32(off int) *uint32 { return (*uint32)(unsafe.Pointer(&r.mem[off])) }

// Init lays a new ring out in mem (Size(capacity) bytes, zeroed, 8-byte
// aligned): the side that makes the region calls it once, before the other
// side attaches.
func Init(mem []byte, capacity int) error {
	if capacity < MinCapacity || capacity > MaxCapacity || bits.OnesCount(uint(capacity)) != 1 {
		return fmt.Errorf("shmring: capacity %d: give a power of two, %d to %d", capacity, MinCapacity, MaxCapacity)
	}
	if len(mem) < Size(capacity) || uintptr(unsafe.Pointer(&mem[0]))%8 != 0 {
		return fmt.Errorf("shmring: %d bytes for a ring of capacity %d: give %d, 8-byte aligned", len(mem), capacity, Size(capacity))
	}
	r := &ring{mem: mem}
	atomic.StoreUint64(r.u64(offCapacity), uint64(capacity))
	return nil
}

// attach reads a region's layout, checking it against the region's size.
func attach(mem []byte) (*ring, error) {
	if len(mem) < headerSize || uintptr(unsafe.Pointer(&mem[0]))%8 != 0 {
		return nil, fmt.Errorf("%w: a region of %d bytes", ErrCorrupt, len(mem))
	}
	r := &ring{mem: mem}
	c := atomic.LoadUint64(r.u64(offCapacity))
	if c < MinCapacity || c > MaxCapacity || bits.OnesCount64(c) != 1 || uint64(len(mem)) < uint64(headerSize)+c {
		return nil, fmt.Errorf("%w: capacity %d in a region of %d bytes", ErrCorrupt, c, len(mem))
	}
	r.capacity, r.mask = c, c-1
	r.data = mem[headerSize : headerSize+int(c)]
	return r, nil
}

// Close marks the ring closed: the other side's Read and Write end with
// ErrClosed once they see it (a parked one is woken); a Read gives the
// records written before the close first.
func (r *ring) close(reading bool) {
	atomic.StoreUint32(r.u32(offClosed), 1)
	atomic.AddUint32(r.u32(offReaderSeq), 1)
	atomic.AddUint32(r.u32(offWriterSeq), 1)
	futexWake(r.u32(offReaderSeq))
	futexWake(r.u32(offWriterSeq))
	switch {
	case r.bell != nil && reading:
		r.bell.cut() // this side's reader, parked on its doorbell
	case r.bell != nil:
		r.bell.ring() // the other side's
	}
}

func (r *ring) closed() bool { return atomic.LoadUint32(r.u32(offClosed)) != 0 }

// SpinEnv names the variable that sets how long a side spins on the
// other's counter before it parks on the futex (a Go duration: "0s",
// "20us"). By default it spins 1 ms, and only on a machine of 8 CPUs or
// more: on fewer, a spinning reader takes the core the other side needs
// (measured on 2 cores: spinning 50 µs cost a fifth of the throughput).
// On the H200's 16 cores, with lanes that spin 500 µs, a lane host ran
// 0.73-0.83x of one process at 2 steps in flight per tenant with readers
// that spin 20 µs, 0.82-0.84x at 200 µs and 0.85-0.89x at 1 ms: its next
// record comes within the millisecond, and a parked reader costs a wake.
const SpinEnv = "LANES_SHM_SPIN"

// spin is how long a side spins before it parks.
var spin = func() time.Duration {
	if d, err := spinFromEnv(); err == nil && os.Getenv(SpinEnv) != "" {
		return d
	}
	return defaultSpin()
}()

// defaultSpin is the spin without SpinEnv: 1 ms on 8 CPUs or more, else 0.
func defaultSpin() time.Duration {
	if runtime.NumCPU() >= 8 {
		return time.Millisecond
	}
	return 0
}

func spinFromEnv() (time.Duration, error) {
	v := os.Getenv(SpinEnv)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > time.Second {
		return 0, fmt.Errorf("shmring: %s=%q is not a duration from 0s to 1s (such as 200us): ignored, the default is used (%v on this machine of %d CPUs)", SpinEnv, v, defaultSpin(), runtime.NumCPU())
	}
	return d, nil
}

// CheckSpinEnv says why SpinEnv's value was ignored, if it was: a caller
// that starts a ring's side logs it.
func CheckSpinEnv() error {
	_, err := spinFromEnv()
	return err
}

// wait waits until ready reports true: spinning a while, then parked on
// the futex word seq, or on the doorbell park when there is one, with the
// park flag up (so that the other side knows to wake it), within timeout.
// It re-checks after raising the flag, so a wake between the check and
// the park is never lost.
func (r *ring) wait(ready func() bool, seqOff, parkOff int, park *bell, timeout time.Duration) error {
	start := time.Now()
	if ready() {
		return nil
	}
	// The spin never outlasts the caller's timeout: a Write that may not
	// wait (timeout 0) tries once.
	if window := min(spin, timeout); window > 0 {
		if spinners.Add(1) <= maxSpinners {
			done, err := r.spinFor(ready, start, window)
			spinners.Add(-1)
			if done {
				return err
			}
		} else {
			spinners.Add(-1)
		}
	}
	deadline := start.Add(timeout)
	for {
		seq := atomic.LoadUint32(r.u32(seqOff))
		atomic.StoreUint32(r.u32(parkOff), 1)
		if ready() {
			atomic.StoreUint32(r.u32(parkOff), 0)
			return nil
		}
		if r.closed() {
			atomic.StoreUint32(r.u32(parkOff), 0)
			if ready() {
				return nil
			}
			return ErrClosed
		}
		left := time.Until(deadline)
		if left <= 0 {
			atomic.StoreUint32(r.u32(parkOff), 0)
			return ErrTimeout
		}
		if park != nil && !park.dead.Load() {
			park.wait(time.Now().Add(min(left, parkAtMost)))
		} else {
			futexWait(r.u32(seqOff), seq, min(left, parkAtMost))
		}
		atomic.StoreUint32(r.u32(parkOff), 0)
	}
}

// parkAtMost bounds one park: a side checks the ring's counters and its
// closed flag at least this often, woken or not.
var parkAtMost = 10 * time.Millisecond

// spinners counts the sides of this process's rings spinning now; at most
// maxSpinners spin at once (a core each), the others park at once, so a
// host serving many fronts does not spin a core per front.
var spinners atomic.Int32

// maxSpinners is how many sides may spin at once: one per 8 CPUs.
var maxSpinners = int32(max(1, runtime.NumCPU()/8))

// spinFor spins until ready, the ring closed or window since start
// passed; done says whether it ended the wait (with err).
func (r *ring) spinFor(ready func() bool, start time.Time, window time.Duration) (done bool, err error) {
	for i := 0; ; i++ {
		if ready() {
			return true, nil
		}
		if r.closed() && !ready() { // what came before the close is read first
			return true, ErrClosed
		}
		if i%64 == 63 && time.Since(start) > window {
			return false, nil
		}
	}
}

// wake wakes the other side if it parked: it rings the doorbell ring
// when there is one, else it bumps the futex word and wakes it.
func (r *ring) wake(seqOff, parkOff int, ring *bell) {
	if atomic.LoadUint32(r.u32(parkOff)) != 0 {
		if ring != nil {
			ring.ring()
			return
		}
		atomic.AddUint32(r.u32(seqOff), 1)
		futexWake(r.u32(seqOff))
	}
}

// Writer writes records into a ring.
type Writer struct {
	r    *ring
	head uint64 // its own copy of the published head
}

// NewWriter attaches the writing side to a ring region.
func NewWriter(mem []byte) (*Writer, error) {
	r, err := attach(mem)
	if err != nil {
		return nil, err
	}
	return &Writer{r: r, head: atomic.LoadUint64(r.u64(offHead))}, nil
}

// Close closes the ring (see ErrClosed).
func (w *Writer) Close() { w.r.close(false) }

// maxFragment is the most payload one record of this ring holds.
func (w *Writer) maxFragment() int { return int(w.r.capacity/4) - recordHeader }

// Write writes one record: the payload (at most MaxRecord bytes, in
// fragments when it is long) under kind, waiting for room for its first
// fragment at most timeout. It returns ErrTimeout when the reader took
// nothing for that long (it may be dead or stopped: the caller decides),
// the ring as it was. Once the first fragment is written the record is
// finished whatever it takes: Write waits for room for the rest until the
// ring is closed (ErrClosed), so a record is never cut.
func (w *Writer) Write(kind uint16, payload []byte, timeout time.Duration) error {
	if len(payload) > MaxRecord {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrTooLarge, len(payload), MaxRecord)
	}
	for first := true; ; first = false {
		n := min(len(payload), w.maxFragment())
		flags := uint16(0)
		if n < len(payload) {
			flags = flagMore
		}
		wait := timeout
		if !first {
			wait = time.Duration(math.MaxInt64)
		}
		if err := w.record(kind, flags, payload[:n], wait); err != nil {
			return err
		}
		payload = payload[n:]
		if len(payload) == 0 {
			return nil
		}
	}
}

// Whole reports whether a payload of n bytes crosses in one record of
// this ring, not in fragments (a Write of it waits at most its timeout).
func (w *Writer) Whole(n int) bool { return n <= w.maxFragment() }

// record writes one record (a fragment).
func (w *Writer) record(kind, flags uint16, payload []byte, timeout time.Duration) error {
	r := w.r
	need := uint64(recordHeader + (len(payload)+7)&^7)
	at := w.head & r.mask
	pad := uint64(0)
	if at+need > r.capacity {
		pad = r.capacity - at // to the end of the data area, then the record at its start
	}
	room := func() bool {
		tail := atomic.LoadUint64(r.u64(offTail))
		return w.head+pad+need-tail <= r.capacity
	}
	if err := r.wait(room, offWriterSeq, offWriterPark, nil, timeout); err != nil {
		return err
	}
	if pad > 0 {
		putHeader(r.data[at:], uint32(pad-recordHeader), 0, flagPad)
		at = 0
	}
	putHeader(r.data[at:], uint32(len(payload)), kind, flags)
	copy(r.data[at+recordHeader:], payload)
	w.head += pad + need
	atomic.StoreUint64(r.u64(offHead), w.head)
	r.wake(offReaderSeq, offReaderPark, r.bell)
	return nil
}

func putHeader(b []byte, length uint32, kind, flags uint16) {
	binary.LittleEndian.PutUint32(b, length)
	binary.LittleEndian.PutUint16(b[4:], kind)
	binary.LittleEndian.PutUint16(b[6:], flags)
}

// Reader reads records from a ring.
type Reader struct {
	r    *ring
	tail uint64
	buf  []byte // a record being reassembled from fragments
	// A record whose fragments stopped coming (its writer stopped: SIGSTOP,
	// a burst elsewhere) when a Read timed out: the next Read goes on with
	// it.
	fragments int
	kind      uint16
}

// NewReader attaches the reading side to a ring region.
func NewReader(mem []byte) (*Reader, error) {
	r, err := attach(mem)
	if err != nil {
		return nil, err
	}
	return &Reader{r: r, tail: atomic.LoadUint64(r.u64(offTail))}, nil
}

// Close closes the ring (see ErrClosed).
func (rd *Reader) Close() { rd.r.close(true) }

// Pending reports whether a record (or fragment) is waiting to be read.
func (rd *Reader) Pending() bool { return atomic.LoadUint64(rd.r.u64(offHead)) != rd.tail }

// Read returns the next record, waiting at most timeout for it to begin,
// or for its next fragment (ErrTimeout: nothing came; the writer may be
// dead or stopped: the caller decides, and a Read after goes on with a
// record begun). The payload is valid until the next Read. A record that
// does not make sense is ErrCorrupt: stop reading the ring.
func (rd *Reader) Read(timeout time.Duration) (kind uint16, payload []byte, err error) {
	r := rd.r
	if rd.fragments == 0 {
		rd.buf = rd.buf[:0]
	}
	for {
		head := uint64(0)
		ready := func() bool {
			head = atomic.LoadUint64(r.u64(offHead))
			return head != rd.tail
		}
		if err := r.wait(ready, offReaderSeq, offReaderPark, r.bell, timeout); err != nil {
			if rd.fragments > 0 && errors.Is(err, ErrClosed) {
				return 0, nil, fmt.Errorf("%w: a record cut off after %d fragments", ErrClosed, rd.fragments)
			}
			return 0, nil, err // a timeout keeps the record begun
		}
		if head-rd.tail > r.capacity || head < rd.tail {
			return 0, nil, fmt.Errorf("%w: head %d, tail %d, capacity %d", ErrCorrupt, head, rd.tail, r.capacity)
		}
		at := rd.tail & r.mask
		if at+recordHeader > r.capacity || head-rd.tail < recordHeader {
			return 0, nil, fmt.Errorf("%w: a record header past the data", ErrCorrupt)
		}
		h := r.data[at : at+recordHeader]
		length, k, flags := binary.LittleEndian.Uint32(h), binary.LittleEndian.Uint16(h[4:]), binary.LittleEndian.Uint16(h[6:])
		size := uint64(recordHeader) + (uint64(length)+7)&^7
		if flags&^(flagPad|flagMore) != 0 || at+size > r.capacity || rd.tail+size > head || (flags&flagPad == 0 && size > r.capacity/4) {
			return 0, nil, fmt.Errorf("%w: a record of %d bytes, flags %#x, at %d of %d", ErrCorrupt, length, flags, at, r.capacity)
		}
		if flags&flagPad != 0 {
			if at+size != r.capacity {
				return 0, nil, fmt.Errorf("%w: padding that does not reach the end", ErrCorrupt)
			}
			rd.consume(size)
			continue
		}
		if rd.fragments > 0 && k != rd.kind {
			return 0, nil, fmt.Errorf("%w: a fragment of kind %d in a record of kind %d", ErrCorrupt, k, rd.kind)
		}
		rd.kind = k
		body := r.data[at+recordHeader : at+recordHeader+uint64(length)]
		if flags&flagMore == 0 && rd.fragments == 0 {
			// One record: copied out, so that the writer may reuse its room.
			rd.buf = append(rd.buf, body...)
			rd.consume(size)
			return k, rd.buf, nil
		}
		if len(rd.buf)+len(body) > MaxRecord {
			return 0, nil, fmt.Errorf("%w: a record past %d bytes", ErrCorrupt, MaxRecord)
		}
		rd.buf = append(rd.buf, body...)
		rd.consume(size)
		rd.fragments++
		if flags&flagMore == 0 {
			rd.fragments = 0
			return k, rd.buf, nil
		}
	}
}

// consume gives a record's room back to the writer.
func (rd *Reader) consume(size uint64) {
	rd.tail += size
	atomic.StoreUint64(rd.r.u64(offTail), rd.tail)
	rd.r.wake(offWriterSeq, offWriterPark, nil)
}
