// Package discovery finds a batch's replay segments: it binds each keyed
// command to its exact replay key (the provider's key and the runtime
// payload), splits the batch into candidates (maximal runs of replayable
// compute commands, split by eager-boundary nodes and by every
// non-replayable command), keys each candidate's segment and shape, and
// gives every other command the reason it runs eagerly. It also names
// what preparing a candidate did to it ([Disposition]) and what a Prepare
// did ([PrepareReport]). The lane core and the executable cache use it; a
// user sees its results in a receipt, through package cache's words.
//
// # Concurrency properties
//
// Keys and the functions that build them are pure; a [Memo] belongs to
// one goroutine, like the lane that holds it.
package discovery
