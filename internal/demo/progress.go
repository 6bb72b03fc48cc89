// What runs beside the load: the progress line (through every phase), the
// soak sampler and the Go runtime's meter (over the measured phase).

package demo

import (
	"fmt"
	"sync"
	"time"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cuda"
)

// watchers are what runs beside the load.
type watchers struct {
	done    chan struct{}
	wg      sync.WaitGroup
	soak    *soaker
	meter   *runtimeMeter
	runtime RuntimeReport
	devs    []cuda.Device
}

// startWatchers starts the progress line (when the options ask for one);
// it shows the warm-up, the measured phase and the draining.
func startWatchers(cfg Config, opt Options, s *actors.Scheduler, devs []cuda.Device, agg *aggregate, lc *lifecycle) *watchers {
	w := &watchers{done: make(chan struct{}), devs: devs}
	if opt.Progress != nil {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			showProgress(opt, s, agg, lc, w.done)
		}()
	}
	return w
}

// measuring starts what watches the measured phase alone: the runtime
// meter and (with --soak) the soak sampler.
func (w *watchers) measuring(cfg Config, s *actors.Scheduler, agg *aggregate, lc *lifecycle) {
	w.meter = startRuntimeMeter()
	if cfg.Soak > 0 {
		w.soak = &soaker{devs: w.devs, agg: agg, start: time.Now()}
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.soak.run(max(cfg.Soak/30, time.Second), w.done)
		}()
	}
}

// measured reads the runtime meter at the measured phase's end.
func (w *watchers) measured(agg *aggregate, elapsed time.Duration) {
	if w.meter != nil {
		w.runtime = w.meter.report(agg.measuredEnded, elapsed)
	}
}

// stop ends the watchers and waits for them.
func (w *watchers) stop() {
	close(w.done)
	w.wg.Wait()
}

// showProgress prints the live progress line until done: the warm-up's
// steps, then the measured phase's rate, then what is still draining.
func showProgress(opt Options, s *actors.Scheduler, a *aggregate, lc *lifecycle, done <-chan struct{}) {
	period := time.Second
	if opt.Terminal {
		period = 250 * time.Millisecond
	}
	tick := time.NewTicker(period)
	defer tick.Stop()
	start := time.Now()
	last, lastT := int64(0), start
	for {
		select {
		case <-done:
			if opt.Terminal {
				fmt.Fprint(opt.Progress, "\r\033[K")
			}
			return
		case now := <-tick.C:
			n := a.endedN.Load()
			rate := float64(n-last) / now.Sub(lastT).Seconds()
			last, lastT = n, now
			q, lanes := 0, s.Lanes()
			for _, l := range lanes {
				if l.Health == actors.HealthQuarantined {
					q++
				}
			}
			var line string
			switch lc.phase.Load() {
			case phaseWarmup:
				line = fmt.Sprintf("%5.1fs  warm-up: %d of %d steps (preparation open)  quarantined %d/%d", now.Sub(start).Seconds(),
					lc.warmDone.Load(), lc.warmTotal.Load(), q, len(lanes))
			case phaseMeasured:
				rep, eag := a.replayedN.Load(), a.eagerN.Load()
				share := 0.0
				if rep+eag > 0 {
					share = 100 * float64(rep) / float64(rep+eag)
				}
				line = fmt.Sprintf("%5.1fs  %7.0f steps/s  replay %5.1f%%  quarantined %d/%d", now.Sub(start).Seconds(), rate, share, q, len(lanes))
			default:
				line = fmt.Sprintf("%5.1fs  draining: %d submissions still in flight (measured phase over)  quarantined %d/%d", now.Sub(start).Seconds(),
					a.accepted.Load()-n, q, len(lanes))
			}
			if opt.Terminal {
				fmt.Fprint(opt.Progress, "\r\033[K"+line)
			} else {
				fmt.Fprintln(opt.Progress, line)
			}
		}
	}
}
