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
	execcache "github.com/lanesched/lanes/internal/execcache"
	"github.com/lanesched/lanes/lanes"
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
	{"cuda.Error", cuda.DriverError("launch", cuda.CodeLaunchFailed, "a kernel faulted"), cuda.CodeLaunchFailed, false},
	{"cuda.CallError", func() error {
		e := cuda.DriverError("enqueue", cuda.CodeInvalidValue, "a library call failed")
		e.Contract = &cuda.CallError{Kind: "library call", Name: "gemm", Err: errors.New("bad shape")}
		return e
	}(), cuda.CodeInvalidValue, false},
	{"execcache.ReplayError", &execcache.ReplayError{Stage: "instantiate", Detail: "out of memory", EagerFallbackSafe: true, Err: cuda.DriverError("instantiate", cuda.CodeOutOfMemory, "")}, cuda.CodeOutOfMemory, false},
	{"cuda.RebindRefusedError", &cuda.RebindRefusedError{Refusal: cuda.RebindNodeKind, Node: 2, Detail: "a memset node"}, cuda.CodeGraphExecUpdateFailure, false},
	{"lanes.Error", lanes.Wrap("submit", true, actors.ErrOverloaded), cuda.CodeOverloaded, true},
	{"actors.BatchTooLargeError", &actors.BatchTooLargeError{Entries: 2000, MaxEntries: 1024}, cuda.CodeBatchTooLarge, true},
	{"actors.SuspendedError", &actors.SuspendedError{Tenant: "t", Faults: 9}, cuda.CodeTenantSuspended, true},
	{"actors.DetachedError", &actors.DetachedError{Err: fmt.Errorf("waiting: %w", errors.New("deadline"))}, cuda.CodeDetached, false},
	{"sim.UninitializedReadError", &sim.UninitializedReadError{Op: "launch", Name: "inc_i32", Buffer: 3, Offset: 8}, cuda.CodeUninitializedRead, false},
	{"remote.PeerError", &remote.PeerError{Code: cuda.CodeNoHealthyLane, Msg: "no healthy lane"}, cuda.CodeNoHealthyLane, true},
	{"remote.HostLostError", &remote.HostLostError{Host: "gpu0", Epoch: 1, Cause: "silent"}, cuda.CodeHostLost, false},
	{"remote.DeviceStateLostError", &remote.DeviceStateLostError{Tenant: "t", Host: "gpu0", Epoch: 1}, cuda.CodeDeviceStateLost, true},
	{"remote.HostLeavingError", &remote.HostLeavingError{Tenant: "t", Host: "gpu0"}, cuda.CodeHostLeaving, true},
	{"remote.RefusedError", &remote.RefusedError{Host: "gpu0", Reason: "full", ForNow: true}, cuda.CodeRegistrationRefused, true},
}

// TestEveryErrorTypeClassifies: each typed error classifies to its code
// (never unclassified), says whether the batch ran, and keeps its class
// through wrapping.
func TestEveryErrorTypeClassifies(t *testing.T) {
	for _, e := range typedErrors {
		got := cuda.Classify(e.err)
		if got.Code != e.code || got.Code == cuda.CodeUnclassified {
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
