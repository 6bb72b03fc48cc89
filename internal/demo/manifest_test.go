package demo_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/demo"
	"github.com/lanesched/lanes/internal/half"
)

// exampleDir is the manifest the repository ships beside its RMSNorm
// module.
const exampleDir = "../../examples/customkernels"

// rmsnormReference is rmsnorm.cu's Go reference: y = x * w / rms(x), per
// row.
func rmsnormReference(_ kernels.Shape, m []kernels.Memory, a []cuda.Arg) error {
	rows, cols, eps := int(a[3].I32()), int(a[4].I32()), a[5].F32()
	f := func(b []byte, i int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])) }
	for r := range rows {
		var acc float32
		for c := range cols {
			v := f(m[1], r*cols+c)
			acc += v * v
		}
		inv := float32(1 / math.Sqrt(float64(acc/float32(cols)+eps)))
		for c := range cols {
			binary.LittleEndian.PutUint32(m[0][4*(r*cols+c):], math.Float32bits(f(m[1], r*cols+c)*inv*f(m[2], c)))
		}
	}
	return nil
}

// TestKernelsFrom runs the demo on the example's manifest and module, with
// the kernel's Go reference standing in for the GPU: every step ends, the
// replaying tenants replay, and the report names the module.
func TestKernelsFrom(t *testing.T) {
	cfg := demo.Defaults()
	cfg.Clock, cfg.Duration, cfg.Lanes, cfg.Tenants, cfg.EagerTenants, cfg.KernelsFrom = "zero", 500*time.Millisecond, 2, 3, 1, exampleDir
	rep, err := demo.Run(context.Background(), cfg, demo.Options{References: map[string]demo.Reference{"rmsnorm_f32": rmsnormReference}})
	if err != nil {
		t.Fatalf("demo.Run: got err %v, want nil", err)
	}
	var table bytes.Buffer
	rep.WriteTable(&table)
	t.Log("\n" + table.String())
	if !rep.OK() || rep.Succeeded == 0 || rep.Succeeded != rep.Ended || rep.Kernels != 2 || !strings.Contains(table.String(), "2 kernels/step from "+filepath.Join(exampleDir, "rmsnorm.ptx")) {
		t.Fatalf("got ok %v, %d of %d ended ok, %d kernels/step, module %q; want ok, all ended ok, 2 kernels/step from the example's rmsnorm.ptx", rep.OK(), rep.Succeeded, rep.Ended, rep.Kernels, rep.Module)
	}
	for _, tr := range rep.PerTenant[1:] {
		if tr.Steps == 0 || tr.ReplayShare < 0.5 {
			t.Errorf("replaying tenant %s: got %d steps, replay share %.2f; want steps, share at least 0.5 (the launches; input and readout stay eager)", tr.Tenant, tr.Steps, tr.ReplayShare)
		}
	}
}

// TestKernelsFromWithoutReferences: the simulated device cannot run a
// manifest's kernels by itself, and says so before opening anything.
func TestKernelsFromWithoutReferences(t *testing.T) {
	cfg := demo.Defaults()
	cfg.KernelsFrom = exampleDir
	_, err := demo.Run(context.Background(), cfg, demo.Options{})
	if !errors.Is(err, demo.ErrConfig) || !strings.Contains(err.Error(), "--device cuda") || !strings.Contains(err.Error(), "rmsnorm_f32") {
		t.Fatalf("demo.Run on the sim without references: got err %v, want demo.ErrConfig naming rmsnorm_f32 and --device cuda", err)
	}
}

