package vocabulary_test

import (
	"errors"
	"fmt"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
	laneerr "github.com/lanesched/lanes/internal/laneerr"

	execcache "github.com/lanesched/lanes/internal/execcache"
	"github.com/lanesched/lanes/remote"
)

// typedErrors is every exported error type of the public packages, as the
// packages return it, with the class cuda.Classify gives it. A new one must
// be added here: TestEveryErrorTypeIsListed reads the source.
var typedErrors = []struct {
	name         string
	err          error
	code         cuda.Code
	notSubmitted bool
}{
	{"cuda.Error", backend.DriverError("launch", codes.LaunchFailed, "a kernel faulted"), codes.LaunchFailed, false},
	{"cuda.CallError", func() error {
		e := backend.DriverError("enqueue", codes.InvalidValue, "a library call failed")
		e.Contract = &cuda.CallError{Kind: "library call", Name: "gemm", Err: errors.New("bad shape")}
		return e
	}(), codes.InvalidValue, false},
	{"execcache.ReplayError", &execcache.ReplayError{Stage: "instantiate", Detail: "out of memory", EagerFallbackSafe: true, Err: backend.DriverError("instantiate", codes.OutOfMemory, "")}, codes.OutOfMemory, false},
	{"backend.RebindRefusedError", &backend.RebindRefusedError{Refusal: backend.RebindNodeKind, Node: 2, Detail: "a memset node"}, codes.GraphExecUpdateFailure, false},
	{"lanes.Error", laneerr.Wrap("submit", true, actors.ErrOverloaded), codes.Overloaded, true},
	{"actors.BatchTooLargeError", &actors.BatchTooLargeError{Entries: 2000, MaxEntries: 1024}, codes.BatchTooLarge, true},
	{"actors.SuspendedError", &actors.SuspendedError{Tenant: "t", Faults: 9}, codes.TenantSuspended, true},
	{"actors.DetachedError", &actors.DetachedError{Err: fmt.Errorf("waiting: %w", errors.New("deadline"))}, codes.Detached, false},
	{"sim.UninitializedReadError", &sim.UninitializedReadError{Op: "launch", Name: "inc_i32", Buffer: 3, Offset: 8}, codes.UninitializedRead, false},
	{"remote.PeerError", &remote.PeerError{Code: codes.NoHealthyLane, Msg: "no healthy lane"}, codes.NoHealthyLane, true},
	{"remote.HostLostError", &remote.HostLostError{Host: "gpu0", Epoch: 1, Cause: "silent"}, codes.HostLost, false},
	{"remote.DeviceStateLostError", &remote.DeviceStateLostError{Tenant: "t", Host: "gpu0", Epoch: 1}, codes.DeviceStateLost, true},
	{"remote.HostLeavingError", &remote.HostLeavingError{Tenant: "t", Host: "gpu0"}, codes.HostLeaving, true},
	{"remote.RefusedError", &remote.RefusedError{Host: "gpu0", Reason: "full", ForNow: true}, codes.RegistrationRefused, true},
}

// TestEveryErrorTypeClassifies: each typed error classifies to its code
// (never unclassified), says whether the batch ran, and keeps its class
// through wrapping.
func TestEveryErrorTypeClassifies(t *testing.T) {
	for _, e := range typedErrors {
		got := cuda.Classify(e.err)
		if got.Code != e.code || got.Code == codes.Unclassified {
			t.Errorf("%s: got code %v, want %v", e.name, got.Code, e.code)
		}
		if got.NotSubmitted != e.notSubmitted {
			t.Errorf("%s: got NotSubmitted %v, want %v", e.name, got.NotSubmitted, e.notSubmitted)
		}
		if w := cuda.Classify(fmt.Errorf("serving: %w", e.err)); w != got {
			t.Errorf("%s wrapped: got %+v, want %+v", e.name, w, got)
		}
		if e.err.Error() == "" {
			t.Errorf("%s: an empty message", e.name)
		}
	}
}

// TestEveryErrorTypeIsListed: the public packages export no error type
// (a type named Error or ...Error) that typedErrors does not list.
func TestEveryErrorTypeIsListed(t *testing.T) {
	listed := map[string]bool{}
	for _, e := range typedErrors {
		listed[e.name] = true
	}
	for _, name := range publicDecls(t, token.TYPE) {
		pkg, n, _ := strings.Cut(name, ".")
		if strings.HasSuffix(n, "Error") && !listed[filepath.Base(pkg)+"."+n] {
			t.Errorf("%s is an exported error type not in typedErrors: add it with its code", name)
		}
	}
}
