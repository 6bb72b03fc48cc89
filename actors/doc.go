// Package actors makes lanes concurrent: each lane is a protoactor-go actor
// whose mailbox runs on one goroutine, each run locked to its OS thread
// with the device's context current, and which alone owns its lane (stream,
// executable cache, program catalog: the lane core, internal/lanecore). The [Scheduler] is the public API: it
// routes each tenant's batches to a lane (sticky per tenant, healthy lanes
// only, least loaded first), bounds admission (per lane and per tenant,
// answering the retryable [ErrOverloaded] instead of queueing without
// bound), shares each lane fairly among its tenants, and decides what a
// failure costs by whose failure it is.
//
// # Usage
//
//	dev, _ := sim.New(sim.Config{})
//	s, _ := actors.Start(ctx, actors.Config{Devices: []cuda.Device{dev}, LanesPerDevice: 4})
//	defer s.Stop(ctx)                                // drains: every pending submission ends once
//	receipt, err := s.Submit(ctx, "tenant-a", batch) // waits for the terminal receipt
//	if err != nil {
//		c := cuda.Classify(err) // c.Code, c.Blame, c.Retryable, c.NotSubmitted
//	}
//
// # A serving loop without hand-offs
//
// A lane's thread launches a step, polls its fence and ends it; a caller
// that waits for that end on Pending.Done (as Submit does) is another
// goroutine, which the runtime must wake: the lane's thread readies it
// onto its own processor, which the lane keeps while it spins, so the
// caller waits to be stolen or for an idle thread to be woken, and its
// next step comes back through the lane's mailbox. (A lane that ended
// steps with callers waiting on Done yields its processor right after, so
// they run at once on another thread.) A hand-written driver loop
// instead issues a stream's next step from the thread that saw the
// previous one end. The same loop here is
// SubmitNotify's ended submitting the tenant's next step: ended runs on
// the goroutine that ended the submission, most often the lane's own
// thread in the middle of its mailbox run, so the next step's message is
// taken in the same run, with no thread woken and nothing parked:
//
//	var next func(lanes.Pending)
//	next = func(p lanes.Pending) {
//		record(p.Result())          // at once: the receipt is ready
//		if b, more := step(); more { // write the pinned input, reuse the batch
//			if _, err := s.SubmitNotify(ctx, tenant, b, next); err != nil {
//				go retryLater(err) // never wait on the goroutine that ran ended
//			}
//		}
//	}
//	_, err := s.SubmitNotify(ctx, tenant, first, next)
//
// lanedemo's closed loop runs this way (--next-step lane, its default;
// --next-step caller waits in a goroutine instead). Nothing else changes:
// the step is admitted, routed, fair-queued, replayed, fenced and ended
// exactly as any other.
//
// Where ended runs: on the lane that ended the step; on another lane's
// thread or a scheduler goroutine when a step that never reached a lane is
// refused as its tenant moves (no healthy lane, the lane left routing,
// Stop); or inside a SubmitNotify call of the same tenant, on its caller's
// goroutine, when that call's admission ends earlier steps that waited to
// move. It may also run before the SubmitNotify that admitted its step
// returns. The scheduler holds none of its locks while ended runs, so
// ended may submit; but it must not wait: a blocking call from ended
// (Submit, Seal, Synchronize, Configure, Stop, ...) waits for work that
// the very goroutine it blocks would run, until its context ends.
//
// What such a step costs the lane's thread, once it repeats: its plan and
// its attribution are remembered (package lanes: a steady step shares its
// rows with the one before it), so the lane checks that the batch is the
// same, launches its graph and records its fence; and the thread does not
// yield between messages (Config.Throughput), since a yield while its run
// holds the thread wakes two threads. How this loop
// compares with the same loop hand-written in C++ is measured in
// docs/measurements (the serving-loop files).
//
// # Blame decides the consequence
//
// Every failure is classified once ([cuda.Classify]; the blame of each code
// is in package cuda) and its blame alone decides what it costs:
//
//	blame    what it is                                 the submission           the lane                      the tenant
//	none     overload, stop, no healthy lane,           refused, not submitted   untouched                     untouched
//	         the caller's own context                   (retryable where it says)
//	caller   the batch is wrong: invalid, freed,        refused before any       untouched                     untouched
//	         forged or foreign handles, another         device work (not
//	         tenant's buffer, an invalid tenant,        submitted); a handle
//	         a suspended tenant                         freed mid-batch ends it
//	                                                    Refused at a fence
//	stream   a non-sticky device error after work       its work fails; others   leaves routing, ends what     a strike
//	         began, a provider panic, a hung kernel     in flight end as the     it had in flight, comes back
//	                                                    stream answers           on a fresh stream after a
//	                                                                             backoff, keeping its cache and
//	                                                                             programs (a fresh cache after
//	                                                                             a hang); out for good only after
//	                                                                             Recovery.MaxFailures failures in
//	                                                                             a row, for several tenants
//	device   a sticky error (an illegal address):       indeterminate            every lane of the device (on  a strike
//	         the device, or the process's CUDA                                   a real GPU, of the process)
//	         state on a real GPU, is poisoned                                    is out for good
//
// A strike goes to the tenant whose submission failed the lane (on one
// stream, the first submission that did not complete). A tenant whose
// strikes are many, far more frequent per launch than the other tenants',
// and beyond what chance explains, is suspended ([Suspension]): it alone is
// refused, with a [*SuspendedError] that says when to retry, before it can
// cost others their lanes; faults spread over tenants alike (a flaky
// device) suspend no one. While a lane recovers, its tenants' new batches
// wait for it (it keeps their executables and programs). When one kernel
// occupies the whole device, every busy lane hangs in turn; which kernel
// did it cannot be told from the host, so each stuck tenant takes one
// strike for the stall, only the first lane to hang counts the failure,
// and the rate test picks out the tenant whose every launch stalls the
// device.
//
// # Fair shares
//
// No tenant can take another's lane time, admission slots, executable
// cache or memory:
//
//   - Admission. A lane admits anyone below Config.MaxInFlightPerLane
//     submissions in flight. Beyond that, up to twice the limit, it admits
//     only a tenant under its fair share (the limit split by weight,
//     Config.Weight, among the tenants with work on the lane), and up to
//     three times the limit a tenant with nothing in flight: the limit is
//     what one tenant can take, and a lane holds up to three times it in
//     all. So a flooding tenant fills a lane to its limit and is then
//     refused ErrOverloaded, while the others are still admitted.
//     MaxInFlightPerTenant is at most MaxInFlightPerLane (a tenant's work
//     is on one lane). With more light tenants per lane than three times
//     the limit, each with a step in flight, the excess is refused first
//     come, first served: raise MaxInFlightPerLane to a third of the steps
//     a lane's tenants keep in flight, or more.
//   - Lane time. A lane keeps at most Config.StreamDepth of one tenant's
//     submissions on its stream (and, unless it is empty, less than one
//     batch's worth of commands); what it receives beyond that waits in its
//     fair queue, one FIFO per tenant, served by deficit round robin: each
//     round gives a tenant Config.Quantum commands of credit per unit of
//     weight. Staged replays take their turns there too, one per turn of
//     the mailbox. A light tenant's batch waits for at most one round of
//     the others' work plus what the stream holds.
//   - Batch size. A batch beyond Config.MaxBatchEntries entries or
//     MaxBatchBytes of upload bytes is refused, not submitted, with a
//     [*BatchTooLargeError] that says how to split it. A lane enqueues a
//     batch whole: the entries bound is what one batch can make a
//     neighbour wait.
//   - Cache. Each tenant with executables on a lane, and the tenant whose
//     batch is preparing, has an equal share of the lane's cache, by count
//     (Config.CacheCapacity) and by the host memory its executables retain
//     (Config.CacheBytes; LaneStatus.Counters.CacheBytes reports it). A
//     batch may evict its own tenant's executables, and another tenant's
//     only beyond that tenant's share. Preparation opens when a lane
//     starts and stays open until Seal, so a tenant's first steps are
//     captured wherever they land; the shares are what protect a steady
//     tenant's executables from one that churns keys (Seal a lane to stop
//     capture on it altogether). Tenants of one shape beyond what the
//     cache holds share its executables by rebinding them to their own
//     buffers, also once sealed: a sealed lane's executables serve every
//     tenant of their shape, least recently used first (docs/replays.md).
//   - History. A tenant idle for Config.TenantIdle with nothing in flight,
//     no owned buffers, no registered programs, no suspension and no recent
//     fault is forgotten (as Forget would); a name whose every submission
//     was refused at admission leaves nothing (one its lane refused, an
//     invalid batch, is idle from that refusal and goes as any idle tenant
//     does, after TenantIdle); the ownership of a freed buffer is dropped
//     at the next sweep; tenant and program names are at most 256 bytes, and program
//     names reserved at most Config.MaxProgramsPerTenant per tenant and
//     Config.MaxPrograms in all (Forget releases a tenant's, after every
//     lane forgot its programs). A forgotten tenant's executables leave
//     lanes whose preparation is open; a sealed lane keeps them as no
//     one's, for any tenant of their shape to rebind. Nothing
//     the scheduler keeps grows with the number of tenants or buffers it
//     has ever seen. The forgetting is a sweep, not done at once: the
//     scheduler looks every TenantIdle/2 (at least 10 ms and at most 10 s
//     apart; every 10 s when TenantIdle is negative), so an idle tenant
//     goes between TenantIdle and one and a half TenantIdle after its
//     last work ended (TenantIdle and 10 ms, below 20 ms), and a freed buffer's ownership stays until the
//     first sweep after the free (Forget drops a tenant's at once).
//
// # Order per tenant
//
// A tenant's batches start on the device in the order Submit accepted them
// (for concurrent Submits of one tenant: the order their admissions took
// the tenant's lock), and each sees the writes of those before it, also
// when the tenant moves to another lane. A tenant is pinned to one lane;
// while that lane recovers, the tenant's new batches wait for it, in order.
// It moves only with nothing in flight: while it has work in flight, a full
// lane answers it ErrOverloaded rather than send it elsewhere, and a lane
// out for good holds its new batches, in order, until its work there has
// ended (a failed lane ends it only after draining its stream); then they
// move together. A submission that ended Indeterminate has an unknown
// effect, so nothing is promised about it, order included.
//
// # Cancellation
//
// A context already done is refused before admission: the batch never runs.
// Once admitted, a submission ends exactly once; if Submit's context ends
// first, Submit returns a [*DetachedError] whose Pending observes the end,
// and a lane that has not taken the batch yet does not run it (it ends not
// submitted, with the context's error).
//
// # Concurrency properties
//
// A Scheduler is safe for concurrent use. Every accepted submission ends
// exactly once: with a receipt (which names its tenant and lane), or an
// error that says whether it was submitted at all. Every wait on a device
// is bounded by Config.HangTimeout: polls, Synchronize, staged replays and
// Stop's drain. After Stop begins, every call answers ErrStopped at once.
package actors
