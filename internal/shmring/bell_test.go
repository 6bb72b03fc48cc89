package shmring

import (
	"errors"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// belled is a ring whose reader parks on a doorbell its writer rings, and
// parks for up to an hour at a time: a Read that returns was woken by the
// bell (or a close), never by the park's bound.
func belled(t *testing.T) (*Writer, *Reader, *os.File, *os.File) {
	t.Helper()
	before := parkAtMost
	parkAtMost = time.Hour
	t.Cleanup(func() { parkAtMost = before })
	w, rd := sides(t, region(t, MinCapacity))
	pr, pw, err := os.Pipe() // both ends non-blocking, in the poller
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pr.Close(); pw.Close() })
	if err := rd.UseDoorbell(pr); err != nil {
		t.Fatal(err)
	}
	if err := w.UseDoorbell(pw); err != nil {
		t.Fatal(err)
	}
	return w, rd, pr, pw
}

// parked waits until the reader raised its park flag.
func parked(t *testing.T, rd *Reader) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		if atomic.LoadUint32(rd.r.u32(offReaderPark)) != 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the reader never parked")
		}
	}
}

// TestADoorbellWakesAParkedReader: records written while the reader is
// parked on its doorbell reach it, thousands of times over, in order.
func TestADoorbellWakesAParkedReader(t *testing.T) {
	w, rd, _, _ := belled(t)
	const n = 2000
	got := make(chan error, 1)
	go func() {
		for i := range n {
			k, p, err := rd.Read(time.Minute)
			if err != nil {
				got <- err
				return
			}
			if k != 1 || len(p) != 1 || p[0] != byte(i) {
				got <- errors.New("a record out of order")
				return
			}
		}
		got <- nil
	}()
	for i := range n {
		if i%100 == 0 {
			parked(t, rd) // now and then, surely parked before the write
		}
		if err := w.Write(1, []byte{byte(i)}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// TestClosingWakesAReaderParkedOnItsDoorbell: either side's close ends a
// parked Read with ErrClosed, at once rather than at the park's bound.
func TestClosingWakesAReaderParkedOnItsDoorbell(t *testing.T) {
	for _, side := range []string{"reader", "writer"} {
		t.Run(side, func(t *testing.T) {
			w, rd, _, _ := belled(t)
			got := make(chan error, 1)
			go func() { _, _, err := rd.Read(time.Hour); got <- err }()
			parked(t, rd)
			if side == "reader" {
				rd.Close()
			} else {
				w.Close()
			}
			select {
			case err := <-got:
				if !errors.Is(err, ErrClosed) {
					t.Fatalf("got %v, want ErrClosed", err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the parked reader was not woken")
			}
		})
	}
}

// TestADeadDoorbellFallsBackToTheFutex: a doorbell whose every write end
// closed (the other side went) reads as the end of the file; the reader
// parks on the futex from then on, and a writer without a doorbell still
// wakes it.
func TestADeadDoorbellFallsBackToTheFutex(t *testing.T) {
	_, rd, _, pw := belled(t)
	mem := rd.r.mem
	plain, err := NewWriter(mem)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { _, _, err := rd.Read(time.Hour); got <- err }()
	parked(t, rd)
	pw.Close() // the reader sees the end of its doorbell, then parks on the futex
	for deadline := time.Now().Add(30 * time.Second); !rd.r.bell.dead.Load(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the doorbell's end was not seen")
		}
	}
	parked(t, rd)
	if err := plain.Write(1, []byte("x"), time.Minute); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the reader on the futex was not woken")
	}
}

// TestADoorbellMustBeAPipeThePollerHolds: a regular file, or a pipe in
// blocking mode, is refused.
func TestADoorbellMustBeAPipeThePollerHolds(t *testing.T) {
	mem := region(t, MinCapacity)
	rd, err := NewReader(mem)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(t.TempDir(), "bell")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := rd.UseDoorbell(f); err == nil {
		t.Fatal("a regular file taken as a doorbell")
	}
	if err := rd.UseDoorbell(nil); err == nil {
		t.Fatal("no file taken as a doorbell")
	}
	var fds [2]int
	if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	blocking, other := os.NewFile(uintptr(fds[0]), "blocking"), os.NewFile(uintptr(fds[1]), "other")
	defer blocking.Close()
	defer other.Close()
	if err := rd.UseDoorbell(blocking); err == nil {
		t.Fatal("a pipe in blocking mode taken as a doorbell")
	}
}
