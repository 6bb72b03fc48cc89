package remote

import (
	"crypto/tls"
	"os"
	"strings"
	"time"

	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/lanes"
	front "github.com/lanesched/lanes/remote/internal/front"

	dataplane "github.com/lanesched/lanes/remote/internal/dataplane"

	system "github.com/lanesched/lanes/remote/internal/system"

	wire "github.com/lanesched/lanes/remote/internal/wire"
)

// LocalTLSOf is the TLS configuration a process holding the token of that
// file speaks with (a fresh key each call), for tests that talk to
// endpoints by hand.
func LocalTLSOf(tokenFile string) (*tls.Config, error) {
	t, err := system.LoadToken(tokenFile)
	if err != nil {
		return nil, err
	}
	return system.LocalTLS(t)
}

// CorruptPlane writes a record no front would write (a forged length)
// into the front's data plane to the host named, for tests of a corrupt
// ring; false if the link has none.
func CorruptPlane(f *Front, host string) bool {
	for _, l := range f.f.AllLinks() {
		if l.Name != host {
			continue
		}
		lp := l.Plane.Load()
		if lp == nil {
			return false
		}
		// A Submits record whose bytes claim a field far longer than the
		// record: the host decodes nothing of it.
		return lp.P.Write(dataplane.PlaneSubmits, []byte{0x0a, 0xff, 0xff, 0xff, 0x7f, 1, 2}, time.Second, nil) == nil
	}
	return false
}

// PlaneMappings counts the data-plane segments this process maps.
func PlaneMappings() int {
	b, _ := os.ReadFile("/proc/self/maps")
	return strings.Count(string(b), "memfd:lanes-data-plane")
}

// What remote's own tests (package remote_test) reach that users do not.

// OnWithdraw has fn called with a submission's Pending once the front
// queued its Withdraw for the host (nil: no one is), and returns how to
// undo it.
func OnWithdraw(fn func(lanes.Pending)) (undo func()) {
	f := func(p *front.Pending) { fn(p) }
	front.AfterWithdraw.Store(&f)
	return func() { front.AfterWithdraw.Store(nil) }
}

// Calls is the table of calls in flight, by host, epoch and id.
type Calls[T any] = front.CallTable[T]

// The wire's codecs and the registration check.
var (
	BatchToWire     = wire.BatchToWire
	ReceiptToWire   = wire.ReceiptToWire
	ReceiptFromWire = wire.ReceiptFromWire
	RowsToWire      = wire.RowsToWire
	SegmentsToWire  = wire.SegmentsToWire
	CheckHello      = wire.CheckHello
)

// The names of the front's and the host's actors.
const (
	FrontActor = wire.FrontActorName
	HostActor  = wire.HostActorName
)

// BatchFromWire decodes a batch as a host does with no data plane.
func BatchFromWire(w *wirepb.Batch) (lanes.Batch, error) {
	return wire.BatchFromWire(w, wire.Decoding{})
}

// The wire's limits and protocol version, for tests at the limits.
const (
	MaxBoundaries = wire.MaxBoundaries
	MaxPatches    = wire.MaxPatches
)
