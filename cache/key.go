// Keys: provider keys, bound command keys, segment and shape keys, how
// they are built, and the Memo that reuses them across a lane's batches.

package cache

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"math"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/keydomain"
)

// ProviderKey is the replay identity a provider declares for one command:
// its implementation fingerprint, the operation, and every launch scalar and
// topology fact the provider chooses to bind. It does not yet bind the
// runtime payload (addresses and host bytes); the lane binds that. Build it with
// [NewKey].
type ProviderKey [32]byte

// Key is the exact replay key of one command: a provider key bound to the
// command's runtime payload.
type Key [32]byte

// String is the key's lowercase hex fingerprint.
func (k Key) String() string { return hex.EncodeToString(k[:]) }

// String is the key's lowercase hex fingerprint.
func (k ProviderKey) String() string { return hex.EncodeToString(k[:]) }

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
	b.buf = append(b.buf, keydomain.Command...)
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
// out), it keys the transfer's kind, and the lane binds its regions and
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
// The regions themselves are bound by the lane, as a launch's are. Given a
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