// exampleManifest is the example's lanedemo.json as text.
func exampleManifest(t testing.TB) string {
	b, err := os.ReadFile(filepath.Join(exampleDir, demo.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestBadManifests: each mistake in a manifest is a configuration error
// that names it, found by Validate before any device opens.
func TestBadManifests(t *testing.T) {
	good := exampleManifest(t)
	for _, c := range []struct{ old, new, want string }{
		{`"lanedemo-kernels/1"`, `"lanedemo-kernels/2"`, `format "lanedemo-kernels/2"`},
		{`"module": "rmsnorm.ptx"`, `"module": "../rmsnorm.ptx"`, "inside the directory"},
		{`"module": "rmsnorm.ptx"`, `"module": "missing.ptx"`, "missing.ptx"},
		{`"module": "rmsnorm.ptx"`, `"modul": "rmsnorm.ptx"`, `unknown field "modul"`},
		{`"type": "f32*", "access": "write"`, `"type": "f32*"`, `access "": a buffer is read, write or readwrite`},
		{`{"name": "rows", "type": "i32"}`, `{"name": "rows", "type": "int"}`, `type "int"`},
		{`{"name": "eps", "type": "f32"}`, `{"name": "eps", "type": "struct"}`, "a struct of size 0"},
		{`{"name": "eps", "type": "f32"}`, `{"name": "eps", "type": "f32", "size": 4}`, "size and align are a struct's"},
		{`{"name": "cols", "type": "i32"}`, `{"name": "rows", "type": "i32"}`, `parameter "rows" declared twice`},
		{`"count": 256, "shared": true`, `"count": 0, "shared": true`, "count 0"},
		{`"init": "random"`, `"init": "ones"`, `init "ones"`},
		{`"input": "x"`, `"input": "w"`, "shared buffer"},
		{`"output": "y"`, `"output": "z"`, `output "z"`},
		{`"args": ["h", "x", "w", 16, 256, 1e-5]`, `"args": ["h", "x", "w", 16, 256]`, "5 args for 6 parameters"},
		{`"args": ["h", "x", "w", 16, 256, 1e-5]`, `"args": ["w", "x", "h", 16, 256, 1e-5]`, `buffer "w" is shared`},
		{`"args": ["h", "x", "w", 16, 256, 1e-5]`, `"args": ["h", "x", "w", 16.5, 256, 1e-5]`, "16.5 is not a i32"},
		{`"args": ["h", "x", "w", 16, 256, 1e-5]`, `"args": ["h", "x", "v", 16, 256, 1e-5]`, `buffer "v" is not declared`},
		{`"args": ["h", "x", "w", 16, 256, 1e-5]`, `"args": [1, "x", "w", 16, 256, 1e-5]`, "give the name of a f32 buffer"},
		{`"grid": [16], "block": [256], "args": ["h"`, `"grid": [16], "block": [0], "args": ["h"`, "block"},
		{`"grid": [16], "block": [256], "args": ["h"`, `"grid": [1, 1, 1, 1], "block": [256], "args": ["h"`, "1 to 3 sizes"},
		{`{"kernel": "rmsnorm_f32", "grid": [16], "block": [256], "args": ["y"`, `{"kernel": "softmax", "grid": [16], "block": [256], "args": ["y"`, `"softmax" is not declared`},
		{"\n}\n", "\n} {}\n", "data after"},
		{`16, 256, 1e-5]`, `16, null, 1e-5]`, "got null"},
		{`"module": "rmsnorm.ptx"`, `"module": "lanedemo.json"`, "ending in .ptx"},
		{`{"name": "rmsnorm_f32", "params"`, `{"name": "rms norm", "params"`, "letters, digits and _"},
	} {
		bad := strings.Replace(good, c.old, c.new, 1)
		if bad == good {
			t.Fatalf("case %q: the example manifest has no %q", c.want, c.old)
		}
		dir := t.TempDir()
		for name, body := range map[string]string{demo.ManifestFile: bad, "rmsnorm.ptx": ".version 8.0\n"} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cfg := demo.Defaults()
		cfg.KernelsFrom = dir
		if err := cfg.Validate(); !errors.Is(err, demo.ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("manifest with %s: got err %v, want demo.ErrConfig containing %q", c.new, err, c.want)
		}
	}
}

// TestManifestFilesStayInside: the module is a regular, non-empty file
// inside the directory: a link out of it, a FIFO (which would block a
// read) and an empty file are refused, not read.
func TestManifestFilesStayInside(t *testing.T) {
	good := exampleManifest(t)
	for name, setup := range map[string]func(dir string) error{
		"a link out of the directory": func(dir string) error { return os.Symlink("/etc/hostname", filepath.Join(dir, "rmsnorm.ptx")) },
		"a FIFO":                      func(dir string) error { return syscall.Mkfifo(filepath.Join(dir, "rmsnorm.ptx"), 0o644) },
		"an empty file":               func(dir string) error { return os.WriteFile(filepath.Join(dir, "rmsnorm.ptx"), nil, 0o644) },
		"a directory":                 func(dir string) error { return os.Mkdir(filepath.Join(dir, "rmsnorm.ptx"), 0o755) },
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, demo.ManifestFile), []byte(good), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := setup(dir); err != nil {
			t.Fatal(err)
		}
		cfg := demo.Defaults()
		cfg.KernelsFrom = dir
		done := make(chan error, 1)
		go func() { done <- cfg.Validate() }()
		select {
		case err := <-done:
			if !errors.Is(err, demo.ErrConfig) || !strings.Contains(err.Error(), "module") {
				t.Errorf("module that is %s: got err %v, want demo.ErrConfig about the module", name, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("module that is %s: got Validate still reading after 5 s, want it refused", name)
		}
	}
}

// FuzzManifest: whatever a manifest holds, its parser returns an error
// or a workload (no panic).
func FuzzManifest(f *testing.F) {
	f.Add(exampleManifest(f))
	f.Add(`{"format":"lanedemo-kernels/1","kernels":[{"name":"k","params":[{"name":"b","type":"bool"},{"name":"u","type":"u8*","access":"readwrite"}]}],"buffers":[{"name":"u","type":"u8","count":3}],"input":"u","output":"u","step":[{"kernel":"k","grid":[1,2,3],"block":[4],"args":[true,"u"]}]}`)
	f.Fuzz(func(t *testing.T, manifest string) {
		_ = demo.ParseManifest([]byte(manifest))
	})
}

// TestManifestScalars: a manifest's scalar values of every type, the
// 8-byte integers exact past 2^53, and values a type cannot hold refused
// with what it holds.
func TestManifestScalars(t *testing.T) {
	for _, c := range []struct {
		t    cuda.ElementType
		json string
		bits uint64
	}{
		{cuda.I64, "9007199254740993", 9007199254740993},
		{cuda.I64, "-9223372036854775808", 1 << 63},
		{cuda.U64, "18446744073709551615", math.MaxUint64},
		{cuda.F64, "0.1", math.Float64bits(0.1)},
		{cuda.F64, "-1e300", math.Float64bits(-1e300)},
		{cuda.F32, "0.5", uint64(math.Float32bits(0.5))},
		{cuda.I32, "-2", uint64(uint32(0xfffffffe))},
		{cuda.U8, "255", 255},
		{cuda.Bool, "true", 1},
		{cuda.F16, "0.1", uint64(half.Float16Bits(0.1))},
		{cuda.F16, "-65504", 0xfbff},
		{cuda.F16, "65519", 0x7bff},
		{cuda.BF16, "-3.5", 0xc060},
	} {
		got, err := demo.ScalarBits(c.t, []byte(c.json))
		if err != nil || got != c.bits {
			t.Errorf("%v %s: got bits %#x, err %v; want %#x, nil", c.t, c.json, got, err, c.bits)
		}
	}
	for _, c := range []struct {
		t          cuda.ElementType
		json, want string
	}{
		{cuda.I64, "1.5", "not an i64"},
		{cuda.I64, "9223372036854775808", "not an i64"},
		{cuda.U64, "-1", "not a u64"},
		{cuda.U64, "1e3", "written in digits"},
		{cuda.F64, `"x"`, "give a number"},
		{cuda.F32, "1e39", "beyond f32's range"},
		{cuda.I32, "2147483648", "not a i32"},
		{cuda.F64, "null", "got null"},
		{cuda.U64, `"5"`, "not a string"},
		{cuda.I32, `"1e3"`, "not a string"},
		{cuda.F16, "65520", "beyond f16's range"},
		{cuda.BF16, "3.4e38", "beyond bf16's range"},
	} {
		if _, err := demo.ScalarBits(c.t, []byte(c.json)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %s: got err %v, want one containing %q", c.t, c.json, err, c.want)
		}
	}
}

// TestManifestContradictingItsImage: a declaration the module's PTX
// contradicts is a configuration error on any device, before anything
// opens (the simulator reads the image as the driver would).
func TestManifestContradictingItsImage(t *testing.T) {
	dir := t.TempDir()
	bad := strings.Replace(exampleManifest(t), `{"name": "rows", "type": "i32"}`, `{"name": "rows", "type": "i64"}`, 1)
	ptx, err := os.ReadFile(filepath.Join(exampleDir, "rmsnorm.ptx"))
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string][]byte{demo.ManifestFile: []byte(bad), "rmsnorm.ptx": ptx} {
		if err := os.WriteFile(filepath.Join(dir, name), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := demo.Defaults()
	cfg.Clock, cfg.Duration, cfg.KernelsFrom = "zero", 100*time.Millisecond, dir
	_, err = demo.Run(context.Background(), cfg, demo.Options{References: map[string]demo.Reference{"rmsnorm_f32": rmsnormReference}})
	if !errors.Is(err, demo.ErrConfig) || !strings.Contains(err.Error(), "image has 4 B") {
		t.Fatalf("a manifest declaring rows i64 where the PTX has 4 bytes: got err %v, want demo.ErrConfig saying the image has 4 B", err)
	}
}

// TestManifestStructs: a struct argument's fields are laid out as C lays
// them (each at a multiple of its size, zero padding to sizeof), and
// fields that do not fit, or are not fields, are refused.
func TestManifestStructs(t *testing.T) {
	p := cuda.Param{Name: "p", Kind: cuda.ParamStruct, Size: 24, Align: 8}
	got, err := demo.StructBytes(p, []byte(`[{"f32": 0.75}, {"u8": 7}, {"i64": -2}, {"f16": 1}]`))
	want := []byte{0, 0, 0x40, 0x3f, 7, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0x3c, 0, 0, 0, 0, 0, 0}
	if err != nil || string(got) != string(want) {
		t.Fatalf("struct {f32, u8, i64, f16}: got % x, err %v; want % x", got, err, want)
	}
	four := cuda.Param{Name: "q", Kind: cuda.ParamStruct, Size: 16, Align: 4}
	if _, err := demo.StructBytes(four, []byte(`[{"f32": 1}, {"i64": 2}]`)); err == nil || !strings.Contains(err.Error(), "more than the struct's align") {
		t.Errorf("an i64 field in a struct aligned to 4: got err %v, want one saying its alignment is more than the struct's", err)
	}
	for _, c := range []struct{ json, want string }{
		{`[{"f64": 1}, {"f64": 2}, {"f64": 3}, {"u8": 1}]`, "past the struct's 24"},
		{`[]`, "give the struct's fields"},
		{`{"f32": 1}`, "give the struct's fields"},
		{`[{"f32": 1, "i32": 2}]`, "give one"},
		{`[{"q8": 1}]`, "write an element type"},
		{`[{"u8": 300}]`, "not a u8"},
	} {
		if _, err := demo.StructBytes(p, []byte(c.json)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("struct %s: got err %v, want one containing %q", c.json, err, c.want)
		}
	}
}
