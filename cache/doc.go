// Package cache is the words of replay a user names: the replay keys a
// provider attaches to commands ([ProviderKey], built with [NewKey],
// [LaunchKey] or [CallKey]), the phases and address scopes of a batch's
// commands, why a command was not replayed ([Reason]), the timed stages
// of preparing an executable, and a lane's preparation lifecycle
// ([Preparation]). What acts on them is internal: the discovery of
// replayable segments (internal/discovery) and the bounded executable
// cache of one lane's stream (internal/execcache).
//
// The cache never infers replay safety. A provider attaches a [ProviderKey]
// to each command it is willing to see replayed, binding its implementation
// fingerprint, the operation, and every scalar it depends on; the lane
// binds the runtime payload (each region's device address, length and
// element type, and the retained host bytes of an upload). A command
// without a key, or with a region whose address scope nobody declared,
// runs eagerly with a typed [Reason].
//
// For each batch a lane finds the candidates (maximal runs of replayable
// compute commands, split by eager-boundary nodes and by every
// non-replayable command), prepares them (misses are captured only while
// preparation is open and the stream is quiescent, [Preparation]),
// launches the resident ones and enqueues the rest eagerly. A receipt's
// rows carry each command's [Reason], and its cache events each
// candidate's disposition, by name.
//
// # Concurrency properties
//
// Keys and the functions that build them are pure.
package cache
