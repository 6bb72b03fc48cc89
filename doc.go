// Package lanes is the front door to lanes, an actor-style scheduler for
// CUDA execution lanes: start a [Server], set up each tenant's buffers,
// submit its batches, read its results. The same serving code runs with its
// lanes in this process ([Config.Devices]) or in lane host processes, one
// per GPU, through a front ([Config.Hosts]): switching is one
// configuration value, and every method, error and receipt is the same.
//
// A batch is a list of entries; an entry is a device command (a kernel
// launch, an upload, a copy, a library call) that a lane either replays as
// part of a captured CUDA graph ([Replayed]: keyed for replay) or runs
// eagerly ([Input], [Output]); its receipt attributes every entry and says,
// for one that ran eagerly, why. Errors classify to one stable vocabulary
// ([Classify]): a code, whose failure it was, whether to retry, and whether
// the batch ran at all.
//
//	dev, _ := sim.New(sim.Config{}) // or driver.Open with -tags cuda
//	srv, _ := lanes.Start(ctx, lanes.Config{Devices: []lanes.Device{dev}})
//	defer srv.Stop(ctx)
//	buf, _ := srv.Alloc(ctx, "tenant-a", lanes.BufferSpec{Size: 1024, Elem: lanes.I32})
//	_ = srv.Upload(ctx, "tenant-a", buf.Whole(), make([]byte, 1024))
//	inc, _ := lanes.Launch(srv.Kernels(), "inc_i32", lanes.Linear(256, 128), lanes.BufferArg(buf.Whole()), lanes.I32Arg(256))
//	receipt, err := srv.Submit(ctx, "tenant-a", lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("my-model/v1", 0, inc)}})
//	out, _ := srv.Read(ctx, "tenant-a", buf.Whole())
//
// examples/hello is this program whole (with its errors checked), and
// examples/serving the same serving code in process and on lane hosts.
//
// # The rules, the same on both sides
//
// Each rule holds in process and on lane hosts alike; the parity harness
// (parity_test.go) runs every call both ways and compares what comes back.
// The few differences by design are listed in docs/lane-hosts.md ("What
// differs from in process"), the same list as the harness's.
//
//   - Stopped first. After Stop, every call answers stopped
//     (actors.ErrStopped) before any other check: its tenant's name, its
//     context, its arguments.
//   - A context that ends. One already done is refused: nothing ran. One
//     that ends while a batch waits for its lane withdraws the batch at
//     once (actors.ErrWithdrawn, code withdrawn: it never ran; through a
//     front, the front tells the host); one that ends after the lane took
//     the batch changes nothing, and the Pending's end says which. Submit
//     itself returns an *actors.DetachedError as soon as its context ends.
//   - A detached Upload or Free goes on. An Upload or Free whose context
//     ends while it waits returns an *actors.DetachedError, and the write
//     or the free goes on to its end (every piece of an Upload); the
//     tenant's later calls through the server wait for it (SubmitAsync
//     too), each within its own context, so they see its write (or find
//     the buffer freed); a later Upload or Free queues behind it and
//     detaches in turn; Forget is refused meanwhile (actors.ErrTenantBusy).
//     The DetachedError's Pending ends with it. Stop waits for every
//     Upload and Free going on, detached or not, before it drains; a Stop
//     whose context ends first cuts them short: an Upload part-written
//     ends indeterminate (actors.ErrIndeterminate), one with nothing
//     written and a Free not yet done end stopped.
//     Alloc and Forget check
//     their context before they start and, once started, finish: an
//     allocation's handle always reaches its tenant.
//   - Another tenant's buffer is not yours. A buffer the server gave one
//     tenant, named by another in any call or anywhere in a batch (a
//     launch, a copy, a retained buffer, a patch), is refused with
//     actors.ErrNotYours (code not_yours, not submitted), whichever host
//     each tenant lives on.
//   - One answer to the zero Buffer: cuda.ErrStaleHandle (code
//     cuda_runtime_contract), whichever call names it, in a batch too.
//   - One answer to an upload whose bytes do not match its region:
//     cuda.ErrOutOfBounds (code cuda_runtime_contract), from Upload or as
//     an upload command in a batch.
//   - Receipts are whole: their rows, replayed segments (with each one's
//     logical commands), preparation timings, cache events, spans and
//     released buffers, through a front as in process.
//   - A sticky fault takes its device (in process) or its host (through a
//     front), not the others: new tenants are placed where work is served,
//     and a tenant whose device or host was lost starts over there after
//     Forget.
//
// What only one side does is on the type behind it, which [Server.Raw]
// returns: an *actors.Scheduler in process (shared buffers, SubmitNotify,
// lane administration, staged programs), a *remote.Front on lane hosts
// (encoded steps, placement).
//
// A receipt says what replayed ([ReplayCount], from Receipt.Replays: how
// many entries, and why each other one ran eagerly); [EncodeF32],
// [DecodeF32] and their I32, F16 and BF16 kin turn elements into the bytes
// Upload takes and Read returns. A submitted [Batch] belongs to the server
// until its submission ends: to keep several submissions of one step in
// flight, give each its own Entries slice (the commands may be shared).
//
// The packages below this one are the mechanism: lanes/lanes (the words of
// a lane's work: batches, entries, receipts, a lane's errors),
// actors (many lanes), remote (lane hosts), cuda (the device boundary,
// cuda/sim and cuda/driver its two backends), telemetry.
package lanes
