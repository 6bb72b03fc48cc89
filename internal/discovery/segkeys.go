// Binding commands to keys, and the keys of segments and shapes.

package discovery

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/keydomain"
)

// Bind binds a provider key to the command's runtime payload: the operation
// name, each region's device address, length and element type, in the
// command's region order, and the retained host bytes of an upload. Replaying
// the same key therefore touches exactly the same bytes with exactly the
// same host input.
func Bind(pk cache.ProviderKey, c cuda.Command) cache.Key { return (*Memo)(nil).bind(pk, c) }

func (m *Memo) bind(pk cache.ProviderKey, c cuda.Command) cache.Key {
	var local [1024]byte
	b := bindInput(m.input(local[:0]), pk, c)
	if c.Kind == cuda.KindUpload {
		return uploadKey(b, c.Host)
	}
	return m.sum(binary.LittleEndian.AppendUint64(b, 0))
}

// bindInput appends a command key's input, up to its host bytes, to b.
func bindInput(b []byte, pk cache.ProviderKey, c cuda.Command) []byte {
	b = append(b, keydomain.Command...)
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
func uploadKey(b, host []byte) cache.Key {
	b = binary.LittleEndian.AppendUint64(b, 1)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(host)))
	h := sha256.New()
	h.Write(b)
	h.Write(host)
	var k cache.Key
	h.Sum(k[:0])
	return k
}

// appendRegion appends what a key binds of a region: address, length and
// element type.
func appendRegion(b []byte, r cuda.Region) []byte {
	b = binary.LittleEndian.AppendUint64(b, r.Addr())
	b = binary.LittleEndian.AppendUint64(b, r.Length)
	return append(b, keydomain.ElementTag(r.Buffer.Elem))
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
func (m *Memo) segmentKey(keys []cache.Key) SegmentKey {
	var local [2048]byte
	return m.sum(segmentInput(m.input(local[:0]), keys))
}

// segmentInput appends the segment key's input to b.
func segmentInput(b []byte, keys []cache.Key) []byte {
	b = append(b, keydomain.Segment...)
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
	keys []cache.Key
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

// SegmentKey identifies a captured executable: the ordered keys of the
// commands it replays.
type SegmentKey [32]byte

// String is the segment's lowercase hex fingerprint, the name spans and
// reports give an executable.
func (k SegmentKey) String() string { return hex.EncodeToString(k[:]) }

// Short is the first 12 hex digits of the fingerprint.
func (k SegmentKey) Short() string { return k.String()[:12] }
