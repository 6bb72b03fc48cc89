package remote

import (
	"crypto/tls"
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/lanes"
	"os"
	"strings"
	"time"
)

// LocalTLSOf is the TLS configuration a process holding the token of that
// file speaks with (a fresh key each call), for tests that talk to
// endpoints by hand.
func LocalTLSOf(tokenFile string) (*tls.Config, error) {
	t, err := loadToken(tokenFile)
	if err != nil {
		return nil, err
	}
	return localTLS(t)
}

// CorruptPlane writes a record no front would write (a forged length)
// into the front's data plane to the host named, for tests of a corrupt
// ring; false if the link has none.
func CorruptPlane(f *Front, host string) bool {
	for _, l := range f.allLinks() {
		if l.name != host {
			continue
		}
		lp := l.plane.Load()
		if lp == nil {
			return false
		}
		// A Submits record whose bytes claim a field far longer than the
		// record: the host decodes nothing of it.
		return lp.p.write(planeSubmits, []byte{0x0a, 0xff, 0xff, 0xff, 0x7f, 1, 2}, time.Second, nil) == nil
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
	f := func(p *pending) { fn(p) }
	afterWithdraw.Store(&f)
	return func() { afterWithdraw.Store(nil) }
}

// Calls is the table of calls in flight, by host, epoch and id.
type Calls[T any] = callTable[T]

// The wire's codecs and the registration check.
var (
	BatchToWire     = batchToWire
	ReceiptToWire   = receiptToWire
	ReceiptFromWire = receiptFromWire
	RowsToWire      = rowsToWire
	SegmentsToWire  = segmentsToWire
	CheckHello      = checkHello
)

// The names of the front's and the host's actors.
const (
	FrontActor = frontActorName
	HostActor  = hostActorName
)

// BatchFromWire decodes a batch as a host does with no data plane.
func BatchFromWire(w *wirepb.Batch) (lanes.Batch, error) { return batchFromWire(w, decoding{}) }
