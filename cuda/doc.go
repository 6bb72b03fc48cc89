// Package cuda is the device boundary of lanes: the one vocabulary every other
// package uses to talk to a GPU, whichever backend implements it.
//
// It defines devices, streams, buffers and byte regions, the commands a lane
// enqueues (kernel launch, host upload, device copy, zero), events and fence
// queries, stream capture into graphs and their executables, memory
// accounting, and the classification of every error by a stable code,
// whether it is retryable, and whether it is sticky (poisons the device).
//
// Two backends implement it: [github.com/lanesched/lanes/cuda/sim], the
// embedded pure-Go device that is the default everywhere, and
// cuda/driver (build tag cuda), the real device on the CUDA driver API.
//
// # Usage
//
//	dev, _ := sim.New(sim.Config{})
//	buf, _ := dev.Alloc(cuda.BufferSpec{Size: 4096, Elem: cuda.F32})
//	region, _ := buf.Region(0, 4096)
//	up, _ := cuda.Upload(region, payload)      // host bytes are copied and retained
//	st, _ := dev.NewStream()
//	_ = st.Enqueue(up)
//	ev, _ := st.Record()
//	for ev.Query().State == backend.FencePending { /* do other work */ }
//
// # Values and handles
//
// Buffers and regions are plain values that name device memory by device
// instance, buffer id and offsets; they carry no pointers, so commands can be
// encoded ([Command.MarshalBinary]) and cross a wire. A device checks every
// handle it is given: a buffer or stream of another device instance, or one
// already freed, is rejected with an error that says so.
//
// # Concurrency properties
//
// Devices are safe for concurrent use. A [Stream] has one owner (its lane) and
// must not be used from two goroutines at once; events and executables may be
// queried from any goroutine. Backends that need thread affinity (the driver)
// document and check it.
package cuda
