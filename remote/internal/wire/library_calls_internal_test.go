package wire

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/wirepb"
)

// FuzzCallFromWire decodes arbitrary bytes as a library call's
// declaration for a host that serves "f" (a builder that panics on
// parameters starting with 0xff): never a panic; a call that decodes is
// a valid command whose declaration crosses back unchanged.
func FuzzCallFromWire(f *testing.F) {
	calls := LibraryCalls{"f": func(regions []cuda.Touch, params []byte) (*cuda.LibraryCall, error) {
		if len(params) > 0 && params[0] == 0xff {
			panic("a builder's bug")
		}
		return &cuda.LibraryCall{Reference: func([][]byte) error { return nil }}, nil
	}}
	seed := &wirepb.LibraryCall{Name: "f", Params: []byte{1, 2}, Regions: []*wirepb.Touch{{Region: &wirepb.Region{Buffer: &wirepb.Buffer{Device: 1, Id: 2, Size: 64}, Length: 64}, Access: uint32(cuda.AccessRead)}}}
	b, _ := proto.Marshal(seed)
	f.Add(b)
	seed.Params = []byte{0xff}
	b, _ = proto.Marshal(seed)
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		var w wirepb.LibraryCall
		if proto.Unmarshal(raw, &w) != nil {
			return
		}
		c, err := callFromWire(&w, calls, "h")
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil || c.Kind != cuda.KindCall || c.LibraryCall.Name != "f" {
			t.Fatalf("a decoded call: %+v, validate %v", c, err)
		}
		back := callToWire(c.LibraryCall)
		again, err := callFromWire(back, calls, "h")
		if err != nil || !proto.Equal(callToWire(again.LibraryCall), back) {
			t.Fatalf("a second round trip: err %v", err)
		}
	})
}

// TestABuilderMayReturnOneCallForEveryBuild: the host takes its own copy
// of what a builder returns (found from outside: a builder that returned
// one package-level call had every tenant's call run on the last one's
// regions).
func TestABuilderMayReturnOneCallForEveryBuild(t *testing.T) {
	one := &cuda.LibraryCall{Reference: func([][]byte) error { return nil }}
	calls := LibraryCalls{"f": func([]cuda.Touch, []byte) (*cuda.LibraryCall, error) { return one, nil }}
	decl := func(id uint64) *wirepb.LibraryCall {
		return &wirepb.LibraryCall{Name: "f", Params: []byte{byte(id)}, Regions: []*wirepb.Touch{{Region: &wirepb.Region{Buffer: &wirepb.Buffer{Device: 1, Id: id, Size: 64, Align: 256, Elem: uint32(cuda.F32), Addr: id << 20}, Length: 64}, Access: uint32(cuda.AccessReadWrite)}}}
	}
	a, err := callFromWire(decl(1), calls, "h")
	if err != nil {
		t.Fatal(err)
	}
	b, err := callFromWire(decl(2), calls, "h")
	if err != nil {
		t.Fatal(err)
	}
	if a.LibraryCall == b.LibraryCall || a.LibraryCall.Regions[0].Region.Buffer.ID != 1 || b.LibraryCall.Regions[0].Region.Buffer.ID != 2 || a.LibraryCall.Params[0] != 1 {
		t.Fatalf("two builds of one returned call: got %+v and %+v, want each its own regions and params", a.LibraryCall, b.LibraryCall)
	}
	if one.Name != "" || one.Regions != nil {
		t.Fatalf("the builder's call was changed: %+v", one)
	}
}
