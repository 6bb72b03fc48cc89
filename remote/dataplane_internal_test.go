package remote

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lanesched/lanes/internal/shmring"
	"github.com/lanesched/lanes/internal/wirepb"
	dataplane "github.com/lanesched/lanes/remote/internal/dataplane"
	hostroom "github.com/lanesched/lanes/remote/internal/host"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
)

// planePair makes a segment as a host does and maps it as a front does.
func planePair(t *testing.T, ringBytes int) (host, front *dataplane.DataPlane, offer *wirepb.DataPlane) {
	t.Helper()
	host, offer, err := dataplane.MakePlane(ringBytes, 0)
	if err != nil {
		t.Fatalf("makePlane: got err %v, want nil", err)
	}
	t.Cleanup(host.Close)
	front, err = dataplane.AttachPlane(offer)
	if err != nil {
		t.Fatalf("attachPlane: got err %v, want nil", err)
	}
	t.Cleanup(front.Close)
	host.Held = func() bool { return true }
	front.Held = host.Held
	return host, front, offer
}

// TestAPlaneCarriesMessagesInOrder: what one side sends the other reads,
// whole and in order, small records and records in fragments mixed, a
// backlog included (the reader started late, the ring full meanwhile);
// closing one side ends the other's reading and unmaps both.
func TestAPlaneCarriesMessagesInOrder(t *testing.T) {
	host, front, _ := planePair(t, shmring.MinCapacity)
	var want []*wirepb.Submits
	for i := range 200 {
		m := &wirepb.Submits{Submits: []*wirepb.Submit{{Epoch: 7, Call: uint64(i), Tenant: "t"}}}
		if i%17 == 3 {
			m.Submits[0].Batch = &wirepb.Batch{Tenant: strings.Repeat("x", 3*shmring.MinCapacity)} // in fragments
		}
		want = append(want, m)
		if err := front.Send(dataplane.PlaneSubmits, m); err != nil {
			t.Fatalf("send %d: got err %v, want nil", i, err)
		}
	}
	if !host.StartReading() {
		t.Fatal("startReading: got false, want true")
	}
	var got []*wirepb.Submits
	var mu sync.Mutex
	done := make(chan error, 1)
	go func() {
		done <- host.Read(func(kind uint16, b []byte) error {
			m, err := dataplane.DecodePlane(kind, b, hostroom.HostReads)
			if err != nil {
				return err
			}
			mu.Lock()
			got = append(got, m.(*wirepb.Submits))
			n := len(got)
			mu.Unlock()
			if n == len(want) {
				front.Close()
			}
			return nil
		}, func() bool { return true })
	}()
	select {
	case err := <-done:
		if !errors.Is(err, dataplane.ErrPeerClosed) {
			t.Fatalf("read: got err %v, want errPeerClosed (the other side closed)", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("read: still reading 30 s on, want it ended by the other side's close")
	}
	if len(got) != len(want) {
		t.Fatalf("read %d messages, want %d", len(got), len(want))
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("message %d: got call %d, want call %d, the same", i, got[i].Submits[0].Call, want[i].Submits[0].Call)
		}
	}
	<-host.Done
	<-front.Done
	if err := front.Send(dataplane.PlaneSubmits, want[0]); !errors.Is(err, dataplane.ErrPlaneClosed) {
		t.Errorf("send on a closed plane: got %v, want errPlaneClosed", err)
	}
}

// TestAttachChecksTheSegment: a front maps only the segment its host
// offered: a memfd of this user, sealed so that no one can shrink it
// under the front's mapping, of the size its rings take, holding the
// Hello's nonce, at the host's /proc entry; anything else is refused
// with the reason; so are doorbells that are not pipes of the process
// holding the segment. The host itself cannot shrink what it offered.
func TestAttachChecksTheSegment(t *testing.T) {
	fresh := func() (*dataplane.DataPlane, *wirepb.DataPlane) {
		p, offer, err := dataplane.MakePlane(shmring.MinCapacity, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		return p, offer
	}
	p, _ := fresh()
	if err := unix.Ftruncate((*p.Offered.Load())[0], 4096); err == nil {
		t.Errorf("shrinking an offered segment: got nil, want the seal to refuse it")
	}
	unsealed := func(o *wirepb.DataPlane) {
		fd, err := unix.MemfdCreate("unsealed", unix.MFD_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = unix.Close(fd) })
		_ = unix.Ftruncate(fd, int64(dataplane.PlaneSize(shmring.MinCapacity, 0)))
		o.Path = fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), fd)
	}
	for name, c := range map[string]struct {
		spoil func(offer *wirepb.DataPlane)
		want  string
	}{
		"not sealed":           {unsealed, "not sealed"},
		"another nonce":        {func(o *wirepb.DataPlane) { o.Nonce = bytes.Repeat([]byte{1}, dataplane.PlaneNonce) }, "nonce differs"},
		"a short nonce":        {func(o *wirepb.DataPlane) { o.Nonce = o.Nonce[:8] }, "a nonce of 8 bytes"},
		"rings of no size":     {func(o *wirepb.DataPlane) { o.RingBytes = 1000 }, "rings of 1000 bytes"},
		"rings of another":     {func(o *wirepb.DataPlane) { o.RingBytes = 2 * shmring.MinCapacity }, "not the"},
		"a file elsewhere":     {func(o *wirepb.DataPlane) { o.Path = "/etc/passwd" }, "not a data plane's path"},
		"a path that climbs":   {func(o *wirepb.DataPlane) { o.Path = "/proc/1/fd/../../self/fd/0" }, "not a data plane's path"},
		"no such entry":        {func(o *wirepb.DataPlane) { o.Path = fmt.Sprintf("/proc/%d/fd/999999", os.Getpid()) }, "open"},
		"no doorbells":         {func(o *wirepb.DataPlane) { o.ToHostBell, o.ToFrontBell = "", "" }, "not a doorbell"},
		"a doorbell elsewhere": {func(o *wirepb.DataPlane) { o.ToFrontBell = "/etc/passwd" }, "not a doorbell"},
		"a doorbell of another process": {func(o *wirepb.DataPlane) {
			o.ToHostBell = strings.Replace(o.ToHostBell, fmt.Sprintf("/proc/%d/", os.Getpid()), "/proc/1/", 1)
		}, "not a doorbell of the process"},
		"a doorbell that is the segment": {func(o *wirepb.DataPlane) { o.ToHostBell = o.Path }, "not a pipe"},
		"a doorbell that is a file": {func(o *wirepb.DataPlane) {
			f, err := os.CreateTemp(t.TempDir(), "bell")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			var fd int
			raw, _ := f.SyscallConn()
			_ = raw.Control(func(v uintptr) { fd = int(v) })
			o.ToFrontBell = fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), fd)
		}, "not a pipe"},
		"no such doorbell": {func(o *wirepb.DataPlane) { o.ToFrontBell = fmt.Sprintf("/proc/%d/fd/999999", os.Getpid()) }, "open the doorbell"},
	} {
		_, offer := fresh()
		c.spoil(offer)
		p, err := dataplane.AttachPlane(offer)
		if err == nil {
			p.Close()
			t.Errorf("%s: got a plane, want it refused", name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want it saying %q", name, err, c.want)
		}
	}
}

