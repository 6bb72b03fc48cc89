// Package cuda is the device a user holds and the words of the work they
// give it: devices, buffers and byte regions, the commands a lane enqueues
// (kernel launch, host upload, device copy, zero, stage-in and stage-out,
// library call) and their arguments, kernels and their parameters, memory
// accounting, and the classification of every error by a stable code,
// whose failure it is, whether it is retryable, and whether it is sticky
// (poisons the device; docs/errors.md).
//
// Two backends implement [Device]: [github.com/lanesched/lanes/cuda/sim],
// the embedded pure-Go device that is the default everywhere, and
// cuda/driver (build tag cuda), the real device on the CUDA driver API.
// What a lane drives on a device (streams, events and fences, capture into
// graphs and their executables) is the backends' contract with the lane
// core, internal to lanes: a program hands a device to a scheduler
// (lanes.Start, actors.Start) and submits commands through it.
//
// # Usage
//
//	dev, _ := sim.New(sim.Config{})
//	srv, _ := lanes.Start(ctx, lanes.Config{Devices: []cuda.Device{dev}})
//	buf, _ := srv.Alloc(ctx, "tenant", cuda.BufferSpec{Size: 1024, Elem: cuda.I32})
//	inc, _ := cuda.LaunchNamed(dev.Kernels(), "inc_i32", cuda.Linear(256, 128), cuda.BufferArg(buf.Whole()), cuda.I32Arg(256))
//	receipt, err := srv.Submit(ctx, "tenant", lanes.Batch{Entries: []lanes.Entry{lanes.Replayed("inc/v1", 0, inc)}})
//
// # Values and handles
//
// Buffers and regions are plain values that name device memory by device
// instance, buffer id and offsets; they carry no pointers. A device checks
// every handle it is given: a buffer of another device instance, or one
// already freed, is rejected with an error that says so.
//
// # Concurrency properties
//
// Devices are safe for concurrent use; commands, buffers and regions are
// values. Backends that need thread affinity (the driver) say so: call a
// device's own methods (Alloc, Free, ...) from a goroutine bound to it
// ([Bound], [Device.BindThread]).
package cuda
