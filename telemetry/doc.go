// Package telemetry makes lanes visible in OpenTelemetry: a trace per
// submission that shows where its time went, metrics an operator slices by
// lane and tenant, and an honest count of whatever was not exported.
//
// A nil *Recorder is valid and records nothing, at the cost of one nil
// check. The lane core never imports this package; the actors feed it
// ended submissions, refusals and quarantines, off their threads.
//
// # Where it goes
//
// Config (or, left empty, the standard OTEL_* variables) picks the traces
// exporter (OTLP over gRPC or HTTP, the SDK's stdout, or an OTLP JSON file)
// and the metrics exporter (OTLP pushed every MetricInterval, or Prometheus
// served by MetricsHandler; actors' Scheduler.OpsHandler mounts it at
// /metrics beside /healthz, /readyz and /debug/pprof/). Metrics need no
// traces. An OTLP endpoint's scheme decides TLS (http:// plain, https://
// TLS; a bare host:port is plain on loopback only). Every failed export is
// told to Config.OnError as it happens and counted in Stats.
//
// # What is traced, what is dropped
//
// Because a submission is recorded after it ends, it is sampled by its
// outcome: every error, refusal, quarantine, eager fallback and cache event
// is traced, a submission under a caller's sampled span follows its caller,
// and plain successes are traced by Config.SuccessRatio (the others counted
// as sampled out). A submission's spans are exported together in one call or
// dropped together (a full queue, a failed export): no parent leaves without
// its children. Every drop is counted (Stats, lanes.telemetry.* metrics).
//
// # Fair shares
//
// One tenant's flood never blinds telemetry for the others. Work waits to
// be recorded, and spans to be exported, in a queue per tenant, taken in
// turns, lane quarantines ahead of every tenant's (a quarantine is what
// an operator must see). When a queue is full (8192 items waiting to be
// recorded; Config.QueueSpans spans waiting for export), the tenant that
// holds the most of it gives up its oldest to make room, and when the new
// work is that tenant's own, the new work is dropped instead; a quiet
// tenant's error, and a lane's quarantine, still get their spans. What is lost is counted per tenant
// (Stats.ByTenant, and lanes.tenant on lanes.telemetry.spans and
// lanes.telemetry.submissions).
//
// Refusals come in bursts: a tenant over its share is refused as fast as
// it can ask. A refusal handed over while the same tenant's previous
// refusal of the same kind (error.type) is still waiting to be recorded is
// summarised into that one: a single lanes.submit span from the first
// refusal to the last, with lanes.refusals saying how many it stands for,
// while lanes.submissions counts every one of them (Stats.Summarised says
// how many were folded). This costs nothing while the recorder keeps up
// (every refusal is then a span of its own), and under a flood it turns
// thousands of identical spans into a few, which is what lets the flood's
// own spans, and everyone else's, through. A refusal under a caller's
// span is never summarised: its caller's trace shows it.
//
// # Spans
//
//	span                    parent           interval
//	lanes.submit            caller's, if any submitted to receipt observed (kind internal)
//	lanes.queue             lanes.submit     submitted to taken by its lane: admission, mailbox, fair queue
//	lanes.enqueue           lanes.submit     taken to enqueued: planning, capture, launches on the host
//	lanes.replay            lanes.submit     one replayed segment, at device time
//	lanes.eager             lanes.submit     one eager command, at device time (timing kernel, verification)
//	lanes.fence_wait        lanes.submit     the device finished to the receipt observed (timed submissions)
//	lanes.lane.quarantine   none             a lane leaving routing, linked to the submissions that failed it
//
// When CUDA events timed a submission, lanes.replay and lanes.eager start
// and end at the device times the events measured, anchored to the host
// time at which the submission's start event was recorded. Untimed, they
// span the interval in which the device ran the work (enqueued to receipt)
// with lanes.device_timing = "unavailable", and carry an error status when
// the submission failed. A submission refused at admission is a lanes.submit
// span of no duration with lanes.outcome = refused.
//
// A quarantine's links name the submissions that failed the lane as they
// were traced; a linked span that was itself dropped (its tenant's share
// of the queue full, Stats.ByTenant counts it) is not exported, so a
// viewer may show that link unresolved: the quarantine span is exported
// regardless, and its tenants' error spans go before any flood's.
//
// # Attributes
//
//	attribute                      on                   meaning
//	lanes.tenant                   submission           the tenant that submitted
//	lanes.lane.id                  submission, quarantine  the lane (-1: refused before any lane took it)
//	lanes.device.ordinal           submission, quarantine  the device's ordinal
//	lanes.device.name              submission, quarantine  the device's name
//	lanes.batch.entries            submission           entries in the batch
//	lanes.compute_path             submission           adaptive, eager_only, replayed_only, replayed_with_boundaries
//	lanes.timing_mode              submission           off, completion, replay, kernel, verification
//	lanes.replayed_segments        submission           segments replayed
//	lanes.eager_commands           submission           commands run eagerly
//	lanes.outcome                  submission           succeeded, indeterminate, refused
//	lanes.refusals                 submission           refusals a summarised refusal stands for (when more than one)
//	error.type                     submission, quarantine  the stable error code (cuda.Code), when not succeeded
//	lanes.error.blame              submission, quarantine  caller, stream or device
//	lanes.device.time              submission           seconds of device time, start event to fence
//	lanes.device_timing            segment, command     "events" or "unavailable"
//	lanes.segment.fingerprint      segment              the executable's segment key (hex)
//	lanes.program.id               segment              runtime/name, when the segment belongs to a program
//	lanes.segment.ordinal          segment              its ordinal in that program
//	lanes.segment.entry_start      segment              first entry of the batch it replays
//	lanes.segment.entry_end        segment              one past its last entry
//	lanes.segment.node_start       segment              first plan node
//	lanes.segment.node_end         segment              one past its last plan node
//	lanes.segment.logical_commands segment              commands it stands for
//	lanes.segment.graph_nodes      segment              nodes of its CUDA graph
//	lanes.command.index            command              the entry's index
//	lanes.command.op               command              launch:kernel, upload, copy, zero, call:name
//	lanes.command.reason           command              why it was not replayed
//
// Span events, at the time the lane had enqueued the submission:
// lanes.capture_rejected, lanes.captured, lanes.updated,
// lanes.update_refused and lanes.evicted on lanes.submit
// (lanes.segment.fingerprint, and lanes.reason when there is one);
// lanes.quarantined on lanes.lane.quarantine (lanes.reason: the cause).
// The resource carries service.name, service.version, service.instance.id
// (random per process), telemetry.sdk.*, host.* and process.* (pid,
// executable, runtime), OTEL_RESOURCE_ATTRIBUTES and Config.Attributes;
// the scope is ScopeName at ScopeVersion.
//
// # Metrics
//
//	metric                     kind       unit          attributes
//	lanes.submissions          counter    {submission}  lanes.outcome, lanes.tenant, lanes.lane.id
//	lanes.replayed_segments    counter    {segment}     lanes.lane.id
//	lanes.eager_commands       counter    {command}     lanes.lane.id
//	lanes.cache.events         counter    {event}       lanes.event (captured, capture_rejected, ...), lanes.lane.id
//	lanes.gaps                 counter    {command}     lanes.reason (compute commands run eagerly)
//	lanes.quarantines          counter    {quarantine}  lanes.lane.id, error.type
//	lanes.fence.latency        histogram  s             lanes.lane.id, lanes.tenant (buckets ten per decade, 10 µs to 10 s)
//	lanes.device.time          histogram  s             lanes.lane.id (buckets ten per decade, 10 µs to 10 s)
//	lanes.lanes                gauge      {lane}        lanes.health
//	lanes.lane.in_flight       gauge      {submission}  lanes.lane.id
//	lanes.lane.queued          gauge      {batch}       lanes.lane.id
//	lanes.cache.bytes          gauge      By            lanes.lane.id
//	lanes.library.workspace.bytes gauge   By            lanes.lane.id (cuda.Library workspaces)
//	lanes.transfer.h2d         counter    By            lanes.lane.id (staged input copied to the device)
//	lanes.transfer.d2h         counter    By            lanes.lane.id (staged output read back)
//	lanes.transfer.uploads     counter    {copy}        lanes.lane.id
//	lanes.transfer.readbacks   counter    {copy}        lanes.lane.id
//	lanes.graph_launches       counter    {launch}      lanes.lane.id
//	lanes.output_cache.hits    counter    {replay}      lanes.lane.id
//	lanes.sync_points          counter    {wait}        lanes.lane.id
//	lanes.telemetry.spans      counter    {span}        lanes.disposition: exported, queue_full, export_failed; lanes.tenant on drops
//	lanes.telemetry.submissions counter   {submission}  lanes.disposition: sampled_out, behind, summarised; lanes.tenant but on sampled_out
//	lanes.telemetry.export_errors counter {export}      (spans and metrics)
//
// lanes.tenant takes the first Config.MaxTenants tenants' names and
// "other" after them; a drop of no tenant's (a lane quarantine's) carries
// no lanes.tenant. In Prometheus the names become lanes_submissions_total,
// lanes_fence_latency_seconds_bucket, lanes_transfer_h2d_bytes_total, ...
package telemetry