// TestACorruptRingEndsThePlaneNotTheProcess: records no side would write
// (a kind the reader does not read, bytes that are no message, a header
// whose length runs past the ring) end the reading with the reason; the
// process reads nothing past the segment and the plane is shut.
func TestACorruptRingEndsThePlaneNotTheProcess(t *testing.T) {
	for name, corrupt := range map[string]func(front *dataplane.DataPlane){
		"an unknown kind": func(front *dataplane.DataPlane) { _ = front.Write(99, []byte{1, 2, 3}, time.Second, nil) },
		"no message": func(front *dataplane.DataPlane) {
			_ = front.Write(dataplane.PlaneSubmits, []byte{0xff, 0xff, 0xff}, time.Second, nil)
		},
		"a forged length": func(front *dataplane.DataPlane) {
			toHost, _ := dataplane.PlaneRings(front.Mem, shmring.MinCapacity)
			binary.LittleEndian.PutUint32(toHost[320:], 1<<30) // the first record's length
			binary.LittleEndian.PutUint64(toHost[0:], 64)      // published
		},
	} {
		host, front, _ := planePair(t, shmring.MinCapacity)
		corrupt(front)
		if !host.StartReading() {
			t.Fatal("startReading: got false")
		}
		err := host.Read(func(kind uint16, b []byte) error {
			_, err := dataplane.DecodePlane(kind, b, hostroom.HostReads)
			return err
		}, func() bool { return true })
		if err == nil {
			t.Errorf("%s: read ended with nil, want the reason", name)
		}
		if !host.Shut.Load() {
			t.Errorf("%s: the plane after a corrupt record: want it shut", name)
		}
		t.Logf("%s: %v", name, err)
	}
}

