// The manifest of a --kernels-from directory: which module to load, its
// kernels' parameters, each tenant's buffers and the step's launches,
// parsed and checked before any device opens.

package demo

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/internal/half"
)

// ManifestFile is the file --kernels-from reads in its directory.
const ManifestFile = "lanedemo.json"

// ManifestFormat is the format a manifest names in its "format" field.
const ManifestFormat = "lanedemo-kernels/1"

// Manifest bounds: a load generator's step, not a model's.
const (
	maxManifestBytes   = 1 << 20
	maxModuleBytes     = 1 << 30
	maxManifestItems   = 64      // kernels, parameters per kernel, buffers
	maxStepLaunches    = 4096    // launches per step (--kernels' bound)
	maxTenantBytes     = 1 << 28 // each tenant's buffers together, and each shared one
	maxManifestNameLen = 256
)

// manifest is lanedemo.json as written; parseManifest turns it into a
// workload or says what is wrong.
type manifest struct {
	Format  string           `json:"format"`
	Module  string           `json:"module"`
	Kernels []manifestKernel `json:"kernels"`
	Buffers []manifestBuffer `json:"buffers"`
	Input   string           `json:"input"`
	Output  string           `json:"output"`
	Step    []manifestLaunch `json:"step"`
}

type manifestKernel struct {
	Name   string          `json:"name"`
	Params []manifestParam `json:"params"`
}

type manifestParam struct {
	Name   string `json:"name"`
	Type   string `json:"type"`   // "f32*" a buffer of f32s, "i32" a scalar, "struct" a struct by value
	Access string `json:"access"` // buffers only: read, write or readwrite
	Size   uint32 `json:"size"`   // structs only: sizeof, in bytes
	Align  uint32 `json:"align"`  // structs only: alignof, in bytes
}

type manifestBuffer struct {
	Name   string `json:"name"`
	Type   string `json:"type"`   // element type
	Count  uint64 `json:"count"`  // elements
	Shared bool   `json:"shared"` // one per device, read by every tenant
	Init   string `json:"init"`   // zero (the default) or random
}

type manifestLaunch struct {
	Kernel      string            `json:"kernel"`
	Grid        []uint32          `json:"grid"`
	Block       []uint32          `json:"block"`
	SharedBytes uint32            `json:"shared_bytes"`
	Args        []json.RawMessage `json:"args"`
}

// workload is a checked manifest: what setup allocates and builds.
type workload struct {
	dir       string
	image     string // the module file, as found
	imageName string // its name inside dir
	module    kernels.Module
	provider  string // replay keys' provider: the module's name and image hash
	buffers   []bufferDecl
	input     int // index in buffers
	output    int
	step      []launchDecl
}

// bufferDecl is one manifest buffer.
type bufferDecl struct {
	name   string
	elem   cuda.ElementType
	count  uint64
	shared bool
	random bool
}

// launchDecl is one launch of the step: its kernel, shape and arguments,
// each a buffer (index in buffers) or a scalar.
type launchDecl struct {
	kernel string
	cfg    cuda.LaunchConfig
	args   []argDecl
}

type argDecl struct {
	buffer int // -1 for a scalar
	scalar cuda.Arg
}

// errManifest wraps what is wrong with a --kernels-from directory.
func errManifest(dir, format string, args ...any) error {
	return fmt.Errorf("%w: --kernels-from %s: "+format, append([]any{ErrConfig, dir}, args...)...)
}

