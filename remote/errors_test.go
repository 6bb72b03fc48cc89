package remote_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/codes"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/remote"
)

// TestEveryErrorIsClassified: every error remote returns has its row in
// cuda.Classify, as its doc says: its code, whose fault, whether to retry,
// whether anything was submitted. Wrapped, as remote returns them, too.
func TestEveryErrorIsClassified(t *testing.T) {
	for _, c := range []struct {
		name         string
		err          error
		code         cuda.Code
		blame        cuda.Blame
		retryable    bool
		notSubmitted bool
	}{
		{"ErrHostLost (may or may not have run)", remote.ErrHostLost, codes.HostLost, cuda.BlameStream, false, false},
		{"a *HostLostError", &remote.HostLostError{Host: "h", Epoch: 1, Cause: "heartbeat"}, codes.HostLost, cuda.BlameStream, false, false},
		{"ErrDeviceStateLost (Forget, set up again; not submitted)", remote.ErrDeviceStateLost, codes.DeviceStateLost, cuda.BlameNone, false, true},
		{"a *DeviceStateLostError", &remote.DeviceStateLostError{Tenant: "t", Host: "h"}, codes.DeviceStateLost, cuda.BlameNone, false, true},
		{"a *DeviceStateLostError of a host that left", &remote.DeviceStateLostError{Tenant: "t", Host: "h", Left: true}, codes.DeviceStateLost, cuda.BlameNone, false, true},
		{"ErrHostLeaving (not submitted; move)", remote.ErrHostLeaving, codes.HostLeaving, cuda.BlameNone, true, true},
		{"a *HostLeavingError", &remote.HostLeavingError{Tenant: "t", Host: "h"}, codes.HostLeaving, cuda.BlameNone, true, true},
		{"ErrNoHost (retry later; not submitted)", remote.ErrNoHost, codes.NoHost, cuda.BlameNone, true, true},
		{"ErrRefused", remote.ErrRefused, codes.RegistrationRefused, cuda.BlameNone, false, true},
		{"a *RefusedError for good (another protocol)", &remote.RefusedError{Host: "h", Reason: "protocol 3"}, codes.RegistrationRefused, cuda.BlameNone, false, true},
		{"a *RefusedError for now (the host is full)", &remote.RefusedError{Host: "h", Reason: "it serves 8 fronts", ForNow: true}, codes.RegistrationRefused, cuda.BlameNone, true, true},
		{"ErrStopped", remote.ErrStopped, codes.Stopped, cuda.BlameNone, false, true},
		{"ErrConfig", remote.ErrConfig, codes.InvalidArgument, cuda.BlameCaller, false, true},
		{"ErrWire", remote.ErrWire, codes.WireUnsupported, cuda.BlameCaller, false, true},
		{"ErrUnauthenticated", remote.ErrUnauthenticated, codes.Unauthenticated, cuda.BlameCaller, false, true},
		{"a *PeerError (the host's own error, its code)", &remote.PeerError{Code: codes.Overloaded, Msg: "actors: overloaded"}, codes.Overloaded, cuda.BlameNone, true, true},
	} {
		for _, err := range []error{c.err, fmt.Errorf("remote: host h: %w", c.err)} {
			got := cuda.Classify(err)
			if got.Code != c.code || got.Blame != c.blame || got.Retryable != c.retryable || got.NotSubmitted != c.notSubmitted {
				t.Errorf("Classify(%s: %v): got %+v, want code %v, blame %v, retryable %v, not submitted %v", c.name, err, got, c.code, c.blame, c.retryable, c.notSubmitted)
			}
		}
	}
	// And as remote returns them.
	_, err := remote.StartFront(context.Background(), remote.FrontConfig{})
	if c := cuda.Classify(err); !errors.Is(err, remote.ErrConfig) || c.Code != codes.InvalidArgument || !c.NotSubmitted {
		t.Errorf("StartFront with no hosts: got %v (%+v), want ErrConfig, invalid_argument, not submitted", err, c)
	}
	call := cuda.Command{Kind: cuda.KindCall} // a call command that declares no call
	var f *remote.Front
	_, err = f.Encode(lanes.Batch{Entries: []lanes.Entry{{Command: call}}})
	if c := cuda.Classify(err); !errors.Is(err, remote.ErrWire) || c.Code != codes.WireUnsupported || c.Blame != cuda.BlameCaller || !c.NotSubmitted {
		t.Errorf("Encode of a call command without its LibraryCall: got %v (%+v), want ErrWire, wire_unsupported, the caller's, not submitted", err, c)
	}
}
