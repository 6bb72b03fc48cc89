// Keys: provider keys, bound command keys, segment and shape keys, how
// they are built, and the Memo that reuses them across a lane's batches.

package cache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"

	"github.com/lanesched/lanes/cuda"
)

// Domain separators: a command key can never equal a segment key, nor a key
// of another format version.
const (
	commandKeyDomain = "lanes.cuda.command-replay.v1\x00"
	segmentKeyDomain = "lanes.cuda.executable-segment.v1\x00"
)

// ProviderKey is the replay identity a provider declares for one command:
// its implementation fingerprint, the operation, and every launch scalar and
// topology fact the provider chooses to bind. It does not yet bind the
// runtime payload (addresses and host bytes); [Bind] does. Build it with
// [NewKey].
type ProviderKey [32]byte

// Key is the exact replay key of one command: a provider key bound to the
// command's runtime payload.
type Key [32]byte

// SegmentKey identifies a captured executable: the ordered keys of the
// commands it replays.
type SegmentKey [32]byte

// String is the key's lowercase hex fingerprint.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// String is the key's lowercase hex fingerprint.
func (k ProviderKey) String() string { return hex.EncodeToString(k[:]) }

// String is the segment's lowercase hex fingerprint, the name spans and
// reports give an executable.
func (k SegmentKey) String() string { return hex.EncodeToString(k[:]) }

// Short is the first 12 hex digits of the fingerprint.
func (k SegmentKey) Short() string { return k.String()[:12] }

// KeyBuilder builds a [ProviderKey] with typed, fixed-width appends, so two
// different sequences of values can never hash the same bytes. It is not
// safe for concurrent use; the zero value is not usable.
type KeyBuilder struct{ buf []byte }

// NewKey starts a provider key for one operation of one provider
// implementation; both strings are length-prefixed.
func NewKey(providerFingerprint, operation string) *KeyBuilder {
	b := &KeyBuilder{buf: make([]byte, 0, 256)}
	b.start(providerFingerprint, operation)
	return b
}

func (b *KeyBuilder) start(providerFingerprint, operation string) {
	b.buf = append(b.buf, commandKeyDomain...)
	b.str(providerFingerprint)
	b.str(operation)
}

func (b *KeyBuilder) str(s string) {
	b.U64(uint64(len(s)))
	b.buf = append(b.buf, s...)
}

// U64 appends a uint64.
func (b *KeyBuilder) U64(v uint64) *KeyBuilder {
	b.buf = binary.LittleEndian.AppendUint64(b.buf, v)
	return b
}

// U32 appends a uint32.
func (b *KeyBuilder) U32(v uint32) *KeyBuilder {
	b.buf = binary.LittleEndian.AppendUint32(b.buf, v)
	return b
}

// I32 appends an int32.
func (b *KeyBuilder) I32(v int32) *KeyBuilder { return b.U32(uint32(v)) }

// F32 appends a float32 by its bit pattern: -0 and +0 differ, and so do
// NaNs with different payloads.
func (b *KeyBuilder) F32(v float32) *KeyBuilder { return b.U32(math.Float32bits(v)) }

// Bool appends a boolean as one byte.
func (b *KeyBuilder) Bool(v bool) *KeyBuilder {
	if v {
		b.buf = append(b.buf, 1)
	} else {
		b.buf = append(b.buf, 0)
	}
	return b
}

// Bytes appends a length-prefixed byte string.
func (b *KeyBuilder) Bytes(v []byte) *KeyBuilder {
	b.U64(uint64(len(v)))
	b.buf = append(b.buf, v...)
	return b
}

// Finish returns the provider key. The builder must not be used after.
func (b *KeyBuilder) Finish() ProviderKey { return sha256.Sum256(b.buf) }

// LaunchKey is the provider key of a kernel launch that binds its kernel,
// launch configuration and scalar arguments: what a provider that trusts
// its kernel to be a pure function of these declares. Given a library
// call, it is CallKey's; given a transfer (a copy, a zero, a stage in or
// out), it keys the transfer's kind, and Bind binds its regions and
// staging: each kind is keyed by what it is.
func LaunchKey(providerFingerprint string, c cuda.Command) ProviderKey {
	if c.Kind == cuda.KindCall {
		return CallKey(providerFingerprint, c) // a call's key is its own
	}
	var scratch [512]byte
	b := KeyBuilder{buf: scratch[:0]}
	if c.Kind != cuda.KindLaunch {
		b.start(providerFingerprint, "transfer:"+c.Kind.String())
		return b.Finish()
	}
	b.start(providerFingerprint, c.Kernel)
	g, bl := c.Config.Grid, c.Config.Block
	for _, v := range []uint32{g.X, g.Y, g.Z, bl.X, bl.Y, bl.Z, c.Config.SharedBytes} {
		b.U32(v)
	}
	b.U64(uint64(len(c.Args)))
	for _, a := range c.Args {
		switch a.Kind {
		case cuda.ParamScalar:
			b.U32(uint32(a.Elem)).U64(a.Bits)
		case cuda.ParamStruct:
			b.U32(1 << 16).Bytes([]byte(a.Struct)) // the element-type tags stay below 1<<16
		default:
			b.U32(0)
		}
	}
	return b.Finish()
}

