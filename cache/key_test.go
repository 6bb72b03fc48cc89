package cache_test

import (
	"math/rand"
	"testing"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	discovery "github.com/lanesched/lanes/internal/discovery"
)

func buffer(id uint64, elem cuda.ElementType, addr uint64) cuda.Buffer {
	return cuda.Buffer{Device: 1, ID: id, Size: 1 << 20, Align: 256, Elem: elem, Addr: addr}
}

// keyInputs is everything a command key binds.
type keyInputs struct {
	fingerprint, op string
	scalars         []uint32
	flag            bool
	blob            []byte
	off, length     uint64
	addr            uint64
	elem            cuda.ElementType
	host            []byte
	upload          bool
}

func (in keyInputs) key() cache.Key {
	b := cache.NewKey(in.fingerprint, in.op)
	for _, s := range in.scalars {
		b.U32(s)
	}
	pk := b.Bool(in.flag).Bytes(in.blob).Finish()
	reg := cuda.Region{Buffer: buffer(7, in.elem, in.addr), Offset: in.off, Length: in.length}
	var c cuda.Command
	if in.upload {
		c = cuda.Command{Kind: cuda.KindUpload, Dst: reg, Host: in.host}
	} else {
		c = cuda.Command{Kind: cuda.KindZero, Dst: reg}
	}
	return discovery.Bind(pk, c)
}

func randomInputs(r *rand.Rand) keyInputs {
	in := keyInputs{
		fingerprint: "provider-" + string(rune('a'+r.Intn(26))), op: "op" + string(rune('a'+r.Intn(26))),
		scalars: []uint32{r.Uint32(), r.Uint32(), r.Uint32()}, flag: r.Intn(2) == 0,
		blob: []byte{byte(r.Intn(256)), byte(r.Intn(256))}, off: uint64(r.Intn(64)) * 4, length: uint64(1+r.Intn(64)) * 4,
		addr: 0x7f00_0000_0000 + uint64(r.Intn(1<<20))*256, elem: cuda.ElementType(1 + r.Intn(8)),
		upload: r.Intn(2) == 0,
	}
	in.host = make([]byte, in.length)
	r.Read(in.host)
	return in
}

// TestKeyChangesIffInputChanges: the same inputs give the same key; changing
// any one bound input (scalar, pointer, length, element type, host byte,
// operation, fingerprint, order of appends) changes it.
func TestKeyChangesIffInputChanges(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for trial := range 500 {
		in := randomInputs(r)
		base := in.key()
		same := in
		same.scalars = append([]uint32(nil), in.scalars...)
		if same.key() != base {
			t.Fatalf("trial %d: equal inputs: got keys %v and %v, want equal", trial, same.key(), base)
		}
		mutations := map[string]func(*keyInputs){
			"scalar":      func(k *keyInputs) { k.scalars[r.Intn(3)] ^= 1 << uint(r.Intn(32)) },
			"order":       func(k *keyInputs) { k.scalars[0], k.scalars[1] = k.scalars[1], k.scalars[0]+1 },
			"flag":        func(k *keyInputs) { k.flag = !k.flag },
			"blob":        func(k *keyInputs) { k.blob = append(k.blob, 0) },
			"pointer":     func(k *keyInputs) { k.addr += 256 },
			"offset":      func(k *keyInputs) { k.off += 4 },
			"length":      func(k *keyInputs) { k.length += 4; k.host = append(k.host, 0, 0, 0, 0) },
			"element":     func(k *keyInputs) { k.elem = k.elem%8 + 1 },
			"operation":   func(k *keyInputs) { k.op += "x" },
			"fingerprint": func(k *keyInputs) { k.fingerprint += "x" },
			"host byte": func(k *keyInputs) {
				if k.upload {
					k.host[r.Intn(len(k.host))] ^= 1
				} else {
					k.upload = true
				}
			},
		}
		for name, mutate := range mutations {
			m := in
			m.scalars = append([]uint32(nil), in.scalars...)
			m.host = append([]byte(nil), in.host...)
			m.blob = append([]byte(nil), in.blob...)
			if name == "order" && m.scalars[0] == m.scalars[1]+1 {
				continue
			}
			mutate(&m)
			if m.key() == base {
				t.Fatalf("trial %d: changing the %s: got the same key %v, want a different one", trial, name, base)
			}
		}
	}
}

func TestFloatsKeyByBits(t *testing.T) {
	neg := cache.NewKey("p", "o").F32(float32(negZero())).Finish()
	pos := cache.NewKey("p", "o").F32(0).Finish()
	if neg == pos {
		t.Fatalf("F32(-0) and F32(+0): got the same key %v, want different", neg)
	}
	if i, u := cache.NewKey("p", "o").I32(-1).Finish(), cache.NewKey("p", "o").U32(0xffffffff).Finish(); i != u {
		t.Fatalf("I32(-1) and U32(0xffffffff): got keys %v and %v, want equal (the same four bytes)", i, u)
	}
	if k := cache.NewKey("ab", "c").Finish(); k == cache.NewKey("a", "bc").Finish() {
		t.Fatalf(`NewKey("ab", "c") and NewKey("a", "bc"): got the same key %v, want different (strings are length-prefixed)`, k)
	}
	if got := cache.NewKey("p", "o").Finish().String(); len(got) != 64 {
		t.Fatalf("fingerprint: got %q (%d characters), want 64 hex digits", got, len(got))
	}
}

