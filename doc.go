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
// What only one side does is on the type behind it: [Server.Scheduler]
// (package actors: shared buffers, SubmitNotify, lane administration,
// staged programs) and [Server.Front] (package remote: encoded steps, host
// status). The packages below this one are the mechanism: lanes/lanes (one
// lane), actors (many lanes), remote (lane hosts), cuda (the device
// boundary, cuda/sim and cuda/driver its two backends), telemetry.
package lanes
