// Package ptx reads a PTX image's kernel signatures as the driver sees
// them, so the simulated device refuses the declarations the real one
// would, and both devices word a parameter mismatch alike.
package ptx

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
)

// Entry is one kernel (.entry) of a PTX image: its parameters' sizes in
// bytes, in order, and its launch bound.
type Entry struct {
	Name       string
	ParamSizes []uint64
	// ParamOffsets are where each parameter lies in the parameter buffer:
	// each aligned to its type's size, or to its .align.
	ParamOffsets []uint64
	// MaxBlockThreads is the most threads a block may have: the product of
	// .maxntid's sizes, or of .reqntid's; 0 where the image sets neither.
	MaxBlockThreads uint64
}

// ReadPTX reads the kernel entries of a PTX image (text, as nvcc -ptx
// writes it, read up to its first NUL as the driver reads it). It reports
// false when the image is a cubin (ELF) or a fatbin, which only the driver
// reads, and an error when it is neither PTX text nor one of those, or PTX
// whose entries cannot be read.
func ReadPTX(image []byte) (map[string]Entry, bool, error) {
	if bytes.HasPrefix(image, []byte("\x7fELF")) || bytes.HasPrefix(image, fatbinMagic) {
		return nil, false, nil
	}
	if nul := bytes.IndexByte(image, 0); nul >= 0 {
		image = image[:nul]
	}
	text := string(image)
	if !looksLikePTX(text) {
		return nil, true, fmt.Errorf("%w: the image is neither PTX text (with a .version directive) nor a cubin or fatbin; give the bytes nvcc -ptx, -cubin or -fatbin wrote, not a path or other text", kernels.ErrInvalidModule)
	}
	entries := map[string]Entry{}
	rest := stripComments(text)
	for {
		at := strings.Index(rest, ".entry")
		if at < 0 {
			return entries, true, nil
		}
		rest = rest[at+len(".entry"):]
		open := strings.IndexByte(rest, '(')
		body := strings.IndexByte(rest, '{')
		if open < 0 || (body >= 0 && body < open) {
			// An entry with no parameter list: none.
			name := strings.TrimSpace(rest[:max(body, 0)])
			if body < 0 || !validSymbol(name) {
				return nil, true, fmt.Errorf("%w: a PTX .entry without a readable name", kernels.ErrInvalidModule)
			}
			entries[name] = Entry{Name: name}
			rest = rest[body:]
			continue
		}
		name := strings.TrimSpace(rest[:open])
		if !validSymbol(name) {
			return nil, true, fmt.Errorf("%w: a PTX .entry named %s cannot be read", kernels.ErrInvalidModule, quote(name))
		}
		closing := strings.IndexByte(rest[open:], ')')
		if closing < 0 {
			return nil, true, fmt.Errorf("%w: PTX entry %s's parameter list does not end", kernels.ErrInvalidModule, name)
		}
		if _, dup := entries[name]; dup {
			return nil, true, fmt.Errorf("%w: the PTX image has two entries named %s", kernels.ErrInvalidModule, name)
		}
		e := Entry{Name: name}
		var used uint64 // the parameter buffer's bytes so far
		for _, decl := range strings.Split(rest[open+1:open+closing], ",") {
			if strings.TrimSpace(decl) == "" {
				continue
			}
			size, align, err := paramBytes(decl)
			if err != nil {
				return nil, true, fmt.Errorf("%w: PTX entry %s: %v", kernels.ErrInvalidModule, name, err)
			}
			offset := (used + align - 1) &^ (align - 1)
			e.ParamSizes = append(e.ParamSizes, size)
			e.ParamOffsets = append(e.ParamOffsets, offset)
			used = offset + size
		}
		rest = rest[open+closing+1:]
		// The performance directives between ')' and the body.
		end := strings.IndexByte(rest, '{')
		if end < 0 {
			end = len(rest)
		}
		if err := e.readBounds(rest[:end]); err != nil {
			return nil, true, fmt.Errorf("%w: PTX entry %s: %v", kernels.ErrInvalidModule, name, err)
		}
		entries[name] = e
		rest = rest[end:]
	}
}

// fatbinMagic begins a fatbin (0xBA55ED50, little-endian).
var fatbinMagic = []byte{0x50, 0xed, 0x55, 0xba}

// quote is s quoted, cut to a readable length for an error.
func quote(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return strconv.Quote(s)
}