// loadWorkload reads dir's manifest and module image and checks them.
// Both are read through an os.Root of dir: nothing outside it (through
// .. or a symbolic link) is read.
func loadWorkload(dir string) (*workload, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, errManifest(dir, "%v (give a directory holding %s and the module it names; see examples/customkernels)", err, ManifestFile)
	}
	defer root.Close()
	b, err := readRegular(root, ManifestFile, maxManifestBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, errManifest(dir, "no %s in it (the directory holds %s and the module it names; see examples/customkernels)", ManifestFile, ManifestFile)
	}
	if err != nil {
		return nil, errManifest(dir, "%v (the directory holds %s and the module it names; see examples/customkernels)", err, ManifestFile)
	}
	w, err := parseManifest(b)
	if err != nil {
		return nil, errManifest(dir, "%s: %v", ManifestFile, err)
	}
	w.dir = dir
	name, err := findImage(dir, w.image)
	if err != nil {
		return nil, errManifest(dir, "%v", err)
	}
	w.image, w.imageName = filepath.Join(dir, name), name
	if _, err := statRegular(root, name, maxModuleBytes); err != nil {
		return nil, errManifest(dir, "module: %v", err)
	}
	w.module.Name = strings.TrimSuffix(name, filepath.Ext(name))
	return w, nil
}

// readImage reads the module image, which loadWorkload only looked at,
// and keys the workload's replays by its hash.
func (w *workload) readImage() error {
	root, err := os.OpenRoot(w.dir)
	if err != nil {
		return errManifest(w.dir, "%v", err)
	}
	defer root.Close()
	if w.module.Image, err = readRegular(root, w.imageName, maxModuleBytes); err != nil {
		return errManifest(w.dir, "module: %v", err)
	}
	sum := sha256.Sum256(w.module.Image)
	w.provider = "lanedemo.user/" + w.module.Name + "@" + hex.EncodeToString(sum[:8])
	return nil
}

// statRegular checks that name is a regular, non-empty file of at most
// limit bytes inside root (not a FIFO, device or directory, which could
// block a read or never end).
func statRegular(root *os.Root, name string, limit int64) (os.FileInfo, error) {
	fi, err := root.Stat(name)
	if err != nil {
		return nil, err
	}
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("%s is not a regular file (%v)", name, fi.Mode().Type())
	case fi.Size() == 0:
		return nil, fmt.Errorf("%s is empty", name)
	case fi.Size() > limit:
		return nil, fmt.Errorf("%s is %d bytes, over the limit of %d", name, fi.Size(), limit)
	}
	return fi, nil
}

// readRegular reads a regular, non-empty file of at most limit bytes
// inside root (not a FIFO, device or directory, which could block or
// never end).
func readRegular(root *os.Root, name string, limit int64) ([]byte, error) {
	if _, err := statRegular(root, name, limit); err != nil {
		return nil, err
	}
	f, err := root.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("%s grew over the limit of %d bytes while being read", name, limit)
	}
	return b, err
}

// imageExts are the module images cuModuleLoadData takes.
var imageExts = []string{".ptx", ".cubin", ".fatbin"}

// findImage is the module file's name inside dir: the one the manifest
// names, or else the directory's only image.
func findImage(dir, named string) (string, error) {
	if named != "" {
		if !filepath.IsLocal(named) {
			return "", fmt.Errorf("module %q: name a file inside the directory", named)
		}
		if !slices.Contains(imageExts, filepath.Ext(named)) {
			return "", fmt.Errorf("module %q: name a module image, a file ending in %s", named, strings.Join(imageExts, ", "))
		}
		return named, nil
	}
	var found []string
	for _, ext := range imageExts {
		m, _ := filepath.Glob(filepath.Join(dir, "*"+ext))
		found = append(found, m...)
	}
	if len(found) != 1 {
		return "", fmt.Errorf("found %d module images (%s) and %s names none: name one in its \"module\" field", len(found), strings.Join(imageExts, ", "), ManifestFile)
	}
	return filepath.Base(found[0]), nil
}

