// Package cache is the replay half of lanes: exact replay keys, segment
// discovery, capture, and the bounded executable cache of one lane's stream.
//
// The cache never infers replay safety. A provider attaches a [ProviderKey]
// to each command it is willing to see replayed, binding its implementation
// fingerprint, the operation, and every scalar it depends on; [Bind] adds the
// runtime payload (each region's device address, length and element type,
// and the retained host bytes of an upload). A command without a key, or
// with a region whose address scope nobody declared, runs eagerly with a
// typed [Reason].
//
// # Usage
//
// A lane, for each batch:
//
//  1. [Discover] the candidates: maximal runs of replayable compute commands,
//     split by eager-boundary nodes and by every non-replayable command.
//  2. [Cache.Prepare] them: every candidate gets one [Disposition]; misses
//     are captured only while preparation is open ([Cache.Configure]) and
//     the stream is quiescent.
//  3. Launch resident candidates with [Cache.Launch]; enqueue the rest
//     eagerly.
//
// [Cache.Seal] closes preparation; [Cache.Trim] releases everything while the
// stream is quiescent.
//
// # Concurrency properties
//
// Nothing here is safe for concurrent use: a cache belongs to the lane that
// owns its stream, as the lane core's single-owner design requires. Keys and
// the functions that build them are pure.
package cache
