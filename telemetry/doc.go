// Package telemetry makes lanes visible in OpenTelemetry: a span per
// submission with a child span per replayed segment (and per eager command
// when the timing mode times them), placed at device time, and metrics.
//
// A nil *Recorder is valid and records nothing, at the cost of one nil
// check: the default costs nothing measurable. The lane core never imports
// this package; the actors feed it finished receipts.
//
// # Device time
//
// When CUDA events timed a submission, its child spans start and end at the
// device times the events measured, anchored to the host time at which the
// submission's start event was recorded (device queueing before that point
// is not visible). When nothing timed them, a child span says so with
// lanes.device_timing = "unavailable" and carries the enclosing
// submission's host interval, which is not a device time.
//
// # Attributes
//
//	attribute                     on                   meaning
//	lanes.tenant                  submission           the tenant that submitted
//	lanes.lane.id                 submission           the lane that ran it
//	lanes.device.ordinal          submission           the device's ordinal
//	lanes.device.name             submission           the device's name
//	lanes.batch.entries           submission           entries in the batch
//	lanes.compute_path            submission           adaptive, eager_only, replayed_only, replayed_with_boundaries
//	lanes.timing_mode             submission           off, completion, replay, kernel, verification
//	lanes.replayed_segments       submission           segments replayed
//	lanes.eager_commands          submission           commands run eagerly
//	lanes.outcome                 submission           succeeded, indeterminate, refused
//	lanes.error.code              submission           the stable error code, when not succeeded
//	lanes.device_time_ns          submission           device time from the start event to the fence
//	lanes.device_timing           segment, command     "events" or "unavailable"
//	lanes.segment.fingerprint     segment              the executable's segment key (hex)
//	lanes.program.id              segment              runtime/name, when the segment belongs to a program
//	lanes.segment.ordinal         segment              its ordinal in that program
//	lanes.segment.entry_start     segment              first entry of the batch it replays
//	lanes.segment.entry_end       segment              one past its last entry
//	lanes.segment.node_start      segment              first plan node
//	lanes.segment.node_end        segment              one past its last plan node
//	lanes.segment.logical_commands segment             commands it stands for
//	lanes.segment.graph_nodes     segment              nodes of its CUDA graph
//	lanes.command.index           command              the entry's index
//	lanes.command.op              command              launch:kernel, upload, copy, zero
//	lanes.command.reason          command              why it was not replayed
//
// Span events: "lanes.capture_rejected", "lanes.captured", "lanes.updated",
// "lanes.update_refused" and
// "lanes.evicted" on the submission span (lanes.segment.fingerprint,
// lanes.reason); "lanes.quarantined" on a span named lanes.lane.quarantine
// (lanes.lane.id, lanes.reason).
//
// # Metrics
//
//	lanes.submissions           counter    by lanes.outcome
//	lanes.replayed_segments     counter
//	lanes.eager_commands        counter
//	lanes.cache.events          counter    by lanes.event (captured, capture_rejected, evicted)
//	lanes.gaps                  counter    compute commands run eagerly, by lanes.reason
//	lanes.quarantines           counter    by lanes.lane.id
//	lanes.fence.latency         histogram  seconds from submit to receipt
//	lanes.device.time           histogram  seconds of device time per timed submission
//	lanes.lanes                 gauge      lanes by lanes.health
//	lanes.lane.in_flight        gauge      admitted submissions per lane (the mailbox's depth)
//	lanes.transfer.h2d_bytes    counter    staged input bytes copied to the device, by lane
//	lanes.transfer.d2h_bytes    counter    staged output bytes read back, by lane
//	lanes.transfer.uploads      counter    staged input copies
//	lanes.transfer.readbacks    counter    staged output reads
//	lanes.graph_launches        counter    executables launched, by lane
//	lanes.output_cache.hits     counter    staged replays answered without a launch
//	lanes.sync_points           counter    blocking waits the lane made
package telemetry
