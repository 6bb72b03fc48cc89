package remote_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lanesched/lanes/remote"
	front "github.com/lanesched/lanes/remote/internal/front"
)

// TestRoomsImportDown: docs/tour.md says remote's rooms import one way,
// and front and host never import each other (what both must agree on is
// wire's). Each room may import only the rooms listed here, none imports
// the face, and no non-test file breaks it.
func TestRoomsImportDown(t *testing.T) {
	const prefix = "github.com/lanesched/lanes/remote"
	allowed := map[string][]string{
		"wire":      {},
		"cluster":   {"wire"},
		"dataplane": {"wire"},
		"system":    {"cluster", "wire"},
		"host":      {"cluster", "dataplane", "system", "wire"},
		"front":     {"cluster", "dataplane", "system", "wire"},
	}
	rooms, err := os.ReadDir("internal")
	if err != nil {
		t.Fatal(err)
	}
	for _, room := range rooms {
		ok, known := allowed[room.Name()]
		if !known {
			t.Errorf("room %s is in no rule of this test (and no picture in docs/tour.md)", room.Name())
			continue
		}
		files, _ := filepath.Glob(filepath.Join("internal", room.Name(), "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range file.Imports {
				path := strings.Trim(imp.Path.Value, `"`)
				if path == prefix {
					t.Errorf("%s imports the face, remote", f)
				}
				if other, inRoom := strings.CutPrefix(path, prefix+"/internal/"); inRoom && !slices.Contains(ok, other) {
					t.Errorf("%s imports room %s; %s may import only %v", f, other, room.Name(), ok)
				}
			}
		}
	}
}

// TestFaceTypesMatchTheirRooms: the face's copies of a room's types
// (converted by value where they cross) keep the room's numbering and
// names: a host's health reads the same on both sides of the conversion.
func TestFaceTypesMatchTheirRooms(t *testing.T) {
	for h := range 8 {
		if got, want := remote.HostHealth(h).String(), front.HostHealth(h).String(); got != want {
			t.Errorf("health %d reads %q in remote, %q in the front", h, got, want)
		}
	}
	if remote.HostServing != remote.HostHealth(front.HostServing) || remote.HostLeft != remote.HostHealth(front.HostLeft) {
		t.Error("the face's health constants are numbered unlike the front's")
	}
}
