//go:build !linux

// Elsewhere, no futex: a parked side sleeps a little and looks again.

package shmring

import (
	"sync/atomic"
	"time"
)

func futexWait(addr *uint32, val uint32, d time.Duration) {
	for end := time.Now().Add(d); atomic.LoadUint32(addr) == val && time.Now().Before(end); {
		time.Sleep(50 * time.Microsecond)
	}
}

func futexWake(*uint32) {}