// TestARingThatStopsMovingIsALoss: a record that waits for room while the
// other side reads nothing (its reader stuck, its counters scribbled) is
// not waited on for ever: past planeStall the plane is shut and its owner
// told, and a side whose peer closed the plane learns it at once.
func TestARingThatStopsMovingIsALoss(t *testing.T) {
	old := dataplane.PlaneStall
	dataplane.PlaneStall = 200 * time.Millisecond
	t.Cleanup(func() { dataplane.PlaneStall = old })
	host, front, _ := planePair(t, shmring.MinCapacity)
	stalled := make(chan error, 1)
	host.Stalled = func(err error) { stalled <- err }
	for i := range 64 { // the front never reads: the ring fills, then the backlog
		m := &wirepb.Receipts{Receipts: []*wirepb.Receipt{{Epoch: 1, Call: uint64(i), Error: strings.Repeat("x", 200)}}}
		if err := host.Send(dataplane.PlaneReceipts, m); err != nil {
			t.Fatalf("send %d: got err %v, want nil (queued)", i, err)
		}
	}
	select {
	case err := <-stalled:
		t.Logf("stalled: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("a ring no one reads: got no stall after 10 s, want one after planeStall")
	}
	if !host.Shut.Load() {
		t.Error("the stalled plane: want it shut")
	}
	if !front.StartReading() {
		t.Fatal("startReading: got false")
	}
	n := 0
	err := front.Read(func(uint16, []byte) error { n++; return nil }, func() bool { return true })
	if !errors.Is(err, dataplane.ErrPeerClosed) {
		t.Errorf("the other side's read: got %v after %d records, want errPeerClosed (the records before it, then the close)", err, n)
	}
}

// TestPlanesLeaveNoDescriptorsBehind: segments and doorbells, taken or
// declined, read or never read, closed by either side, leave no open
// descriptor in the process once both sides let them go.
func TestPlanesLeaveNoDescriptorsBehind(t *testing.T) {
	count := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(entries)
	}
	before := count()
	for i := range 60 {
		host, offer, err := dataplane.MakePlane(shmring.MinCapacity, 4096)
		if err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 { // offered, never taken
			host.Close()
			continue
		}
		front, err := dataplane.AttachPlane(offer)
		if err != nil {
			t.Fatal(err)
		}
		host.Release() // the Welcome came
		host.Held, front.Held = func() bool { return true }, func() bool { return true }
		if i%3 == 1 { // both read, the front closes
			for _, p := range []*dataplane.DataPlane{host, front} {
				if !p.StartReading() {
					t.Fatal("startReading: got false")
				}
				go func() { _ = p.Read(func(uint16, []byte) error { return nil }, func() bool { return true }) }()
			}
			front.Close()
		} else { // never read, the host closes first
			host.Close()
			front.Close()
		}
		<-host.Done
		<-front.Done
	}
	if after := count(); after != before {
		t.Fatalf("open descriptors: %d before, %d after 60 planes came and went", before, after)
	}
}