// parseManifest decodes and checks a manifest (all but the files it
// names).
func parseManifest(b []byte) (*workload, error) {
	var m manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("not a manifest: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("not a manifest: data after its object")
	}
	if m.Format != ManifestFormat {
		return nil, fmt.Errorf("format %q: this lanedemo reads %q", m.Format, ManifestFormat)
	}
	w := &workload{image: m.Module, module: kernels.Module{Kernels: kernels.Registry{}}}
	if err := w.parseKernels(m.Kernels); err != nil {
		return nil, err
	}
	if err := w.parseBuffers(m); err != nil {
		return nil, err
	}
	if len(m.Step) == 0 || len(m.Step) > maxStepLaunches {
		return nil, fmt.Errorf("step: %d launches; give 1 to %d", len(m.Step), maxStepLaunches)
	}
	for i, l := range m.Step {
		d, err := w.parseLaunch(l)
		if err != nil {
			return nil, fmt.Errorf("step[%d] (%s): %v", i, l.Kernel, err)
		}
		w.step = append(w.step, d)
	}
	return w, nil
}

// checkName refuses an empty, overlong or NUL-bearing name.
func checkName(what, name string) error {
	if name == "" || len(name) > maxManifestNameLen || strings.ContainsRune(name, 0) {
		return fmt.Errorf("%s %q: give a name of 1 to %d bytes without NUL", what, name, maxManifestNameLen)
	}
	return nil
}

func (w *workload) parseKernels(ks []manifestKernel) error {
	if len(ks) == 0 || len(ks) > maxManifestItems {
		return fmt.Errorf("kernels: %d declared; declare 1 to %d", len(ks), maxManifestItems)
	}
	for _, k := range ks {
		if err := checkName("kernel", k.Name); err != nil {
			return err
		}
		if !identifier.MatchString(k.Name) {
			return fmt.Errorf("kernel %q: a kernel is named as its extern \"C\" function is: letters, digits and _, not starting with a digit", k.Name)
		}
		if w.module.Kernels[k.Name] != nil {
			return fmt.Errorf("kernel %q declared twice", k.Name)
		}
		if len(k.Params) > maxManifestItems {
			return fmt.Errorf("kernel %q: %d parameters; at most %d", k.Name, len(k.Params), maxManifestItems)
		}
		spec := cuda.KernelSpec{Name: k.Name}
		for _, p := range k.Params {
			param, err := parseParam(p)
			if err != nil {
				return fmt.Errorf("kernel %q: %v", k.Name, err)
			}
			if slices.ContainsFunc(spec.Params, func(q cuda.Param) bool { return q.Name == p.Name }) {
				return fmt.Errorf("kernel %q: parameter %q declared twice", k.Name, p.Name)
			}
			spec.Params = append(spec.Params, param)
		}
		w.module.Kernels[k.Name] = &kernels.Kernel{Spec: spec}
	}
	return nil
}

// identifier is a C identifier, as an extern "C" kernel is named.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

var accesses = map[string]cuda.Access{"read": cuda.AccessRead, "write": cuda.AccessWrite, "readwrite": cuda.AccessReadWrite}

// parseParam reads one parameter: "f32*" (with an access) is a buffer of
// f32s, "i32" a scalar.
func parseParam(p manifestParam) (cuda.Param, error) {
	if err := checkName("parameter", p.Name); err != nil {
		return cuda.Param{}, err
	}
	if p.Type == "struct" {
		if p.Access != "" {
			return cuda.Param{}, fmt.Errorf("parameter %q: a struct has no access (%q)", p.Name, p.Access)
		}
		if !cuda.ValidStruct(p.Size, p.Align) {
			return cuda.Param{}, fmt.Errorf("parameter %q: a struct of size %d aligned to %d; give its sizeof (1 to %d) and alignof (a power of two up to 256 dividing the size)", p.Name, p.Size, p.Align, cuda.MaxStructBytes)
		}
		return cuda.Param{Name: p.Name, Kind: cuda.ParamStruct, Size: p.Size, Align: p.Align}, nil
	}
	if p.Size != 0 || p.Align != 0 {
		return cuda.Param{}, fmt.Errorf("parameter %q: size and align are a struct's; a %s has neither", p.Name, p.Type)
	}
	elem, buffer := strings.CutSuffix(p.Type, "*")
	t, err := parseElementType(elem)
	if err != nil {
		return cuda.Param{}, fmt.Errorf("parameter %q: type %q: write an element type (bool, u8, u32, i8, i32, i64, u64, f16, bf16, f32, f64), with * for a buffer of them, or struct", p.Name, p.Type)
	}
	if !buffer {
		if p.Access != "" {
			return cuda.Param{}, fmt.Errorf("parameter %q: a scalar has no access (%q)", p.Name, p.Access)
		}
		return cuda.Param{Name: p.Name, Kind: cuda.ParamScalar, Elem: t}, nil
	}
	a, ok := accesses[p.Access]
	if !ok {
		return cuda.Param{}, fmt.Errorf("parameter %q: access %q: a buffer is read, write or readwrite", p.Name, p.Access)
	}
	return cuda.Param{Name: p.Name, Kind: cuda.ParamBuffer, Elem: t, Access: a}, nil
}

