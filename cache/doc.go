// Package cache is the words of replay: exact replay keys, the discovery
// of replayable segments, and what preparation did to each and why a
// command was not replayed. The bounded executable cache of one lane's
// stream that acts on them is internal (internal/execcache): a lane owns
// it.
//
// The cache never infers replay safety. A provider attaches a [ProviderKey]
// to each command it is willing to see replayed, binding its implementation
// fingerprint, the operation, and every scalar it depends on; [Bind] adds the
// runtime payload (each region's device address, length and element type,
// and the retained host bytes of an upload). A command without a key, or
// with a region whose address scope nobody declared, runs eagerly with a
// typed [Reason].
//
// For each batch a lane [Discover]s the candidates (maximal runs of
// replayable compute commands, split by eager-boundary nodes and by every
// non-replayable command), prepares them (each gets one [Disposition]:
// misses are captured only while preparation is open and the stream is
// quiescent, [Preparation]), launches the resident ones and enqueues the
// rest eagerly. A receipt's rows carry each command's [Reason], and its
// cache events each candidate's disposition.
//
// # Concurrency properties
//
// Keys and the functions that build them are pure; a [Memo] belongs to
// one goroutine, like the lane that holds it.
package cache
