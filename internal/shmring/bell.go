// Doorbells: how a parked reader is woken without holding up its
// process's scheduler.

package shmring

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// A reader parked on the futex blocks its thread in a system call that
// the Go scheduler cannot see through: the thread keeps its P until the
// runtime's monitor takes it back (20 µs to 10 ms later), and whatever the
// reader readied last (a lane's step, a caller whose call ended) waits in
// that P's queue meanwhile. On two cores, with as many Ps, that wait was
// most of a lane host's extra round trip. A doorbell is a pipe instead: a
// reader parks in the runtime's network poller (its P runs the next
// goroutine at once, or the thread sleeps in epoll), and a writer that
// finds it parked writes a byte.

// bell is one side's end of a doorbell: the read end a reader parks on,
// or the write end a writer rings.
type bell struct {
	f    *os.File
	rc   syscall.RawConn
	buf  [64]byte
	dead atomic.Bool // the read end saw every write end closed: park on the futex again
}

// newBell checks f (an end of a pipe in non-blocking mode, which os.NewFile
// makes pollable) and wraps it.
func newBell(f *os.File) (*bell, error) {
	if f == nil {
		return nil, errors.New("shmring: a doorbell needs a file")
	}
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("shmring: doorbell %s: %w", f.Name(), err)
	}
	if st.Mode()&os.ModeNamedPipe == 0 {
		return nil, fmt.Errorf("shmring: doorbell %s is not a pipe (%v)", f.Name(), st.Mode())
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("shmring: doorbell %s: %w", f.Name(), err)
	}
	// A deadline fails on a file the poller does not hold (a pipe in
	// blocking mode): such a reader would hold its thread, as the futex.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		return nil, fmt.Errorf("shmring: doorbell %s must be in non-blocking mode: %w", f.Name(), err)
	}
	return &bell{f: f, rc: rc}, nil
}

// ring writes a byte, never waiting: a full pipe already rings, and a
// pipe whose reader went returns EPIPE (the runtime ignores SIGPIPE for
// files other than standard output and error).
func (b *bell) ring() {
	_ = b.rc.Write(func(fd uintptr) bool {
		_, _ = syscall.Write(int(fd), []byte{1})
		return true
	})
}

// wait parks until the bell rings, until passes, or the bell is cut (its
// deadline moved to the past by close); it drains what rang meanwhile.
// A pipe with no write end left is dead from then on.
func (b *bell) wait(until time.Time) {
	if err := b.f.SetReadDeadline(until); err != nil {
		b.dead.Store(true)
		return
	}
	_, err := b.f.Read(b.buf[:])
	if errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) {
		b.dead.Store(true)
	}
}

// cut wakes a wait in progress (the ring closed on this side).
func (b *bell) cut() { _ = b.f.SetReadDeadline(time.Unix(1, 0)) }

// UseDoorbell makes the reader park on f, the read end of a pipe in
// non-blocking mode, instead of the futex: the ring's writer must ring
// its write end (Writer.UseDoorbell), or a parked reader sleeps out each
// park (10 ms at most). Call it before the first Read. The reader does not
// close f.
func (rd *Reader) UseDoorbell(f *os.File) error { return rd.r.useBell(f) }

// UseDoorbell makes the writer wake a parked reader by writing to f, the
// write end of the pipe the reader parks on (Reader.UseDoorbell), instead
// of the futex. Call it before the first Write. The writer does not close
// f.
func (w *Writer) UseDoorbell(f *os.File) error { return w.r.useBell(f) }

// useBell makes f the side's doorbell.
func (r *ring) useBell(f *os.File) error {
	b, err := newBell(f)
	if err != nil {
		return err
	}
	r.bell = b
	return nil
}