func (w *workload) parseBuffers(m manifest) error {
	if len(m.Buffers) == 0 || len(m.Buffers) > maxManifestItems {
		return fmt.Errorf("buffers: %d declared; declare 1 to %d", len(m.Buffers), maxManifestItems)
	}
	var own uint64
	for _, b := range m.Buffers {
		if err := checkName("buffer", b.Name); err != nil {
			return err
		}
		if w.bufferIndex(b.Name) >= 0 {
			return fmt.Errorf("buffer %q declared twice", b.Name)
		}
		t, err := parseElementType(b.Type)
		if err != nil {
			return fmt.Errorf("buffer %q: %v", b.Name, err)
		}
		if b.Count == 0 || b.Count > maxTenantBytes/t.Size() {
			return fmt.Errorf("buffer %q: count %d; give 1 to %d elements of %s", b.Name, b.Count, maxTenantBytes/t.Size(), t)
		}
		if b.Init != "" && b.Init != "zero" && b.Init != "random" {
			return fmt.Errorf("buffer %q: init %q: use zero or random", b.Name, b.Init)
		}
		if !b.Shared {
			if own += b.Count * t.Size(); own > maxTenantBytes {
				return fmt.Errorf("buffers: a tenant's own buffers are over %d bytes", maxTenantBytes)
			}
		}
		w.buffers = append(w.buffers, bufferDecl{name: b.Name, elem: t, count: b.Count, shared: b.Shared, random: b.Init == "random"})
	}
	var err error
	if w.input, err = w.ownBuffer("input", m.Input); err != nil {
		return err
	}
	w.output, err = w.ownBuffer("output", m.Output)
	return err
}

func (w *workload) bufferIndex(name string) int {
	return slices.IndexFunc(w.buffers, func(b bufferDecl) bool { return b.name == name })
}

// ownBuffer is the index of the tenant's own buffer named for role.
func (w *workload) ownBuffer(role, name string) (int, error) {
	i := w.bufferIndex(name)
	switch {
	case i < 0:
		return 0, fmt.Errorf("%s %q: name one of the buffers", role, name)
	case w.buffers[i].shared:
		return 0, fmt.Errorf("%s %q: a shared buffer is every tenant's; name one of the tenant's own", role, name)
	}
	return i, nil
}

// dim3 reads a grid or block of one to three sizes.
func dim3(what string, v []uint32) (cuda.Dim3, error) {
	if len(v) == 0 || len(v) > 3 {
		return cuda.Dim3{}, fmt.Errorf("%s %v: give 1 to 3 sizes", what, v)
	}
	d := cuda.Dim3{X: 1, Y: 1, Z: 1}
	for i, p := range []*uint32{&d.X, &d.Y, &d.Z}[:len(v)] {
		*p = v[i]
	}
	return d, nil
}

