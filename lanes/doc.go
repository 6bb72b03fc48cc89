// Package lanes is the vocabulary of work on a lane: what a caller submits
// (a [Batch] of [Entry] values, each a device command with its phase, plan
// node and replay contract; [Patch] values written into a program's
// arguments; the [Slot] values of a staged program), what it gets back (a
// [Receipt] whose [Attribution] says, [Row] by row, what replayed and why
// the rest did not; [Receipt.Replays] counts it in one call), how a
// submission in flight ends ([Pending], exactly once), and the errors a
// lane answers with ([Error], [ErrInvalidBatch] and the other sentinels,
// each classified by cuda.Classify).
//
// The lane itself, one CUDA stream's single-owner state machine, is
// internal: a scheduler (package actors) or a lane host runs it, and the
// root package lanes serves it. Its counters ([Counters],
// [StagedCounters]) are reported through the scheduler's lane status.
//
// A submitted Batch belongs to the lane until its submission ends: to keep
// several submissions of one step in flight, give each its own Entries
// slice; the commands themselves may be shared (docs/glossary.md, "batch").
package lanes
