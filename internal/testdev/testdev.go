// Package testdev helps tests that drive a device directly set up what a
// program would: buffers whose bytes were written before anything reads
// them (the simulated device reports a read of bytes never written under
// its InitCheck, which the project's test command turns on).
package testdev

import (
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
)

// Zero writes zeros over each buffer, on a stream of its own, and waits
// for them: what a program does before its first step reads a buffer.
func Zero(t testing.TB, d cuda.Device, bufs ...cuda.Buffer) {
	t.Helper()
	dev := backend.Must(d)
	err := cuda.Bound(dev, func() error {
		st, err := dev.NewStream()
		if err != nil {
			return err
		}
		defer func() { _ = st.Destroy() }()
		for _, b := range bufs {
			z, err := cuda.Zero(b.Whole())
			if err != nil {
				return err
			}
			if err := st.Enqueue(z); err != nil {
				return err
			}
		}
		return st.Synchronize()
	})
	if err != nil {
		t.Fatalf("zeroing %d buffers: got err %v, want nil", len(bufs), err)
	}
}

// Device is a simulated device with everything a lane drives on it: what
// a test wrapper embeds to stand in for one (a wrapper of a sim.Device
// alone is refused by a scheduler, which drives streams).
type Device interface {
	sim.Device
	backend.Device
	backend.HostPinner
	backend.HostView
	ExecBytes(nodes int) int64
}

// Sim is d as a [Device].
func Sim(d sim.Device) Device { return d.(Device) }
