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
	{"actors.ErrBatchTooLarge", actors.ErrBatchTooLarge, cuda.CodeBatchTooLarge},
	{"actors.ErrHung", actors.ErrHung, cuda.CodeLaneHung},
	{"actors.ErrIndeterminate", actors.ErrIndeterminate, cuda.CodeIndeterminate},
	{"actors.ErrInvalidArgument", actors.ErrInvalidArgument, cuda.CodeInvalidArgument},
	{"actors.ErrInvalidTenant", actors.ErrInvalidTenant, cuda.CodeTenantInvalid},
	{"actors.ErrLaneUnavailable", actors.ErrLaneUnavailable, cuda.CodeLaneUnavailable},
	{"actors.ErrNoHealthyLane", actors.ErrNoHealthyLane, cuda.CodeNoHealthyLane},
	{"actors.ErrNotYours", actors.ErrNotYours, cuda.CodeNotYours},
	{"actors.ErrOverloaded", actors.ErrOverloaded, cuda.CodeOverloaded},
	{"actors.ErrProgramLimit", actors.ErrProgramLimit, cuda.CodeProgramLimit},
	{"actors.ErrStopped", actors.ErrStopped, cuda.CodeStopped},
	{"actors.ErrWithdrawn", actors.ErrWithdrawn, cuda.CodeWithdrawn},
	{"actors.ErrSuspended", actors.ErrSuspended, cuda.CodeTenantSuspended},
	{"actors.ErrTenantBusy", actors.ErrTenantBusy, cuda.CodeTenantBusy},
	{"actors.ErrUnknownLane", actors.ErrUnknownLane, cuda.CodeUnknownLane},
	{"cache.ErrAlreadyOpen", cache.ErrAlreadyOpen, cuda.CodePreparationInvalid},
	{"cache.ErrCapacity", cache.ErrCapacity, cuda.CodePreparationInvalid},
	{"cache.ErrNoDisposition", cache.ErrNoDisposition, cuda.CodePreparationInvalid},
	{"cache.ErrNotOpen", cache.ErrNotOpen, cuda.CodePreparationInvalid},
	{"cache.ErrNotQuiescent", cache.ErrNotQuiescent, cuda.CodeLaneNotQuiescent},
	{"cuda.ErrAlignment", cuda.ErrAlignment, cuda.CodeRuntimeContract},
	{"cuda.ErrCaptureInvalidated", cuda.ErrCaptureInvalidated, cuda.CodeStreamCaptureInvalidated},
	{"cuda.ErrCaptureUnsupported", cuda.ErrCaptureUnsupported, cuda.CodeStreamCaptureUnsupported},
	{"cuda.ErrDeinitialized", cuda.ErrDeinitialized, cuda.CodeDeinitialized},
	{"cuda.ErrDeviceClosed", cuda.ErrDeviceClosed, cuda.CodeRuntimeContract},
	{"cuda.ErrElementType", cuda.ErrElementType, cuda.CodeRuntimeContract},
	{"cuda.ErrEmptyRegion", cuda.ErrEmptyRegion, cuda.CodeRuntimeContract},
	{"cuda.ErrEncoding", cuda.ErrEncoding, cuda.CodeRuntimeContract},
	{"cuda.ErrForeignHandle", cuda.ErrForeignHandle, cuda.CodeRuntimeContract},
	{"cuda.ErrIllegalAddress", cuda.ErrIllegalAddress, cuda.CodeIllegalAddress},
	{"cuda.ErrIllegalState", cuda.ErrIllegalState, cuda.CodeIllegalState},
	{"cuda.ErrInvalidCommand", cuda.ErrInvalidCommand, cuda.CodeRuntimeContract},
	{"cuda.ErrInvalidHandle", cuda.ErrInvalidHandle, cuda.CodeInvalidHandle},
	{"cuda.ErrKernelArity", cuda.ErrKernelArity, cuda.CodeRuntimeContract},
	{"cuda.ErrLaunchConfig", cuda.ErrLaunchConfig, cuda.CodeRuntimeContract},
	{"cuda.ErrLaunchFailed", cuda.ErrLaunchFailed, cuda.CodeLaunchFailed},
	{"cuda.ErrLaunchResources", cuda.ErrLaunchResources, cuda.CodeLaunchOutOfResources},
	{"cuda.ErrOutOfBounds", cuda.ErrOutOfBounds, cuda.CodeRuntimeContract},
	{"cuda.ErrOutOfMemory", cuda.ErrOutOfMemory, cuda.CodeOutOfMemory},
	{"cuda.ErrStaleHandle", cuda.ErrStaleHandle, cuda.CodeRuntimeContract},
	{"cuda.ErrThreadNotBound", cuda.ErrThreadNotBound, cuda.CodeRuntimeContract},
	{"cuda.ErrUnknownKernel", cuda.ErrUnknownKernel, cuda.CodeRuntimeContract},
	{"cuda.ErrUpdateRefused", cuda.ErrUpdateRefused, cuda.CodeGraphExecUpdateFailure},
	{"cuda/kernels.ErrIllegalAddress", kernels.ErrIllegalAddress, cuda.CodeIllegalAddress},
	{"cuda/kernels.ErrInvalidModule", kernels.ErrInvalidModule, cuda.CodeRuntimeContract},
	{"cuda/sim.ErrUninitializedRead", sim.ErrUninitializedRead, cuda.CodeUninitializedRead},
	{"lanes.ErrCaptureFailed", lanes.ErrCaptureFailed, cuda.CodeCaptureFailed},
	{"lanes.ErrFailed", lanes.ErrFailed, cuda.CodeLaneFailed},
	{"lanes.ErrIndexMap", lanes.ErrIndexMap, cuda.CodeStagedInputInvalid},
	{"lanes.ErrInvalidBatch", lanes.ErrInvalidBatch, cuda.CodeBatchInvalid},
	{"lanes.ErrLibrarySetup", lanes.ErrLibrarySetup, cuda.CodeLibrarySetupFailed},
	{"lanes.ErrNotQuiescent", lanes.ErrNotQuiescent, cuda.CodeLaneNotQuiescent},
	{"lanes.ErrPatch", lanes.ErrPatch, cuda.CodeBindingPatchInvalid},
	{"lanes.ErrPathRequired", lanes.ErrPathRequired, cuda.CodeComputePathUnmet},
	{"lanes.ErrProviderPanic", lanes.ErrProviderPanic, cuda.CodeProviderPanic},
	{"lanes.ErrReadback", lanes.ErrReadback, cuda.CodeReadbackInvalid},
	{"lanes.ErrStagedInput", lanes.ErrStagedInput, cuda.CodeStagedInputInvalid},
	{"lanes.ErrStagedLost", lanes.ErrStagedLost, cuda.CodeDeviceStateLost},
	{"lanes.ErrUnknownFence", lanes.ErrUnknownFence, cuda.CodeUnknownFence},
	{"programs.ErrForeignRuntime", programs.ErrForeignRuntime, cuda.CodeProgramInvalid},
	{"programs.ErrMonotonic", programs.ErrMonotonic, cuda.CodeProgramInvalid},
	{"programs.ErrNoAttribution", programs.ErrNoAttribution, cuda.CodeProgramInvalid},
	{"programs.ErrNotResident", programs.ErrNotResident, cuda.CodeProgramInvalid},
	{"programs.ErrNotSealed", programs.ErrNotSealed, cuda.CodeProgramInvalid},
	{"programs.ErrRegistration", programs.ErrRegistration, cuda.CodeProgramInvalid},
	{"programs.ErrSegmentMismatch", programs.ErrSegmentMismatch, cuda.CodeProgramInvalid},
	{"programs.ErrTopology", programs.ErrTopology, cuda.CodeProgramInvalid},
	{"programs.ErrUnknownProgram", programs.ErrUnknownProgram, cuda.CodeProgramInvalid},
	{"remote.ErrConfig", remote.ErrConfig, cuda.CodeInvalidArgument},
	{"remote.ErrDeviceStateLost", remote.ErrDeviceStateLost, cuda.CodeDeviceStateLost},
	{"remote.ErrHostLeaving", remote.ErrHostLeaving, cuda.CodeHostLeaving},
	{"remote.ErrHostLost", remote.ErrHostLost, cuda.CodeHostLost},
	{"remote.ErrNoHost", remote.ErrNoHost, cuda.CodeNoHost},
	{"remote.ErrRefused", remote.ErrRefused, cuda.CodeRegistrationRefused},
	{"remote.ErrStopped", remote.ErrStopped, cuda.CodeStopped},
	{"remote.ErrUnauthenticated", remote.ErrUnauthenticated, cuda.CodeUnauthenticated},
	{"remote.ErrUnknownCall", remote.ErrUnknownCall, cuda.CodeWireUnsupported},
	{"remote.ErrWire", remote.ErrWire, cuda.CodeWireUnsupported},
	{"telemetry.ErrConfig", telemetry.ErrConfig, cuda.CodeInvalidArgument},
}

// TestEverySentinelClassifies: every sentinel classifies to its stable
// code, never "unclassified" (a bug), with the blame, retryability and
// submission the code stands for, through any wrapping.
func TestEverySentinelClassifies(t *testing.T) {
	for _, s := range sentinels {
		got := cuda.Classify(s.err)
		if got.Code != s.code || got.Code == cuda.CodeUnclassified {
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
