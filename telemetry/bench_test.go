package telemetry_test

import (
	"context"
	"testing"

	"github.com/lanesched/lanes/internal/recording"

	"github.com/lanesched/lanes/telemetry"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// discard is an exporter that sends nowhere: the recorder's own cost.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkRecordSubmission is the recorder's cost per submission of five
// spans (submit, queue, enqueue, two replays) and its metrics, traced
// whole (ratio 1) and mostly sampled out (ratio 0.1).
func BenchmarkRecordSubmission(b *testing.B) {
	for _, ratio := range []float64{1, 0.1} {
		b.Run(map[float64]string{1: "traced", 0.1: "ratio_0.1"}[ratio], func(b *testing.B) {
			rec, err := telemetry.New(context.Background(), telemetry.Config{SpanExporter: discard{}, SuccessRatio: ratio})
			if err != nil {
				b.Fatal(err)
			}
			defer rec.Shutdown(context.Background())
			s := replayedSubmission("a")
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				recording.Of(rec).Submission(context.Background(), s)
				if i%1024 == 1023 {
					rec.Flush() // keep within the queues: the recorder's cost, not its drops
				}
			}
			rec.Flush()
			if st := rec.Stats(); st.Behind+st.SpansDroppedQueueFull > 0 {
				b.Fatalf("stats: got %+v, want nothing dropped", st)
			}
		})
	}
}