func (w *workload) parseLaunch(l manifestLaunch) (launchDecl, error) {
	k := w.module.Kernels[l.Kernel]
	if k == nil {
		return launchDecl{}, fmt.Errorf("kernel %q is not declared in kernels", l.Kernel)
	}
	d := launchDecl{kernel: l.Kernel, cfg: cuda.LaunchConfig{SharedBytes: l.SharedBytes}}
	var err error
	if d.cfg.Grid, err = dim3("grid", l.Grid); err != nil {
		return d, err
	}
	if d.cfg.Block, err = dim3("block", l.Block); err != nil {
		return d, err
	}
	if err := d.cfg.Validate(); err != nil {
		return d, err
	}
	params := k.Spec.Params
	if len(l.Args) != len(params) {
		return d, fmt.Errorf("%d args for %d parameters", len(l.Args), len(params))
	}
	for i, raw := range l.Args {
		a, err := w.parseArg(params[i], raw)
		if err != nil {
			return d, fmt.Errorf("arg %d (%s): %v", i, params[i].Name, err)
		}
		d.args = append(d.args, a)
	}
	return d, nil
}

// parseArg reads one argument: a buffer's name for a buffer parameter, a
// JSON number (or boolean) in the scalar's range for a scalar.
func (w *workload) parseArg(p cuda.Param, raw json.RawMessage) (argDecl, error) {
	if p.Kind == cuda.ParamBuffer {
		var name string
		if err := json.Unmarshal(raw, &name); err != nil {
			return argDecl{}, fmt.Errorf("got %s; give the name of a %s buffer", raw, p.Elem)
		}
		i := w.bufferIndex(name)
		switch {
		case i < 0:
			return argDecl{}, fmt.Errorf("buffer %q is not declared", name)
		case w.buffers[i].elem != p.Elem:
			return argDecl{}, fmt.Errorf("buffer %q holds %s; the parameter takes %s", name, w.buffers[i].elem, p.Elem)
		case w.buffers[i].shared && p.Access.Writes():
			return argDecl{}, fmt.Errorf("buffer %q is shared: every tenant reads it, so no launch may write it (the parameter's access is %s)", name, p.Access)
		}
		return argDecl{buffer: i}, nil
	}
	if p.Kind == cuda.ParamStruct {
		b, err := structBytes(p, raw)
		if err != nil {
			return argDecl{}, err
		}
		return argDecl{buffer: -1, scalar: cuda.StructArg(b)}, nil
	}
	bits, err := scalarBits(p.Elem, raw)
	if err != nil {
		return argDecl{}, err
	}
	return argDecl{buffer: -1, scalar: cuda.Arg{Kind: cuda.ParamScalar, Elem: p.Elem, Bits: bits}}, nil
}

// structBytes lays a struct argument out as C does: its fields, a list of
// one-key objects ({"f32": 0.5}, {"i64": 7}) in declaration order, each at
// the next multiple of its size, the rest up to sizeof zero padding.
func structBytes(p cuda.Param, raw json.RawMessage) ([]byte, error) {
	var fields []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || len(fields) == 0 {
		return nil, fmt.Errorf("got %s; give the struct's fields in order, as a list like [{\"f32\": 0.5}, {\"i64\": 7}]", raw)
	}
	b := make([]byte, 0, p.Size)
	for i, f := range fields {
		if len(f) != 1 {
			return nil, fmt.Errorf("field %d: give one {\"type\": value}", i)
		}
		for name, v := range f {
			t, err := parseElementType(name)
			if err != nil {
				return nil, fmt.Errorf("field %d: type %q: write an element type (bool, u8, u32, i8, i32, i64, u64, f16, bf16, f32, f64)", i, name)
			}
			bits, err := scalarBits(t, v)
			if err != nil {
				return nil, fmt.Errorf("field %d: %v", i, err)
			}
			if t.Size() > uint64(p.Align) {
				return nil, fmt.Errorf("field %d: a %s is aligned to %d bytes, more than the struct's align %d; the struct's alignof is at least its widest field's", i, t, t.Size(), p.Align)
			}
			for uint64(len(b))%t.Size() != 0 {
				b = append(b, 0)
			}
			b = binary.LittleEndian.AppendUint64(b, bits)[:len(b)+int(t.Size())]
		}
		if len(b) > int(p.Size) {
			return nil, fmt.Errorf("field %d ends at byte %d, past the struct's %d", i, len(b), p.Size)
		}
	}
	return append(b, make([]byte, int(p.Size)-len(b))...), nil
}

