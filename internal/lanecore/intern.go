// Sharing identical attributions: receipts of a tenant's steady steps hold
// one copy of their rows.

package lanecore

import (
	"hash/maphash"
	"slices"

	lanes "github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/programs"
)

// internLimit bounds the distinct attributions a lane remembers: more than
// a lane's tenants times their batch shapes; when full it starts over. A
// workload whose rows differ every step (a token count that changes, say)
// pays what it paid without interning, one copy per step, plus a hash, and
// the lane keeps at most this many copies alive (a few hundred KB).
const internLimit = 256

// interner shares one read-only copy of slices that repeat. A steady
// workload attributes every step of a tenant identically (the same rows,
// the same logical commands of a replayed segment), so a lane hands each
// receipt the copy it made the first time instead of allocating new rows
// per step: the rows were the bulk of what a submission allocated, and
// allocation is what drives the garbage collector of a busy process.
type interner[T comparable] struct {
	known map[uint64][]T
}

// intern returns a slice equal to s that the caller may keep but not
// modify; s itself stays the caller's (scratch) slice. key is s's hash.
func (in *interner[T]) intern(key uint64, s []T) []T {
	if len(s) == 0 {
		return nil
	}
	if got, ok := in.known[key]; ok && slices.Equal(got, s) {
		return got
	}
	out := slices.Clip(slices.Clone(s)) // an append by one holder copies, never writes into the shared array
	if len(s) > keepScratch {
		return out // an outsized batch's attribution is its receipt's alone
	}
	if in.known == nil || len(in.known) >= internLimit {
		in.known = make(map[uint64][]T, 64)
	}
	in.known[key] = out // a colliding, unequal slice replaces the older one
	return out
}

// attributionHash hashes rows and logical commands for their interners:
// a multiply-xor mix of their words (a collision costs only a copy, as the
// interner compares what it finds), with operation names hashed by content.
type attributionHash struct {
	seed maphash.Seed
}

func newAttributionHash() *attributionHash { return &attributionHash{seed: maphash.MakeSeed()} }

// mix folds one word into h (FNV-1a's prime over 64-bit words).
func mix(h, v uint64) uint64 { return (h ^ v) * 0x100000001b3 }

func (a *attributionHash) rows(rows []lanes.Row) uint64 {
	h := uint64(len(rows))
	for _, r := range rows {
		h = mix(h, uint64(r.Index))
		h = mix(h, uint64(r.Node))
		h = mix(h, maphash.String(a.seed, r.Op))
		h = mix(h, uint64(r.Work.Form)|uint64(r.Phase)<<8|uint64(r.Reason)<<16|uint64(boolBit(r.Replayed))<<24)
		h = mix(h, uint64(r.Work.ParticipantStart)<<32|uint64(r.Work.ParticipantCount))
		h = mix(h, r.Work.Tokens)
		h = mix(h, uint64(r.Dispatches))
		h = mix(h, uint64(r.Transfers))
		h = mix(h, uint64(r.GraphNodes))
	}
	return h
}

func (a *attributionHash) logical(cmds []programs.LogicalCommand) uint64 {
	h := uint64(len(cmds))
	for _, c := range cmds {
		h = mix(h, uint64(c.Ordinal))
		h = mix(h, uint64(c.Node))
		h = mix(h, uint64(c.GraphNodes))
	}
	return h
}

func boolBit(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}
