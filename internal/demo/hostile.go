// Hostile tenants (--hostile flood, churn, huge) beside the healthy ones,
// and the checks that they took nothing from them.

package demo

// The hostile tenant (--hostile): one more tenant, on the first device,
// that tries to take the others' share while they serve as usual, so the
// report's per-tenant rows show what the scheduler's fairness leaves them.
//
//	flood  keeps its admission full: it submits until refused as
//	       overloaded, then waits for its oldest step, for the whole run.
//	churn  submits a new replay key every step (a 256 KiB upload and a
//	       chain whose scalar changes), with preparation left open so that
//	       each one is captured: the lanes' caches churn.
//	huge   submits the largest batches the scheduler admits (its
//	       MaxBatchEntries of eager launches), one after another, after one
//	       of 100 000 entries, which is refused.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/kernels"
	"github.com/lanesched/lanes/lanes"
)

// hostileName names the hostile tenant.
const hostileName = "hostile"

// churnUpload is the bytes of each churned upload.
const churnUpload = 256 << 10

// hostileModes are the --hostile values ("" is none).
var hostileModes = map[string]bool{"": true, "flood": true, "churn": true, "huge": true}

// runHostile runs the hostile tenant until ctx ends.
func runHostile(ctx context.Context, cfg Config, s *actors.Scheduler, tn *tenant, timing lanes.TimingMode, agg *aggregate) error {
	switch cfg.Hostile {
	case "flood":
		return floodLoop(ctx, s, tn, timing, agg)
	case "churn":
		for i := 0; ctx.Err() == nil; i++ {
			b, err := tn.churnStep(timing, i)
			if err != nil {
				return err
			}
			submitOne(ctx, s, tn, b, agg)
		}
	case "huge":
		// Refused at admission whatever the run's deadline says.
		if _, err := s.Submit(context.Background(), tn.name, tn.hugeBatch(timing, 100_000)); err != nil {
			agg.refused(tn, err)
		}
		for ctx.Err() == nil {
			submitOne(ctx, s, tn, tn.hugeBatch(timing, maxBatchEntries(cfg)), agg)
		}
	}
	return nil
}

// submitOne submits one step and waits for it, recording its end (or its
// refusal, after which it backs off).
func submitOne(ctx context.Context, s *actors.Scheduler, tn *tenant, b lanes.Batch, agg *aggregate) {
	t0 := time.Now()
	p, err := s.SubmitAsync(context.Background(), tn.name, b)
	if err != nil {
		agg.refused(tn, err)
		backOff(ctx, err, 0)
		return
	}
	agg.accepted.Add(1)
	r, err := p.Result()
	agg.ended(laneOf(p), tn, time.Since(t0), r, err)
}

// floodLoop keeps the tenant's admission full.
func floodLoop(ctx context.Context, s *actors.Scheduler, tn *tenant, timing lanes.TimingMode, agg *aggregate) error {
	type inflight struct {
		p  lanes.Pending
		t0 time.Time
	}
	var pending []inflight
	end := func() {
		f := pending[0]
		pending = pending[1:]
		r, err := f.p.Result()
		agg.ended(laneOf(f.p), tn, time.Since(f.t0), r, err)
	}
	defer func() {
		for len(pending) > 0 {
			end()
		}
	}()
	for ctx.Err() == nil {
		b, err := tn.step(timing, -1)
		if err != nil {
			return err
		}
		p, err := s.SubmitAsync(context.Background(), tn.name, b)
		switch {
		case errors.Is(err, actors.ErrOverloaded) && len(pending) > 0:
			agg.refused(tn, err)
			end()
		case err != nil:
			agg.refused(tn, err)
			backOff(ctx, err, 0)
		default:
			agg.accepted.Add(1)
			pending = append(pending, inflight{p, time.Now()})
		}
	}
	return nil
}

// churnStep is a step that nothing before it shares a replay key with: a
// 256 KiB upload keyed by i, and the tenant's chain with its fill value
// set to i.
func (tn *tenant) churnStep(timing lanes.TimingMode, i int) (lanes.Batch, error) {
	data := make([]byte, churnUpload)
	data[0] = byte(i)
	up, err := cuda.Upload(tn.big.Whole(), data)
	if err != nil {
		return lanes.Batch{}, err
	}
	key := cache.NewKey(provider, "churn-upload").U64(uint64(i)).Finish()
	entries := []lanes.Entry{{Phase: cache.PhaseCompute, Node: 0, Command: up,
		Replay: lanes.Replayable(up, key, tn.owner)}}
	for _, e := range tn.compute {
		e.Node++
		if e.Command.Kernel == kernels.Fill {
			cmd := e.Command
			cmd.Args = append([]cuda.Arg(nil), cmd.Args...)
			cmd.Args[1] = cuda.F32Arg(float32(i))
			e.Command = cmd
			e.Replay = lanes.Replayable(cmd, cache.LaunchKey(provider, cmd), tn.owner)
		}
		entries = append(entries, e)
	}
	return lanes.Batch{Entries: entries, Timing: timing}, nil
}

// hugeBatch is n eager launches of the tenant's chain, repeated.
func (tn *tenant) hugeBatch(timing lanes.TimingMode, n int) lanes.Batch {
	entries := make([]lanes.Entry, n)
	for i := range entries {
		e := tn.compute[i%len(tn.compute)]
		e.Node, e.Replay = i, nil
		entries[i] = e
	}
	return lanes.Batch{Entries: entries, Timing: timing}
}

// checkHostile validates --hostile.
func checkHostile(mode string) error {
	if !hostileModes[mode] {
		return fmt.Errorf("%w: --hostile %q: use flood, churn or huge", ErrConfig, mode)
	}
	return nil
}

// maxBatchEntries is the scheduler's batch bound in a run: the default,
// or room for the longest step --kernels makes.
func maxBatchEntries(cfg Config) int { return max(1024, cfg.Kernels+2) }