// looksLikePTX reports whether an image is PTX text: printable, with a
// .version or .entry directive.
func looksLikePTX(text string) bool {
	if !strings.Contains(text, ".version") && !strings.Contains(text, ".entry") {
		return false
	}
	for i := 0; i < len(text) && i < 4096; i++ {
		if c := text[i]; c < 0x09 || (c > 0x0d && c < 0x20) {
			return false // binary: a cubin (ELF) or a fatbin
		}
	}
	return true
}

// stripComments removes // and /* */ comments.
func stripComments(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "//"):
			j := strings.IndexByte(s[i:], '\n')
			if j < 0 {
				return b.String()
			}
			i += j
		case strings.HasPrefix(s[i:], "/*"):
			j := strings.Index(s[i+2:], "*/")
			if j < 0 {
				return b.String()
			}
			i += j + 4
			b.WriteByte(' ')
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String()
}

// validSymbol reports whether s is a PTX identifier.
func validSymbol(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		letter := c == '_' || c == '$' || c == '%' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// ptxTypeBytes are the sizes of PTX's fundamental types.
var ptxTypeBytes = map[string]uint64{
	".b8": 1, ".u8": 1, ".s8": 1,
	".b16": 2, ".u16": 2, ".s16": 2, ".f16": 2, ".bf16": 2,
	".b32": 4, ".u32": 4, ".s32": 4, ".f32": 4, ".f16x2": 4, ".bf16x2": 4,
	".b64": 8, ".u64": 8, ".s64": 8, ".f64": 8,
}

// paramBytes is the size and alignment of one .param declaration: its
// type's size, times its array length (a struct passed by value is
// .align N .b8 name[size]), aligned to its .align, else to its type's
// size.
func paramBytes(decl string) (size, align uint64, err error) {
	fields := strings.Fields(decl)
	if len(fields) < 3 || fields[0] != ".param" {
		return 0, 0, fmt.Errorf("parameter %s is not a .param declaration", quote(decl))
	}
	lanes := uint64(1)
	pointer := false // after .ptr, an .align is the pointed-to memory's, not the parameter's
	for i := 1; i < len(fields)-1; i++ {
		f := fields[i]
		if n, ok := ptxTypeBytes[f]; ok {
			size = n
		}
		switch f {
		case ".v2":
			lanes = 2
		case ".v4":
			lanes = 4
		case ".ptr":
			pointer = true
		case ".align":
			n, perr := strconv.ParseUint(fields[i+1], 10, 32)
			if perr != nil || n == 0 || n&(n-1) != 0 {
				return 0, 0, fmt.Errorf("parameter %s has an .align that is not a power of two", quote(decl))
			}
			if !pointer {
				align = n
			}
			i++
		}
	}
	if size == 0 {
		return 0, 0, fmt.Errorf("parameter %s has no type of known size", quote(decl))
	}
	if align == 0 {
		align = size * lanes
	}
	size *= lanes
	name := fields[len(fields)-1]
	if open := strings.IndexByte(name, '['); open >= 0 {
		n, perr := strconv.ParseUint(strings.TrimSuffix(name[open+1:], "]"), 10, 32)
		if perr != nil || n == 0 || !strings.HasSuffix(name, "]") {
			return 0, 0, fmt.Errorf("parameter %s has no readable array length (1 or more)", quote(name))
		}
		size *= n
	}
	return size, align, nil
}

// readBounds reads .maxntid and .reqntid among an entry's directives.
func (e *Entry) readBounds(directives string) error {
	fields := strings.Fields(strings.ReplaceAll(directives, ",", " "))
	for i := 0; i < len(fields); i++ {
		kind := fields[i]
		if kind != ".maxntid" && kind != ".reqntid" {
			continue
		}
		dims := [3]uint64{1, 1, 1}
		n := 0
		for i+1 < len(fields) && n < 3 && !strings.HasPrefix(fields[i+1], ".") {
			v, err := strconv.ParseUint(fields[i+1], 10, 32)
			if err != nil || v == 0 {
				return fmt.Errorf("%s size %s is not a decimal from 1 to 2^32-1", kind, quote(fields[i+1]))
			}
			dims[n] = v
			n++
			i++
		}
		if n == 0 {
			return fmt.Errorf("%s without sizes", kind)
		}
		threads := min(dims[0]*dims[1], 1<<32) * dims[2] // no wrap: each is below 2^32
		if e.MaxBlockThreads == 0 || threads < e.MaxBlockThreads {
			e.MaxBlockThreads = threads
		}
	}
	return nil
}

// CheckImage compares a module's declarations with its image, as the driver
// does when it loads one (see the real device's LoadModule): every declared
// kernel must be an entry of the image, with as many parameters, each of
// the size declared (kernels.ParamSize). It reports false, checking nothing, when
// the image is not PTX text: a cubin or fatbin only the driver reads.
func CheckImage(m kernels.Module) (map[string]Entry, bool, error) {
	entries, ok, err := ReadPTX(m.Image)
	if !ok || err != nil {
		return nil, ok, err
	}
	for _, name := range m.Kernels.Names() {
		spec := &m.Kernels[name].Spec
		e, found := entries[name]
		if !found {
			return nil, true, fmt.Errorf("%w: module %q has no kernel %q (declare it extern \"C\" so its name is not mangled)", kernels.ErrInvalidModule, m.Name, name)
		}
		for i := range spec.Params {
			if i >= len(e.ParamSizes) {
				return nil, true, TooFewParams(m.Name, spec, i, "the image has")
			}
			if err := CheckParam(m.Name, spec, i, e.ParamSizes[i], e.ParamOffsets[i], "the image has"); err != nil {
				return nil, true, err
			}
		}
		if len(e.ParamSizes) > len(spec.Params) {
			return nil, true, TooManyParams(m.Name, spec, e.ParamSizes[len(spec.Params)], "the image has")
		}
	}
	return entries, true, nil
}

// The checks of declared parameters against what a module's image holds,
// shared by both backends (the real one reads sizes and offsets from the
// driver, cuFuncGetParamInfo; the simulated one from the PTX) so that the
// same wrong declaration is refused with the same error. seen says where
// the sizes came from ("the image has", "the driver sees").

// CheckParam compares declared parameter i with its size and offset in
// the image: the sizes must be equal, and a struct's declared alignment
// must divide its offset.
func CheckParam(module string, spec *cuda.KernelSpec, i int, size, offset uint64, seen string) error {
	p := spec.Params[i]
	if got := kernels.ParamSize(p); got != size {
		return fmt.Errorf("%w: kernel %q of module %q declares parameter %d (%s) as %s, %d B, but %s %d B there%s",
			kernels.ErrInvalidModule, spec.Name, module, i, p.Name, DescribeParam(p), got, seen, size, wideParamHint(p, size))
	}
	if p.Kind == cuda.ParamStruct && offset%uint64(p.Align) != 0 {
		return fmt.Errorf("%w: kernel %q of module %q declares parameter %d (%s) as %s, but %s it at offset %d, which is not a multiple of its alignment; declare alignof of the C type",
			kernels.ErrInvalidModule, spec.Name, module, i, p.Name, DescribeParam(p), seen, offset)
	}
	return nil
}

// TooFewParams is the error for a declaration of more parameters than the
// image's function has (it has have).
func TooFewParams(module string, spec *cuda.KernelSpec, have int, seen string) error {
	return fmt.Errorf("%w: kernel %q of module %q declares %d parameters, but %s %d; declare the function's parameters exactly, in order",
		kernels.ErrInvalidModule, spec.Name, module, len(spec.Params), seen, have)
}

// TooManyParams is the error for a declaration of fewer parameters than
// the image's function has (the first undeclared one of next bytes).
func TooManyParams(module string, spec *cuda.KernelSpec, next uint64, seen string) error {
	return fmt.Errorf("%w: kernel %q of module %q declares %d parameters, but %s more (parameter %d: %d B); declare every parameter",
		kernels.ErrInvalidModule, spec.Name, module, len(spec.Params), seen, len(spec.Params), next)
}

// wideParamHint is what an error about a parameter of size bytes adds
// when it is wider than any scalar and not declared a struct.
func wideParamHint(p cuda.Param, size uint64) string {
	if size <= 8 || p.Kind == cuda.ParamStruct {
		return ""
	}
	return fmt.Sprintf(" (a struct or vector passed by value: declare it cuda.ParamStruct with Size %d and its alignment, and pass cuda.StructArg)", size)
}

// DescribeParam says what a declared parameter is.
func DescribeParam(p cuda.Param) string {
	switch p.Kind {
	case cuda.ParamBuffer:
		return fmt.Sprintf("a %v buffer (a device pointer)", p.Elem)
	case cuda.ParamStruct:
		return fmt.Sprintf("a struct of %d B aligned to %d", p.Size, p.Align)
	}
	return fmt.Sprintf("a %v scalar", p.Elem)
}
