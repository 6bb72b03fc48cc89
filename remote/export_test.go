package remote

import (
	"crypto/tls"
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
