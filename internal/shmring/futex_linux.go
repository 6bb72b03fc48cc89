// Parking on a word of shared memory: Linux futexes work across processes
// that map the same pages (the word is not private to one process).

package shmring

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	futexWaitOp = 0 // FUTEX_WAIT, shared
	futexWakeOp = 1 // FUTEX_WAKE, shared
)

// futexWait parks while *addr is val, for at most d (or until woken, or a
// signal: the caller checks again either way).
func futexWait(addr *uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes every waiter parked on addr.
func futexWake(addr *uint32) {
	_, _, _ = unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, uintptr(1<<31-1), 0, 0, 0)
}