func negZero() float64 {
	z := 0.0
	return -z
}

// BenchmarkKey measures key building per command: a provider key for a
// launch (kernel, configuration, scalars) bound to its regions.
func BenchmarkKey(b *testing.B) {
	x, y := buffer(1, cuda.F32, 0x1000), buffer(2, cuda.F32, 0x200000)
	c := cuda.Command{Kind: cuda.KindLaunch, Kernel: "axpy_f32", Config: cuda.Linear(4096, 256),
		Args: []cuda.Arg{cuda.BufferArg(y.Whole()), cuda.BufferArg(x.Whole()), cuda.F32Arg(0.5), cuda.I32Arg(4096)}}
	b.Run("launch-key+bind", func(b *testing.B) {
		for range b.N {
			_ = discovery.Bind(cache.LaunchKey("lanes.kernels.v1", c), c)
		}
	})
	up := cuda.Command{Kind: cuda.KindUpload, Dst: x.Whole(), Host: make([]byte, x.Size)}
	b.Run("bind-upload-1MiB", func(b *testing.B) {
		pk := cache.NewKey("p", "upload").Finish()
		b.SetBytes(int64(len(up.Host)))
		for range b.N {
			_ = discovery.Bind(pk, up)
		}
	})
}

// TestKeyFunctionsKeyEachKindByWhatItIs: LaunchKey of a library call and
// CallKey of a launch key the command by what it is (a call's parameters,
// a launch's kernel), never by what the other kind would read.
func TestKeyFunctionsKeyEachKindByWhatItIs(t *testing.T) {
	reg := cuda.Region{Buffer: buffer(7, cuda.F32, 1<<20), Length: 64}
	call := func(p byte) cuda.Command {
		return cuda.Command{Kind: cuda.KindCall, LibraryCall: &cuda.LibraryCall{Name: "gemm", Params: []byte{p},
			Regions: []cuda.Touch{{Region: reg, Access: cuda.AccessWrite}}}}
	}
	launch := func(kernel string) cuda.Command {
		return cuda.Command{Kind: cuda.KindLaunch, Kernel: kernel, Config: cuda.Linear(16, 16), Args: []cuda.Arg{cuda.BufferArg(reg)}}
	}
	if cache.LaunchKey("p", call(1)) == cache.LaunchKey("p", call(2)) {
		t.Error("LaunchKey of two calls with different Params: got equal keys, want different")
	}
	if cache.CallKey("p", launch("inc")) == cache.CallKey("p", launch("fill_f32")) {
		t.Error("CallKey of launches of two kernels: got equal keys, want different")
	}
	if cache.LaunchKey("p", call(1)) != cache.CallKey("p", call(1)) || cache.CallKey("p", launch("inc")) != cache.LaunchKey("p", launch("inc")) {
		t.Error("a kind's key through the other function: got a different key, want the kind's own")
	}
}

// TestLaunchKeyBindsStructsAndLibraries: a struct argument's bytes key a
// launch (a scalar of the same bits does not collide with it), and a
// library call's library and workspace access key it.
func TestLaunchKeyBindsStructsAndLibraries(t *testing.T) {
	reg := cuda.Region{Buffer: buffer(7, cuda.F32, 1<<20), Length: 64}
	launch := func(a cuda.Arg) cuda.Command {
		return cuda.Command{Kind: cuda.KindLaunch, Kernel: "k", Config: cuda.Linear(16, 16), Args: []cuda.Arg{cuda.BufferArg(reg), a}}
	}
	s1, s2 := launch(cuda.StructArg([]byte{1, 0, 0, 0, 0, 0, 0, 0})), launch(cuda.StructArg([]byte{2, 0, 0, 0, 0, 0, 0, 0}))
	if cache.LaunchKey("p", s1) == cache.LaunchKey("p", s2) {
		t.Error("launches with structs of different bytes: got equal keys, want different")
	}
	if cache.LaunchKey("p", s1) != cache.LaunchKey("p", launch(cuda.StructArg([]byte{1, 0, 0, 0, 0, 0, 0, 0}))) {
		t.Error("launches with equal structs: got different keys, want equal")
	}
	if cache.LaunchKey("p", s1) == cache.LaunchKey("p", launch(cuda.U64Arg(1))) {
		t.Error("a struct and a scalar of the same bytes: got equal keys, want different")
	}
	lib := &cuda.Library{Name: "blas", WorkspaceBytes: 64}
	call := func(l *cuda.Library, ws cuda.Access) cuda.Command {
		return cuda.Command{Kind: cuda.KindCall, LibraryCall: &cuda.LibraryCall{Name: "gemm", Library: l, Workspace: ws,
			Regions: []cuda.Touch{{Region: reg, Access: cuda.AccessWrite}}}}
	}
	keys := map[cache.ProviderKey]string{}
	for name, c := range map[string]cuda.Command{"no library": call(nil, 0), "no workspace": call(lib, 0), "workspace read": call(lib, cuda.AccessRead),
		"workspace readwrite": call(lib, cuda.AccessReadWrite), "another library": call(&cuda.Library{Name: "other"}, 0)} {
		k := cache.CallKey("p", c)
		if other, dup := keys[k]; dup {
			t.Errorf("calls with %s and with %s: got equal keys, want different", name, other)
		}
		keys[k] = name
	}
}