// integerRanges are the values each integer scalar type holds.
var integerRanges = map[cuda.ElementType][2]float64{cuda.U8: {0, math.MaxUint8}, cuda.I8: {math.MinInt8, math.MaxInt8},
	cuda.U32: {0, math.MaxUint32}, cuda.I32: {math.MinInt32, math.MaxInt32}}

// scalarBits is a JSON value as a scalar of type t, or why it is not one.
func scalarBits(t cuda.ElementType, raw json.RawMessage) (uint64, error) {
	if bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return 0, fmt.Errorf("got null; give a %s", t)
	}
	if t == cuda.Bool {
		var v bool
		if err := json.Unmarshal(raw, &v); err != nil {
			return 0, fmt.Errorf("got %s; give true or false", raw)
		}
		if v {
			return 1, nil
		}
		return 0, nil
	}
	var num json.Number
	if trimmed := bytes.TrimSpace(raw); len(trimmed) > 0 && trimmed[0] == '"' || json.Unmarshal(raw, &num) != nil {
		return 0, fmt.Errorf("got %s; give a number (not a string)", raw)
	}
	// 8-byte integers read exactly from their digits (a float64 holds
	// integers exactly only up to 2^53).
	switch t {
	case cuda.I64:
		v, err := strconv.ParseInt(num.String(), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s is not an i64 (an integer from %d to %d, written in digits)", num, int64(math.MinInt64), int64(math.MaxInt64))
		}
		return uint64(v), nil
	case cuda.U64:
		v, err := strconv.ParseUint(num.String(), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s is not a u64 (an integer from 0 to %d, written in digits)", num, uint64(math.MaxUint64))
		}
		return v, nil
	}
	v, err := num.Float64()
	if err != nil {
		return 0, fmt.Errorf("%s is beyond any number's range", num)
	}
	switch t {
	case cuda.F32:
		if math.Abs(v) > math.MaxFloat32 {
			return 0, fmt.Errorf("%v is beyond f32's range", v)
		}
		return uint64(math.Float32bits(float32(v))), nil
	case cuda.F16:
		h := half.Float16Bits(float32(v))
		if math.Abs(v) > math.MaxFloat32 || h&0x7fff == 0x7c00 {
			return 0, fmt.Errorf("%v is beyond f16's range (it rounds to infinity; the largest is 65504)", v)
		}
		return uint64(h), nil
	case cuda.BF16:
		h := half.BFloat16Bits(float32(v))
		if math.Abs(v) > math.MaxFloat32 || h&0x7fff == 0x7f80 {
			return 0, fmt.Errorf("%v is beyond bf16's range (it rounds to infinity)", v)
		}
		return uint64(h), nil
	case cuda.F64:
		return math.Float64bits(v), nil
	}
	r := integerRanges[t]
	lo, hi := r[0], r[1]
	if v != math.Trunc(v) || v < lo || v > hi {
		return 0, fmt.Errorf("%v is not a %s (an integer from %v to %v)", v, t, lo, hi)
	}
	return uint64(int64(v)) & (1<<(8*t.Size()) - 1), nil
}

// parseElementType parses an element type's name as it prints
// (cuda.ElementType.String).
func parseElementType(name string) (cuda.ElementType, error) {
	for t := cuda.Bool; t <= cuda.F64; t++ {
		if t.String() == name {
			return t, nil
		}
	}
	return 0, cuda.Contractf("parse element type", cuda.ErrElementType,
		"unknown element type %q; use one of bool, u8, u32, i8, i32, f16, bf16, f32, i64, u64, f64", name)
}
