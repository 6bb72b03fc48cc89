package ptx_test

import (
	"strings"
	"testing"

	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/conformance"
	"github.com/lanesched/lanes/internal/ptx"
)

// TestReadPTX: the committed PTX of nvcc 13 reads as the driver sees it;
// a struct by value, comments and directives in odd places too; a binary
// image is not read.
func TestReadPTX(t *testing.T) {
	entries, ok, err := ptx.ReadPTX(conformance.UserModulePTX)
	if err != nil || !ok {
		t.Fatalf("ReadPTX(usermodule.ptx): got ok %v, err %v; want read", ok, err)
	}
	for name, want := range map[string]struct {
		sizes []uint64
		bound uint64
	}{
		"user_scale_f32": {[]uint64{8, 4, 4}, 256},
		"user_iota_u64":  {[]uint64{8, 8, 8}, 0},
		"user_axpy_f64":  {[]uint64{8, 8, 8, 8}, 0},
	} {
		e := entries[name]
		if !equal(e.ParamSizes, want.sizes) || e.MaxBlockThreads != want.bound {
			t.Errorf("entry %s: got sizes %v, bound %d; want %v, %d", name, e.ParamSizes, e.MaxBlockThreads, want.sizes, want.bound)
		}
	}
	b := []byte(kernels.PTX)
	if all, ok, err := ptx.ReadPTX(b); err != nil || !ok || len(all) == 0 {
		t.Fatalf("ReadPTX(kernels.ptx): got %d entries, ok %v, err %v; want the built-in kernels", len(all), ok, err)
	}

	odd := `// a comment with .entry in it
.version 8.0
.target sm_80
.visible .entry by_value( /* a struct */ .param .align 8 .b8 by_value_param_0[24],
	.param .u64 .ptr .global .align 4 by_value_param_1, .param .f16 h
) .reqntid 64, 2
{ ret; }
.entry none
{ ret; }` + "\x00"
	entries, ok, err = ptx.ReadPTX([]byte(odd))
	if err != nil || !ok {
		t.Fatalf("ReadPTX(odd): got ok %v, err %v", ok, err)
	}
	if e := entries["by_value"]; !equal(e.ParamSizes, []uint64{24, 8, 2}) || !equal(e.ParamOffsets, []uint64{0, 24, 32}) || e.MaxBlockThreads != 128 {
		t.Errorf("by_value: got sizes %v at %v, bound %d; want [24 8 2] at [0 24 32], 128", e.ParamSizes, e.ParamOffsets, e.MaxBlockThreads)
	}
	padded, _, err := ptx.ReadPTX([]byte(".version 8.0\n.entry p(.param .u32 n, .param .align 8 .b8 s[16], .param .b8 c, .param .align 2 .b8 h[2])\n{ ret; }"))
	if e := padded["p"]; err != nil || !equal(e.ParamSizes, []uint64{4, 16, 1, 2}) || !equal(e.ParamOffsets, []uint64{0, 8, 24, 26}) {
		t.Errorf("parameters laid out with padding: got sizes %v at %v, err %v; want [4 16 1 2] at [0 8 24 26]", e.ParamSizes, e.ParamOffsets, err)
	}
	if e, found := entries["none"]; !found || len(e.ParamSizes) != 0 {
		t.Errorf("an entry without parameters: got %+v, found %v", e, found)
	}
	if len(entries) != 2 {
		t.Errorf("got %d entries, want 2 (the comment's .entry is no entry)", len(entries))
	}
	for _, bin := range [][]byte{{0x7f, 'E', 'L', 'F', 2, 1, 1, 0}, {0x50, 0xed, 0x55, 0xba, 1, 0}} {
		if _, ok, err := ptx.ReadPTX(bin); ok || err != nil {
			t.Errorf("ReadPTX(% x): got ok %v, err %v; want not read (only the driver reads a cubin or fatbin)", bin, ok, err)
		}
	}
	// Read up to the first NUL, as the driver reads PTX.
	withTail := append(append([]byte(nil), conformance.UserModulePTX...), 0, 'x', 0x01)
	if e, ok, err := ptx.ReadPTX(withTail); err != nil || !ok || len(e) != 5 {
		t.Errorf("ReadPTX(PTX, NUL, junk): got %d entries, ok %v, err %v; want the PTX's 5", len(e), ok, err)
	}
	ptr, _, err := ptx.ReadPTX([]byte(".version 8.0\n.entry k(.param .u32 n, .param .u64 .ptr .global .align 16 p, .param .u32 m)\n{ ret; }"))
	if e := ptr["k"]; err != nil || !equal(e.ParamOffsets, []uint64{0, 8, 16}) {
		t.Errorf("a pointer with the pointed-to memory's .align: got offsets %v, err %v; want [0 8 16] (the .align after .ptr is not the parameter's)", e.ParamOffsets, err)
	}
	vec, _, err := ptx.ReadPTX([]byte(".version 8.0\n.entry v(.param .v2 .f32 a, .param .v4 .u32 b)\n{ ret; }"))
	if e := vec["v"]; err != nil || !equal(e.ParamSizes, []uint64{8, 16}) {
		t.Errorf("vector parameters: got sizes %v, err %v; want [8 16]", e.ParamSizes, err)
	}
	for _, bad := range []string{".version 8.0\n.entry k(.param .u64 a", ".version 8.0\n.entry k(.param .q99 a)\n{", ".version 8.0\n.entry (.param .u64 a)\n{", ".version 8.0\n.entry k(.param .b8 a[x])\n{",
		".version 8.0\n.entry k(.param .b8 a[0])\n{", ".version 8.0\n.entry k()\n{ }\n.entry k()\n{ }", ".version 8.0\n.entry k() .maxntid 0x40\n{", "examples/customkernels/rmsnorm.ptx", "\x01\x02garbage"} {
		if _, _, err := ptx.ReadPTX([]byte(bad)); err == nil || !strings.Contains(err.Error(), "invalid module") {
			t.Errorf("ReadPTX(%q): got err %v, want kernels.ErrInvalidModule", bad, err)
		}
	}
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// FuzzReadPTX: any image reads or is refused with an error; never a panic,
// and every entry read has a name.
func FuzzReadPTX(f *testing.F) {
	f.Add(conformance.UserModulePTX)
	f.Add([]byte(".version 8.0\n.entry k(.param .align 8 .b8 s[16], .param .u32 n) .maxntid 32\n{ ret; }"))
	f.Add([]byte{0x7f, 'E', 'L', 'F'})
	f.Fuzz(func(t *testing.T, image []byte) {
		entries, ok, err := ptx.ReadPTX(image)
		if !ok && (entries != nil || err != nil) {
			t.Fatalf("an image not read: got entries %v, err %v", entries, err)
		}
		for name, e := range entries {
			if name == "" || e.Name != name {
				t.Fatalf("entry %q named %q", name, e.Name)
			}
		}
	})
}
