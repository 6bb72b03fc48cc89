// Command tracefeed feeds the telemetry recorder synthetic submissions at
// a fixed rate, as a scheduler serving that many would, and reports what
// was exported, sampled out and dropped: the recorder's behaviour at rates
// the simulated device does not reach. scripts/observability-check.sh runs
// it against a real Jaeger.
//
//	go run ./scripts/tracefeed --endpoint 127.0.0.1:4317 --rate 100000 --duration 5s
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/lanesched/lanes/cuda"
	laneerr "github.com/lanesched/lanes/internal/laneerr"
	"github.com/lanesched/lanes/internal/recording"
	"github.com/lanesched/lanes/lanes"
	"github.com/lanesched/lanes/telemetry"
)

func main() {
	endpoint := flag.String("endpoint", "127.0.0.1:4317", "OTLP gRPC collector")
	rate := flag.Float64("rate", 100000, "submissions per second")
	duration := flag.Duration("duration", 5*time.Second, "how long to feed")
	ratio := flag.Float64("trace-successes", 1, "fraction of plain successes traced")
	queue := flag.Int("queue", 0, "spans the export queue holds (0: the recorder's default)")
	batch := flag.Int("batch", 0, "spans per export (0: the recorder's default)")
	failEvery := flag.Int("fail-every", 100, "every n-th submission fails (always traced)")
	flag.Parse()
	if *rate <= 0 || *duration <= 0 || *failEvery <= 0 {
		fmt.Fprintln(os.Stderr, "tracefeed: give a positive --rate, --duration and --fail-every")
		os.Exit(2)
	}
	rec, err := telemetry.New(context.Background(), telemetry.Config{Traces: telemetry.ExportOTLPGRPC, Endpoint: *endpoint,
		ServiceName: "tracefeed", SuccessRatio: *ratio, QueueSpans: *queue, BatchSpans: *batch})
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracefeed:", err)
		os.Exit(2)
	}
	start := time.Now()
	var handed int
	for tick := time.NewTicker(time.Millisecond); time.Since(start) < *duration; <-tick.C {
		due := int(time.Since(start).Seconds() * *rate)
		for ; handed < due; handed++ {
			recording.Of(rec).Submission(context.Background(), submission(handed, *failEvery))
		}
	}
	fed := time.Since(start)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shutdownErr := rec.Shutdown(ctx)
	s := rec.Stats()
	out := map[string]any{"submissions": handed, "seconds": fed.Seconds(), "rate": float64(handed) / fed.Seconds(),
		"spans_per_submission": 5, "stats": s, "drained_seconds": time.Since(start).Seconds()}
	if shutdownErr != nil {
		out["shutdown_error"] = shutdownErr.Error()
	}
	b, _ := json.MarshalIndent(out, "", "  ")
	fmt.Println(string(b))
}

// submission is the i-th synthetic submission: two replayed segments, its
// stages, 120 µs end to end; every failEvery-th ends indeterminate.
func submission(i, failEvery int) recording.Submission {
	now := time.Now()
	seg := lanes.SegmentRecord{Start: 1, End: 9, Commands: 8, GraphNodes: 8}
	s := recording.Submission{Tenant: fmt.Sprintf("tenant-%02d", i%16), Lane: i % 8, Device: 0, DeviceName: "synthetic", Entries: 10,
		Start: now.Add(-120 * time.Microsecond), Taken: now.Add(-100 * time.Microsecond), Enqueued: now.Add(-80 * time.Microsecond), End: now,
		Receipt: lanes.Receipt{Outcome: lanes.OutcomeSucceeded, Attribution: lanes.Attribution{Segments: []lanes.SegmentRecord{seg, seg}}}}
	if i%failEvery == failEvery-1 {
		s.Err = laneerr.Wrap("fence", false, cuda.ErrIllegalAddress)
		s.Receipt.Outcome = lanes.OutcomeIndeterminate
	}
	return s
}
