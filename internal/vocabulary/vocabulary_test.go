package vocabulary_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/cuda/sim"
	"github.com/lanesched/lanes/internal/codes"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
	"github.com/lanesched/lanes/remote"
	"github.com/lanesched/lanes/telemetry"
)

// sentinels is every exported error variable of the public packages, with
// the code cuda.Classify gives it. A new one must be added here, with its
// code: TestEverySentinelIsListed reads the packages' source to see that
// none is missing.
var sentinels = []struct {
	name string
	err  error
	code cuda.Code
}{
	{"actors.ErrBatchTooLarge", actors.ErrBatchTooLarge, codes.BatchTooLarge},
	{"actors.ErrHung", actors.ErrHung, codes.LaneHung},
	{"actors.ErrIndeterminate", actors.ErrIndeterminate, codes.Indeterminate},
	{"actors.ErrInvalidArgument", actors.ErrInvalidArgument, codes.InvalidArgument},
	{"actors.ErrInvalidTenant", actors.ErrInvalidTenant, codes.TenantInvalid},
	{"actors.ErrLaneUnavailable", actors.ErrLaneUnavailable, codes.LaneUnavailable},
	{"actors.ErrNoHealthyLane", actors.ErrNoHealthyLane, codes.NoHealthyLane},
	{"actors.ErrNotYours", actors.ErrNotYours, codes.NotYours},
	{"actors.ErrOverloaded", actors.ErrOverloaded, codes.Overloaded},
	{"actors.ErrProgramLimit", actors.ErrProgramLimit, codes.ProgramLimit},
	{"actors.ErrStopped", actors.ErrStopped, codes.Stopped},
	{"actors.ErrWithdrawn", actors.ErrWithdrawn, codes.Withdrawn},
	{"actors.ErrSuspended", actors.ErrSuspended, codes.TenantSuspended},
	{"actors.ErrTenantBusy", actors.ErrTenantBusy, codes.TenantBusy},
	{"actors.ErrUnknownLane", actors.ErrUnknownLane, codes.UnknownLane},
	{"cache.ErrAlreadyOpen", cache.ErrAlreadyOpen, codes.PreparationInvalid},
	{"cache.ErrCapacity", cache.ErrCapacity, codes.PreparationInvalid},
	{"cache.ErrNoDisposition", cache.ErrNoDisposition, codes.PreparationInvalid},
	{"cache.ErrNotOpen", cache.ErrNotOpen, codes.PreparationInvalid},
	{"cache.ErrNotQuiescent", cache.ErrNotQuiescent, codes.LaneNotQuiescent},
	{"cuda.ErrAlignment", cuda.ErrAlignment, codes.RuntimeContract},
	{"cuda.ErrCaptureInvalidated", cuda.ErrCaptureInvalidated, codes.StreamCaptureInvalidated},
	{"cuda.ErrCaptureUnsupported", cuda.ErrCaptureUnsupported, codes.StreamCaptureUnsupported},
	{"cuda.ErrDeinitialized", cuda.ErrDeinitialized, codes.Deinitialized},
	{"cuda.ErrDeviceClosed", cuda.ErrDeviceClosed, codes.RuntimeContract},
	{"cuda.ErrElementType", cuda.ErrElementType, codes.RuntimeContract},
	{"cuda.ErrEmptyRegion", cuda.ErrEmptyRegion, codes.RuntimeContract},
	{"cuda.ErrForeignHandle", cuda.ErrForeignHandle, codes.RuntimeContract},
	{"cuda.ErrIllegalAddress", cuda.ErrIllegalAddress, codes.IllegalAddress},
	{"cuda.ErrIllegalState", cuda.ErrIllegalState, codes.IllegalState},
	{"cuda.ErrInvalidCommand", cuda.ErrInvalidCommand, codes.RuntimeContract},
	{"cuda.ErrInvalidHandle", cuda.ErrInvalidHandle, codes.InvalidHandle},
	{"cuda.ErrKernelArity", cuda.ErrKernelArity, codes.RuntimeContract},
	{"cuda.ErrLaunchConfig", cuda.ErrLaunchConfig, codes.RuntimeContract},
	{"cuda.ErrLaunchFailed", cuda.ErrLaunchFailed, codes.LaunchFailed},
	{"cuda.ErrLaunchResources", cuda.ErrLaunchResources, codes.LaunchOutOfResources},
	{"cuda.ErrOutOfBounds", cuda.ErrOutOfBounds, codes.RuntimeContract},
	{"cuda.ErrOutOfMemory", cuda.ErrOutOfMemory, codes.OutOfMemory},
	{"cuda.ErrStaleHandle", cuda.ErrStaleHandle, codes.RuntimeContract},
	{"cuda.ErrThreadNotBound", cuda.ErrThreadNotBound, codes.RuntimeContract},
	{"cuda.ErrUnknownKernel", cuda.ErrUnknownKernel, codes.RuntimeContract},
	{"cuda.ErrUpdateRefused", cuda.ErrUpdateRefused, codes.GraphExecUpdateFailure},
	{"cuda/kernels.ErrIllegalAddress", kernels.ErrIllegalAddress, codes.IllegalAddress},
	{"cuda/kernels.ErrInvalidModule", kernels.ErrInvalidModule, codes.RuntimeContract},
	{"cuda/sim.ErrUninitializedRead", sim.ErrUninitializedRead, codes.UninitializedRead},
	{"lanes.ErrCaptureFailed", lanes.ErrCaptureFailed, codes.CaptureFailed},
	{"lanes.ErrFailed", lanes.ErrFailed, codes.LaneFailed},
	{"lanes.ErrIndexMap", lanes.ErrIndexMap, codes.StagedInputInvalid},
	{"lanes.ErrInvalidBatch", lanes.ErrInvalidBatch, codes.BatchInvalid},
	{"lanes.ErrLibrarySetup", lanes.ErrLibrarySetup, codes.LibrarySetupFailed},
	{"lanes.ErrNotQuiescent", lanes.ErrNotQuiescent, codes.LaneNotQuiescent},
	{"lanes.ErrPatch", lanes.ErrPatch, codes.BindingPatchInvalid},
	{"lanes.ErrPathRequired", lanes.ErrPathRequired, codes.ComputePathUnmet},
	{"lanes.ErrProviderPanic", lanes.ErrProviderPanic, codes.ProviderPanic},
	{"lanes.ErrReadback", lanes.ErrReadback, codes.ReadbackInvalid},
	{"lanes.ErrStagedInput", lanes.ErrStagedInput, codes.StagedInputInvalid},
	{"lanes.ErrStagedLost", lanes.ErrStagedLost, codes.DeviceStateLost},
	{"lanes.ErrUnknownFence", lanes.ErrUnknownFence, codes.UnknownFence},
	{"programs.ErrForeignRuntime", programs.ErrForeignRuntime, codes.ProgramInvalid},
	{"programs.ErrMonotonic", programs.ErrMonotonic, codes.ProgramInvalid},
	{"programs.ErrNoAttribution", programs.ErrNoAttribution, codes.ProgramInvalid},
	{"programs.ErrNotResident", programs.ErrNotResident, codes.ProgramInvalid},
	{"programs.ErrNotSealed", programs.ErrNotSealed, codes.ProgramInvalid},
	{"programs.ErrRegistration", programs.ErrRegistration, codes.ProgramInvalid},
	{"programs.ErrSegmentMismatch", programs.ErrSegmentMismatch, codes.ProgramInvalid},
	{"programs.ErrTopology", programs.ErrTopology, codes.ProgramInvalid},
	{"programs.ErrUnknownProgram", programs.ErrUnknownProgram, codes.ProgramInvalid},
	{"remote.ErrConfig", remote.ErrConfig, codes.InvalidArgument},
	{"remote.ErrDeviceStateLost", remote.ErrDeviceStateLost, codes.DeviceStateLost},
	{"remote.ErrHostLeaving", remote.ErrHostLeaving, codes.HostLeaving},
	{"remote.ErrHostLost", remote.ErrHostLost, codes.HostLost},
	{"remote.ErrNoHost", remote.ErrNoHost, codes.NoHost},
	{"remote.ErrRefused", remote.ErrRefused, codes.RegistrationRefused},
	{"remote.ErrStopped", remote.ErrStopped, codes.Stopped},
	{"remote.ErrUnauthenticated", remote.ErrUnauthenticated, codes.Unauthenticated},
	{"remote.ErrUnknownCall", remote.ErrUnknownCall, codes.WireUnsupported},
	{"remote.ErrWire", remote.ErrWire, codes.WireUnsupported},
	{"telemetry.ErrConfig", telemetry.ErrConfig, codes.InvalidArgument},
}