// CallKey is the provider key of a library call that binds its name, its
// parameters (cuda.LibraryCall.Params) and how it touches each region: what
// a provider that trusts the call to be a pure function of these declares.
// The regions themselves are bound by Bind, as a launch's are. Given a
// launch, it is LaunchKey's.
func CallKey(providerFingerprint string, c cuda.Command) ProviderKey {
	lc := c.LibraryCall
	if c.Kind == cuda.KindLaunch || (lc == nil && c.Kind != cuda.KindCall) {
		return LaunchKey(providerFingerprint, c) // a launch's key is its own
	}
	var scratch [512]byte
	b := KeyBuilder{buf: scratch[:0]}
	if lc == nil {
		b.start(providerFingerprint, "call:")
		return b.Finish()
	}
	b.start(providerFingerprint, "call:"+lc.Name)
	b.Bytes(lc.Params)
	b.U64(uint64(len(lc.Regions)))
	for _, t := range lc.Regions {
		b.U32(uint32(t.Access))
	}
	if lc.Library != nil { // the lane's workspace, a region of its own
		b.Bytes([]byte(lc.Library.Name))
		b.U32(uint32(lc.Workspace))
	}
	return b.Finish()
}

// elementTag is the stable one-byte tag of an element type in keys.
func elementTag(t cuda.ElementType) byte { return byte(t) - 1 }

// Bind binds a provider key to the command's runtime payload: the operation
// name, each region's device address, length and element type, in the
// command's region order, and the retained host bytes of an upload. Replaying
// the same key therefore touches exactly the same bytes with exactly the
// same host input.
func Bind(pk ProviderKey, c cuda.Command) Key { return (*Memo)(nil).bind(pk, c) }

func (m *Memo) bind(pk ProviderKey, c cuda.Command) Key {
	var local [1024]byte
	b := bindInput(m.input(local[:0]), pk, c)
	if c.Kind == cuda.KindUpload {
		return uploadKey(b, c.Host)
	}
	return m.sum(binary.LittleEndian.AppendUint64(b, 0))
}

// bindInput appends a command key's input, up to its host bytes, to b.
func bindInput(b []byte, pk ProviderKey, c cuda.Command) []byte {
	b = append(b, commandKeyDomain...)
	b = append(b, pk[:]...)
	if c.Kind == cuda.KindLaunch {
		b = binary.LittleEndian.AppendUint64(b, uint64(len("launch:")+len(c.Kernel)))
		b = append(append(b, "launch:"...), c.Kernel...)
	} else {
		op := c.Kind.String()
		b = binary.LittleEndian.AppendUint64(b, uint64(len(op)))
		b = append(b, op...)
	}
	switch c.Kind {
	case cuda.KindLaunch:
		n := 0
		for i := range c.Args {
			if c.Args[i].Kind == cuda.ParamBuffer {
				n++
			}
		}
		b = binary.LittleEndian.AppendUint64(b, uint64(n))
		for i := range c.Args {
			if c.Args[i].Kind == cuda.ParamBuffer {
				b = appendRegion(b, c.Args[i].Region)
			}
		}
	case cuda.KindCopy:
		b = binary.LittleEndian.AppendUint64(b, 2)
		b = appendRegion(appendRegion(b, c.Src), c.Dst)
	case cuda.KindCall:
		// Its regions in declared order (the provider key covers its name
		// and parameters: CallKey).
		b = binary.LittleEndian.AppendUint64(b, uint64(len(c.LibraryCall.Regions)))
		for _, t := range c.LibraryCall.Regions {
			b = appendRegion(b, t.Region)
		}
	case cuda.KindStageIn, cuda.KindStageOut:
		// The staging's identity, not its bytes: a replay reads whatever
		// the host wrote there last (the input key covers the bytes).
		dev := c.Dst
		if c.Kind == cuda.KindStageOut {
			dev = c.Src
		}
		b = binary.LittleEndian.AppendUint64(b, 1)
		b = appendRegion(b, dev)
		for _, v := range []uint64{c.Staging.Buffer.Device, c.Staging.Buffer.ID, c.Staging.Offset, c.Staging.Length} {
			b = binary.LittleEndian.AppendUint64(b, v)
		}
	default:
		b = binary.LittleEndian.AppendUint64(b, 1)
		b = appendRegion(b, c.Dst)
	}
	return b
}

