// Package actors makes lanes concurrent: each lane is a protoactor-go actor
// whose mailbox runs on one goroutine locked to one OS thread with the
// device's context current, and which alone owns its [lanes.Lane] (stream,
// executable cache, program catalog). The [Scheduler] is the public API: it
// routes each tenant's batches to a lane (sticky per tenant, healthy lanes
// only, least loaded first), bounds admission (per lane and per tenant,
// answering the retryable [ErrOverloaded] instead of queueing without
// bound), and quarantines lanes that fail: a failed lane leaves routing, its
// in-flight work ends failed or indeterminate, its tenants move to healthy
// lanes, and a sticky device error quarantines every lane of the device.
//
// # Usage
//
//	dev, _ := sim.New(sim.Config{})
//	s, _ := actors.Start(ctx, actors.Config{Devices: []cuda.Device{dev}, LanesPerDevice: 4})
//	defer s.Stop(ctx)                             // drains: every pending submission ends once
//	receipt, err := s.Submit(ctx, "tenant-a", batch) // waits for the terminal receipt
//
// # Concurrency properties
//
// A Scheduler is safe for concurrent use. Every accepted submission ends
// exactly once: with a receipt, or an error that says whether it was
// submitted at all. Canceling Submit's context returns early but never
// loses the submission's accounting.
package actors