// TestEverySentinelClassifies: every sentinel classifies to its stable
// code, never "unclassified" (a bug), with the blame, retryability and
// submission the code stands for, through any wrapping.
func TestEverySentinelClassifies(t *testing.T) {
	for _, s := range sentinels {
		got := cuda.Classify(s.err)
		if got.Code != s.code || got.Code == codes.Unclassified {
			t.Errorf("%s: got code %v, want %v", s.name, got.Code, s.code)
			continue
		}
		if want := s.code.Class(); got != want {
			t.Errorf("%s: got class %+v, want its code's %+v", s.name, got, want)
		}
		if w := cuda.Classify(fmt.Errorf("a caller's context: %w", s.err)); w != got {
			t.Errorf("%s wrapped: got class %+v, want %+v", s.name, w, got)
		}
	}
}

// TestEverySentinelIsListed: the public packages export no error variable
// that sentinels does not list (and list none they do not export).
func TestEverySentinelIsListed(t *testing.T) {
	listed := map[string]bool{}
	for _, s := range sentinels {
		listed[s.name] = true
	}
	found := map[string]bool{}
	for _, name := range publicDecls(t, token.VAR) {
		if _, n, _ := strings.Cut(name, "."); strings.HasPrefix(n, "Err") {
			found[name] = true
		}
	}
	for name := range found {
		if !listed[name] {
			t.Errorf("%s is exported but not in sentinels: add it with the code it classifies to", name)
		}
	}
	for name := range listed {
		if !found[name] {
			t.Errorf("%s is in sentinels but no package exports it", name)
		}
	}
}

