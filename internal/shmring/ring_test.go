package shmring

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// region is a zeroed, 8-byte aligned ring region of capacity.
func region(t testing.TB, capacity int) []byte {
	t.Helper()
	words := make([]uint64, (Size(capacity)+7)/8)
	mem := unsafeBytes(words)[:Size(capacity)]
	if err := Init(mem, capacity); err != nil {
		t.Fatal(err)
	}
	return mem
}

// sides attaches a writer and a reader to a ring region.
func sides(t *testing.T, mem []byte) (*Writer, *Reader) {
	t.Helper()
	w, err := NewWriter(mem)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := NewReader(mem)
	if err != nil {
		t.Fatal(err)
	}
	return w, rd
}

// TestRingAgainstAModel: records of every size, fragments included, come
// out in order and whole, as a plain queue would give them, over many
// wraps of the ring, with writer and reader on their own goroutines.
func TestRingAgainstAModel(t *testing.T) {
	for _, capacity := range []int{MinCapacity, 64 << 10} {
		w, rd := sides(t, region(t, capacity))
		r := rand.New(rand.NewPCG(uint64(capacity), 1))
		var model [][]byte
		for range 3000 {
			n := r.IntN(64)
			switch r.IntN(10) {
			case 0:
				n = r.IntN(3 * capacity) // fragments
			case 1:
				n = capacity/4 - recordHeader - r.IntN(16)
			}
			p := make([]byte, n)
			for i := range p {
				p[i] = byte(r.Uint32())
			}
			model = append(model, p)
		}
		done := make(chan error, 1)
		go func() {
			for i, p := range model {
				if err := w.Write(uint16(i%7+1), p, 10*time.Second); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		for i, want := range model {
			kind, got, err := rd.Read(10 * time.Second)
			if err != nil {
				t.Fatalf("capacity %d: record %d: got err %v, want it", capacity, i, err)
			}
			if kind != uint16(i%7+1) || !bytes.Equal(got, want) {
				t.Fatalf("capacity %d: record %d: got kind %d, %d bytes; want kind %d, %d bytes, the same", capacity, i, kind, len(got), i%7+1, len(want))
			}
		}
		if err := <-done; err != nil {
			t.Fatalf("capacity %d: the writer: got err %v, want nil", capacity, err)
		}
	}
}

// TestPendingSaysWhetherARecordWaits: Pending is true from a record's
// write to its read, and false on an empty ring.
func TestPendingSaysWhetherARecordWaits(t *testing.T) {
	mem := region(t, MinCapacity)
	w, _ := NewWriter(mem)
	rd, _ := NewReader(mem)
	if rd.Pending() {
		t.Fatal("a new ring: Pending true, want false")
	}
	for i := range 3 {
		if err := w.Write(1, []byte{byte(i)}, time.Second); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if !rd.Pending() {
			t.Fatalf("before record %d's read: Pending false, want true", i)
		}
		if _, _, err := rd.Read(time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if rd.Pending() {
		t.Fatal("every record read: Pending true, want false")
	}
}

// TestRingTimesOutAndCloses: a reader with nothing to read, and a writer
// with no room, wait their timeout and no longer; a closed ring ends both.
func TestRingTimesOutAndCloses(t *testing.T) {
	mem := region(t, MinCapacity)
	w, _ := NewWriter(mem)
	rd, _ := NewReader(mem)
	start := time.Now()
	if _, _, err := rd.Read(20 * time.Millisecond); !errors.Is(err, ErrTimeout) || time.Since(start) > 5*time.Second {
		t.Fatalf("Read of an empty ring: got %v after %v, want ErrTimeout after about 20ms", err, time.Since(start))
	}
	for w.Write(1, make([]byte, 512), time.Millisecond) == nil {
	}
	if err := w.Write(1, make([]byte, 512), 20*time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Write to a full ring: got %v, want ErrTimeout", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := w.Write(1, make([]byte, 512), 10*time.Second); !errors.Is(err, ErrClosed) {
			t.Errorf("a Write waiting for room when the ring closes: got %v, want ErrClosed", err)
		}
	})
	time.Sleep(20 * time.Millisecond)
	rd.Close()
	wg.Wait()
	if _, _, err := rd.Read(time.Second); !errors.Is(err, ErrClosed) && err != nil {
		t.Fatalf("Read of a closed ring: got %v, want a record left or ErrClosed", err)
	}
}

// TestRingClosedAfterRecordsGivesThemFirst: a writer that writes and then
// closes the ring (a side's last word before it goes) has every record
// read before the reader sees the close, however the two interleave.
func TestRingClosedAfterRecordsGivesThemFirst(t *testing.T) {
	for round := range 2000 {
		mem := region(t, MinCapacity)
		w, _ := NewWriter(mem)
		rd, _ := NewReader(mem)
		records := round%3 + 1
		go func() {
			for i := range records {
				_ = w.Write(uint16(i+1), []byte{byte(i)}, time.Second)
			}
			w.Close()
		}()
		for i := range records {
			kind, got, err := rd.Read(10 * time.Second)
			if err != nil || kind != uint16(i+1) || !bytes.Equal(got, []byte{byte(i)}) {
				t.Fatalf("round %d: record %d of %d: got kind %d, %v, err %v; want kind %d, [%d], nil (a record written before the close is read)", round, i, records, kind, got, err, i+1, i)
			}
		}
		if _, _, err := rd.Read(10 * time.Second); !errors.Is(err, ErrClosed) {
			t.Fatalf("round %d: after the records: got %v, want ErrClosed", round, err)
		}
	}
}

// TestAReadResumesARecordWhoseWriterStopped: a Read that times out
// between two fragments of a record (its writer stopped: SIGSTOP) is a
// timeout, not a corrupt ring, and the next Read returns the whole record
// once the writer goes on; a ring closed in the middle of one is closed.
func TestAReadResumesARecordWhoseWriterStopped(t *testing.T) {
	mem := region(t, MinCapacity)
	w, _ := NewWriter(mem)
	rd, _ := NewReader(mem)
	if err := w.record(3, flagMore, []byte("first half, "), time.Second); err != nil {
		t.Fatal(err)
	}
	if _, _, err := rd.Read(20 * time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Read with a record's first fragment only: got %v, want ErrTimeout (its writer may only be stopped)", err)
	}
	if err := w.record(3, 0, []byte("second half"), time.Second); err != nil {
		t.Fatal(err)
	}
	kind, got, err := rd.Read(time.Second)
	if err != nil || kind != 3 || string(got) != "first half, second half" {
		t.Fatalf("the Read after the writer went on: got kind %d, %q, err %v; want kind 3, the whole record", kind, got, err)
	}
	if err := w.record(4, flagMore, []byte("cut"), time.Second); err != nil {
		t.Fatal(err)
	}
	if _, _, err := rd.Read(20 * time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Read with a record begun: got %v, want ErrTimeout", err)
	}
	w.Close()
	if _, _, err := rd.Read(time.Second); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read of a ring closed in the middle of a record: got %v, want ErrClosed", err)
	}
}

// TestRingRefusesBadLayouts: Init and attaching check what they are given.
func TestRingRefusesBadLayouts(t *testing.T) {
	for _, c := range []int{0, 1000, MinCapacity / 2, MaxCapacity * 2} {
		if err := Init(make([]byte, Size(MinCapacity)), c); err == nil {
			t.Errorf("Init with capacity %d: got nil, want an error", c)
		}
	}
	mem := region(t, MinCapacity)
	if _, err := NewReader(mem[:Size(MinCapacity)-8]); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a region shorter than its capacity says: got %v, want ErrCorrupt", err)
	}
	binary.LittleEndian.PutUint64(mem[offCapacity:], 12345)
	if _, err := NewWriter(mem); !errors.Is(err, ErrCorrupt) {
		t.Errorf("a capacity that is not a power of two: got %v, want ErrCorrupt", err)
	}
}