// uploadKey hashes an upload's key input and then its host bytes: an
// upload's key covers them, so it is never memoized.
func uploadKey(b, host []byte) Key {
	b = binary.LittleEndian.AppendUint64(b, 1)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(host)))
	h := sha256.New()
	h.Write(b)
	h.Write(host)
	var k Key
	h.Sum(k[:0])
	return k
}

// appendRegion appends what a key binds of a region: address, length and
// element type.
func appendRegion(b []byte, r cuda.Region) []byte {
	b = binary.LittleEndian.AppendUint64(b, r.Addr())
	b = binary.LittleEndian.AppendUint64(b, r.Length)
	return append(b, elementTag(r.Buffer.Elem))
}

// ShapeKey identifies what a segment does regardless of where: the ordered
// command kinds, kernels, argument kinds and element types, without
// addresses, lengths, scalars or host bytes. Two candidates of one shape
// can share an executable by in-place update.
type ShapeKey [32]byte

// shapeOf hashes the shape of commands.
func (m *Memo) shapeOf(cmds []Command) ShapeKey {
	var local [1024]byte
	return m.sum(shapeInput(m.input(local[:0]), cmds))
}

// shapeInput appends the shape key's input to b.
func shapeInput(b []byte, cmds []Command) []byte {
	b = append(b, "lanes.cuda.segment-shape.v1\x00"...)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(cmds)))
	for _, c := range cmds {
		b = append(b, byte(c.Cmd.Kind))
		b = binary.LittleEndian.AppendUint64(b, uint64(len(c.Cmd.Kernel)))
		b = append(b, c.Cmd.Kernel...)
		b = binary.LittleEndian.AppendUint64(b, uint64(len(c.Cmd.Args)))
		for _, a := range c.Cmd.Args {
			elem := a.Elem
			if a.Kind == cuda.ParamBuffer {
				elem = a.Region.Buffer.Elem
			}
			b = append(b, byte(a.Kind), byte(elem))
		}
	}
	return b
}

// segmentKey hashes the ordered command keys of a segment.
func (m *Memo) segmentKey(keys []Key) SegmentKey {
	var local [2048]byte
	return m.sum(segmentInput(m.input(local[:0]), keys))
}

// segmentInput appends the segment key's input to b.
func segmentInput(b []byte, keys []Key) []byte {
	b = append(b, segmentKeyDomain...)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(keys)))
	for _, k := range keys {
		b = append(b, k[:]...)
	}
	return b
}

// Memo remembers the keys it hashed: the same key input gives the same
// SHA-256 without hashing again, found by a map lookup of the input bytes.
// The result is exactly what hashing would give, so a memo changes no key,
// only what a steady workload pays for them (its commands, segments and
// shapes repeat step after step). Uploads, whose keys cover their host
// bytes, are always hashed. A memo belongs to one goroutine, like the lane
// that holds it; the nil memo hashes everything.
type Memo struct {
	sums  map[string][32]byte
	limit int
	buf   []byte // key inputs are built here (a larger one grows a copy)

	// last and keys are the slices of the last discovery, reused by the next.
	last Discovery
	keys []Key
}

// Release drops the slices the memo reuses between discoveries (after an
// outsized batch): the next discovery allocates them at its own size.
func (m *Memo) Release() {
	if m != nil {
		m.last, m.keys, m.buf = Discovery{}, nil, nil
	}
}

// NewMemo returns a memo of at most limit inputs; when full it starts
// over.
func NewMemo(limit int) *Memo {
	return &Memo{sums: make(map[string][32]byte, min(limit, 256)), limit: max(limit, 1), buf: make([]byte, 0, 4096)}
}

// input is where a key's input is built: the memo's buffer, or local
// without a memo. Nothing keeps the input afterwards (sum copies what it
// remembers), so local stays on its caller's stack.
func (m *Memo) input(local []byte) []byte {
	if m == nil {
		return local
	}
	return m.buf[:0]
}

func (m *Memo) sum(input []byte) [32]byte {
	if m == nil {
		return sha256.Sum256(input)
	}
	if k, ok := m.sums[string(input)]; ok {
		return k
	}
	k := sha256.Sum256(input)
	if len(m.sums) >= m.limit {
		clear(m.sums)
	}
	m.sums[string(input)] = k
	return k
}