// TestOneStopped: a stopped scheduler and a stopped front answer the same
// sentinel.
func TestOneStopped(t *testing.T) {
	if remote.ErrStopped != actors.ErrStopped {
		t.Fatal("remote.ErrStopped is not actors.ErrStopped: there must be one ErrStopped")
	}
}

// publicPackages are the packages whose exported errors the tests walk.
var publicPackages = []string{"cuda", "cuda/kernels", "cuda/sim", "cache", "programs", "lanes", "actors", "telemetry", "remote", "remote/hostcmd"}

// publicDecls reads the public packages' source and returns every exported
// name they declare with tok (token.VAR, token.TYPE), as "package.Name"
// with the package's path.
func publicDecls(t *testing.T, tok token.Token) []string {
	t.Helper()
	var names []string
	for _, pkg := range publicPackages {
		files, err := filepath.Glob(filepath.Join("..", "..", pkg, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("package %s: no source found (%v)", pkg, err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			file, err := parser.ParseFile(token.NewFileSet(), f, src, 0)
			if err != nil {
				t.Fatalf("parse %s: %v", f, err)
			}
			for _, d := range file.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != tok {
					continue
				}
				for _, spec := range g.Specs {
					switch sp := spec.(type) {
					case *ast.ValueSpec:
						for _, n := range sp.Names {
							if n.IsExported() {
								names = append(names, pkg+"."+n.Name)
							}
						}
					case *ast.TypeSpec:
						if sp.Name.IsExported() {
							names = append(names, pkg+"."+sp.Name.Name)
						}
					}
				}
			}
		}
	}
	return names
}