// FuzzReader: whatever the other side wrote into the region, reading it
// gives records within it, or an error: never a panic, never a read
// past the region.
func FuzzReader(f *testing.F) {
	f.Add([]byte{}, uint64(0), uint64(16))
	f.Add([]byte{16, 0, 0, 0, 1, 0, 0, 0}, uint64(0), uint64(24))
	f.Add([]byte{255, 255, 255, 255, 1, 0, 2, 0}, uint64(0), uint64(4096))
	f.Fuzz(func(t *testing.T, data []byte, tail, head uint64) {
		mem := region(t, MinCapacity)
		copy(mem[headerSize:], data)
		binary.LittleEndian.PutUint64(mem[offTail:], tail)
		binary.LittleEndian.PutUint64(mem[offHead:], head)
		rd, err := NewReader(mem)
		if err != nil {
			return
		}
		for range 8 {
			_, p, err := rd.Read(time.Millisecond)
			if err != nil {
				return
			}
			if len(p) > MaxRecord {
				t.Fatalf("a record of %d bytes, past MaxRecord", len(p))
			}
		}
	})
}

// TestSpinnersAreBounded: while as many sides spin as may, another side
// that waits parks at once (its park flag up) instead of taking one more
// core; both still read what is written to them.
func TestSpinnersAreBounded(t *testing.T) {
	oldSpin, oldMax := spin, maxSpinners
	spin, maxSpinners = time.Minute, 1
	defer func() { spin, maxSpinners = oldSpin, oldMax }()
	spinning, parking := region(t, MinCapacity), region(t, MinCapacity)
	var wg sync.WaitGroup
	read := func(mem []byte) {
		rd, _ := NewReader(mem)
		wg.Go(func() {
			if _, _, err := rd.Read(time.Minute); err != nil {
				t.Errorf("Read: %v", err)
			}
		})
	}
	waitFor := func(what string, cond func() bool) {
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s (spinners: %d)", what, spinners.Load())
			}
		}
	}
	read(spinning)
	waitFor("the first reader never spun", func() bool { return spinners.Load() == 1 })
	read(parking)
	parked := (&ring{mem: parking}).u32(offReaderPark)
	waitFor("a reader past the bound of one spinner did not park", func() bool { return atomic.LoadUint32(parked) == 1 })
	if n := spinners.Load(); n != 1 {
		t.Fatalf("spinners %d while one spins and one parked, want 1", n)
	}
	for _, mem := range [][]byte{parking, spinning} {
		w, _ := NewWriter(mem)
		if err := w.Write(1, []byte("x"), time.Second); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if n := spinners.Load(); n != 0 {
		t.Fatalf("spinners %d after both reads ended, want 0", n)
	}
}

// TestSpinKeepsTheTimeout: a side never spins past its caller's timeout
// (a Write that may not wait tries once, however long the spin window).
func TestSpinKeepsTheTimeout(t *testing.T) {
	oldSpin := spin
	spin = time.Minute
	defer func() { spin = oldSpin }()
	mem := region(t, MinCapacity)
	w, _ := NewWriter(mem)
	rd, _ := NewReader(mem)
	start := time.Now()
	if _, _, err := rd.Read(0); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Read(0) of an empty ring: got %v, want ErrTimeout", err)
	}
	if _, _, err := rd.Read(20 * time.Millisecond); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Read(20ms) of an empty ring: got %v, want ErrTimeout", err)
	}
	for w.Write(1, make([]byte, 512), 0) == nil {
	}
	if err := w.Write(1, make([]byte, 512), 0); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Write(0) to a full ring: got %v, want ErrTimeout", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("three waits bounded by 0, 20 ms and 0 took %v with a spin window of a minute", d)
	}
}
