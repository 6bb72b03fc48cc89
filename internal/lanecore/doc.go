// Package lanecore is the lane core: the single-owner, deterministic state
// machine of one CUDA stream, on top of [github.com/lanesched/lanes/cache]
// and [github.com/lanesched/lanes/programs].
//
// A [Lane] owns its stream's submission pipeline, its executable cache, its
// program catalog, its fences and the failed batches it holds. It has no goroutines, no
// locks and no clock of its own (the stage sink's clock is injected): it is
// shaped like etcd/raft's RawNode, and the lane actor is its node.
//
// # Which calls block
//
// [Lane.Submit], [Lane.Poll], [Lane.PollInto], [Lane.Abandon],
// [Lane.Recover] and the administrative calls ([Lane.Configure],
// [Lane.Seal], [Lane.Trim], [Lane.ForgetTenant], [Lane.Catalog],
// [Lane.Preparation]) never wait for the device: they enqueue, query or
// give back, and return. (A real device's enqueue can itself stall: when
// CUDA's launch queue is full, and for an eager upload or a program's
// patch, which copy from ordinary Go memory with cuMemcpyHtoDAsync, a copy
// CUDA may complete before it returns. The lane adds no wait of its own.)
//
// Eight calls wait for the device, and only they: [Lane.Wait] (one fence),
// [Lane.Synchronize] (the whole stream) and [Lane.Readback] (the stream,
// then a copy), in wait.go; [Lane.Prepare], [Lane.Replay],
// [Lane.ReplayInto], [Lane.Repeat] and [Lane.ReplayWritten] of a [Staged]
// program, which are Submit then Wait, in staged_replay.go (an
// output-cache hit waits for nothing). Given a
// [Waiter], they query without blocking and pause in the Waiter between
// queries, so the owner decides how long is too long (the scheduler gives
// up after its hang timeout); without one they block in the device's call.
//
// # Usage
//
// The owner, on the lane's goroutine (bound to the device while it runs):
//
//  1. [Lane.Submit] a [lanes.Batch]. Validation (every handle the batch names
//     is checked live on the device; a batch equal to one the lane
//     planned before reuses that plan's validation and discovery, and has
//     its handles checked again only after the device freed something:
//     [lanes.Counters].RememberedPlans), discovery, preparation, the
//     compute-path requirement and program registration happen first; an
//     error there is "definitely not submitted" ([lanes.Error].NotSubmitted): none
//     of the batch's commands ran. It is the caller's, and leaves the lane
//     as it was (except that the path requirement is checked after
//     preparation, so a batch it refuses may have captured segments into
//     the cache: capture runs nothing), unless a capture failed so that
//     eager fallback is unsafe, which fails the lane. Then the batch is
//     enqueued (resident segments replayed, the rest eagerly) and its fence
//     recorded. Every error is an [*lanes.Error], classified by cuda.Classify.
//  2. [Lane.Poll] regularly: it never blocks, and returns the [lanes.Receipt] of
//     every submission that ended, exactly once each, in fence order.
//  3. After a failure (an error after enqueue began, or a device error on a
//     fence), the lane is [StateFailed]: it accepts no submissions (until
//     [Lane.Recover] gives it a fresh stream), its in-flight work ends when
//     its fence does (Indeterminate if the device failed under it; a
//     submission enqueued before a non-sticky failure may still succeed),
//     and the failed batch is held until [Lane.Synchronize]
//     succeeds.
//
// Configure, seal, trim, catalog and preparation snapshots need a quiescent
// lane: nothing in flight, nothing held.
//
// # Concurrency properties
//
// A lane is owned by one goroutine. The device backend may additionally
// require that goroutine to be bound to its OS thread (cuda.Device.BindThread).
package lanecore
