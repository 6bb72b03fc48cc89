// A data plane's segment: anonymous shared memory (a memfd) the host makes
// and seals, which the front opens through the host's /proc entry for it.
// It has no name: nothing is left behind on the machine when either side
// dies, and only a process of the same user (which may open another's
// /proc/PID/fd) can reach it.

package dataplane

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"os"
	"regexp"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/lanesched/lanes/internal/shmring"
	"github.com/lanesched/lanes/internal/wirepb"
)

// procFD is the form of a segment's path: the host's /proc entry of its
// memfd.
var procFD = regexp.MustCompile(`^/proc/[1-9][0-9]{0,9}/fd/[0-9]{1,9}$`)

// planeSeals are the seals a segment carries before it is offered: no one,
// the host included, can shrink it under the other side's mapping (a
// fault in that process), grow it, or change the seals.
const planeSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// MakePlane makes a segment for a registration: a memfd of the size its
// rings and upload area take, its pages reserved (so that a machine out of memory fails
// here, not as a fault later), sealed, mapped, its rings laid out. Its fd
// stays open for the front to open it; release closes it.
func MakePlane(ringBytes, areaBytes int) (*DataPlane, *wirepb.DataPlane, error) {
	var nonce [PlaneNonce]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, nil, err
	}
	fd, err := unix.MemfdCreate("lanes-data-plane", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, nil, fmt.Errorf("memfd_create: %w", err)
	}
	size := PlaneSize(ringBytes, areaBytes)
	fail := func(what string, err error) (*DataPlane, *wirepb.DataPlane, error) {
		_ = unix.Close(fd)
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := unix.Fallocate(fd, 0, 0, int64(size)); err != nil {
		return fail(fmt.Sprintf("reserve %d bytes", size), err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, planeSeals); err != nil {
		return fail("seal", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("map", err)
	}
	copy(mem, planeMagic)
	binary.LittleEndian.PutUint64(mem[offPlaneRing:], uint64(ringBytes))
	binary.LittleEndian.PutUint64(mem[offPlaneArea:], uint64(areaBytes))
	copy(mem[offNonce:], nonce[:])
	toHost, toFront := PlaneRings(mem, ringBytes)
	for _, ring := range [][]byte{toHost, toFront} {
		if err := shmring.Init(ring, ringBytes); err != nil {
			_ = unix.Munmap(mem)
			return fail("lay out", err)
		}
	}
	// The doorbells: the host reads the front's (toHost) and writes its
	// own (toFront); the other ends wait for the front.
	var toHostBell, toFrontBell [2]int
	if err := unix.Pipe2(toHostBell[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		_ = unix.Munmap(mem)
		return fail("make a doorbell", err)
	}
	if err := unix.Pipe2(toFrontBell[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		closeFDs(toHostBell[:])
		_ = unix.Munmap(mem)
		return fail("make a doorbell", err)
	}
	park, ring := os.NewFile(uintptr(toHostBell[0]), "doorbell"), os.NewFile(uintptr(toFrontBell[1]), "doorbell")
	p, err := newPlane(mem, toFront, toHost, park, ring)
	if err != nil {
		_, _ = park.Close(), ring.Close()
		closeFDs([]int{toHostBell[1], toFrontBell[0]})
		_ = unix.Munmap(mem)
		return fail("attach", err)
	}
	if areaBytes > 0 {
		p.Area = planeArea(mem, ringBytes)
	}
	p.Offered.Store(&[]int{fd, toHostBell[1], toFrontBell[0]})
	proc := func(fd int) string { return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), fd) }
	return p, &wirepb.DataPlane{Path: proc(fd), Nonce: nonce[:], RingBytes: uint64(ringBytes), UploadAreaBytes: uint64(areaBytes),
		ToHostBell: proc(toHostBell[1]), ToFrontBell: proc(toFrontBell[0])}, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}

// openBell opens a doorbell the host offered (flags: O_WRONLY for the
// one the front rings, O_RDONLY for the one it parks on), checking it is
// a pipe of this user's held by the process that holds the segment.
func openBell(path, segment string, flags int) (*os.File, error) {
	if !procFD.MatchString(path) || strings.Split(path, "/")[2] != strings.Split(segment, "/")[2] {
		return nil, fmt.Errorf("%q is not a doorbell of the process holding %s", path, segment)
	}
	fd, err := unix.Open(path, flags|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the doorbell %s: %w", path, err)
	}
	var st unix.Stat_t
	switch err := unix.Fstat(fd, &st); {
	case err != nil:
		_ = unix.Close(fd)
		return nil, fmt.Errorf("stat the doorbell %s: %w", path, err)
	case st.Mode&unix.S_IFMT != unix.S_IFIFO:
		_ = unix.Close(fd)
		return nil, fmt.Errorf("the doorbell %s is not a pipe", path)
	case int(st.Uid) != os.Getuid():
		_ = unix.Close(fd)
		return nil, fmt.Errorf("the doorbell %s belongs to uid %d, not this user (%d)", path, st.Uid, os.Getuid())
	}
	return os.NewFile(uintptr(fd), path), nil
}

// AttachPlane maps a host's offered segment on the front's side, after
// checking it is what the host said: a /proc entry of a memfd this user's
// process holds, sealed against shrinking, of the size its rings take,
// holding the Hello's nonce. An error says why the front will not use it.
func AttachPlane(offer *wirepb.DataPlane) (*DataPlane, error) {
	ringBytes := int(min(offer.RingBytes, 1<<31))
	if err := CheckRingBytes(ringBytes); err != nil {
		return nil, fmt.Errorf("rings of %d bytes offered", offer.RingBytes)
	}
	areaBytes := int(min(offer.UploadAreaBytes, 1<<31))
	if err := CheckUploadArea(areaBytes); err != nil {
		return nil, fmt.Errorf("an upload area of %d bytes offered", offer.UploadAreaBytes)
	}
	if len(offer.Nonce) != PlaneNonce {
		return nil, fmt.Errorf("a nonce of %d bytes", len(offer.Nonce))
	}
	if !procFD.MatchString(offer.Path) {
		return nil, fmt.Errorf("%q is not a data plane's path", offer.Path)
	}
	fd, err := unix.Open(offer.Path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w (the host let this registration go already, or it is on another machine, in another PID namespace, or of another user)", offer.Path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", offer.Path, err)
	}
	size := PlaneSize(ringBytes, areaBytes)
	seals, sealErr := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, fmt.Errorf("%s is not a memory file", offer.Path)
	case int(st.Uid) != os.Getuid():
		return nil, fmt.Errorf("%s belongs to uid %d, not this user (%d)", offer.Path, st.Uid, os.Getuid())
	case sealErr != nil || seals&planeSeals != planeSeals:
		return nil, fmt.Errorf("%s is not sealed against shrinking (seals %#x, %v): its owner could fault this process", offer.Path, seals, sealErr)
	case st.Size != int64(size):
		return nil, fmt.Errorf("%s holds %d bytes, not the %d its rings and upload area take", offer.Path, st.Size, size)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map %s: %w", offer.Path, err)
	}
	if string(mem[:len(planeMagic)]) != planeMagic || binary.LittleEndian.Uint64(mem[offPlaneRing:]) != uint64(ringBytes) ||
		binary.LittleEndian.Uint64(mem[offPlaneArea:]) != uint64(areaBytes) ||
		subtle.ConstantTimeCompare(mem[offNonce:offNonce+PlaneNonce], offer.Nonce) != 1 {
		_ = unix.Munmap(mem)
		return nil, fmt.Errorf("%s is not the segment the host offered (its header or nonce differs)", offer.Path)
	}
	ring, err := openBell(offer.ToHostBell, offer.Path, unix.O_WRONLY)
	if err != nil {
		_ = unix.Munmap(mem)
		return nil, err
	}
	park, err := openBell(offer.ToFrontBell, offer.Path, unix.O_RDONLY)
	if err != nil {
		_ = ring.Close()
		_ = unix.Munmap(mem)
		return nil, err
	}
	toHost, toFront := PlaneRings(mem, ringBytes)
	p, err := newPlane(mem, toHost, toFront, park, ring)
	if err != nil {
		_, _ = park.Close(), ring.Close()
		_ = unix.Munmap(mem)
		return nil, fmt.Errorf("%s: %w", offer.Path, err)
	}
	if areaBytes > 0 {
		p.Area = planeArea(mem, ringBytes)
		p.Spans = NewAreaSpans(uint64(areaBytes))
	}
	return p, nil
}

// Release closes the host's fd of the segment and the doorbells' ends
// that were the front's (its mapping and its own ends stay): once
// the front opened it, or will not, no one needs it.
func (p *DataPlane) Release() {
	if fds := p.Offered.Swap(nil); fds != nil {
		closeFDs(*fds)
	}
}
