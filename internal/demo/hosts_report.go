// The --host-per-gpu run's report in lanedemo-report/1: the same document
// as any run's, with a hosts section.

package demo

import (
	"time"

	"github.com/lanesched/lanes/internal/codes"
)

// report is the run as lanedemo-report/1: the counts, rates and latency
// every report has, from the front's side, and the hosts' rows in Hosts.
// A front does not see its hosts' lanes, so the per-lane rows and the
// cache figures are the hosts' own (absent); the command counts come from
// the steps' receipts.
func (rep *HostsReport) report(cfg Config, l *hostsLoad, meter *runtimeMeter) *Report {
	var ok []time.Duration
	for _, s := range l.samples {
		if s.err == nil {
			ok = append(ok, s.lat)
		}
	}
	us := func(q float64) int64 { return int64(quantileUS(ok, q)) }
	lanesServed := cfg.Lanes * len(rep.Hosts)
	if cfg.Hosts.InProcess {
		lanesServed = cfg.Lanes * cfg.Devices
	}
	refused := map[string]int64{}
	if rep.Total.RefusedLeaving > 0 {
		refused[codes.HostLeaving.String()] = int64(rep.Total.RefusedLeaving)
	}
	replayed, eager := l.replayed.Load(), l.eager.Load()
	out := &Report{
		Schema: ReportSchema, Settings: cfg.settings(), Device: rep.Device, Lanes: lanesServed, Tenants: cfg.Tenants, Kernels: cfg.Kernels,
		Mode: cfg.Mode, Timing: cfg.Timing, Seconds: rep.MeasuredS, EndedEarly: rep.EndedEarly,
		Accepted: int64(rep.Submitted), Ended: int64(rep.Ended), Succeeded: int64(rep.Total.Steps),
		Indeterminate: int64(rep.Total.Indeterminate), Failed: int64(rep.Total.Errors), Refused: refused,
		StepsPerSec: rep.Total.StepsPerS, Latency: Latency{P50: us(.5), P90: us(.9), P99: us(.99), Max: us(1)},
		ReplayedCommands: replayed, EagerCommands: eager, Gaps: map[string]int64{},
		ExactlyOnce: rep.ExactlyOnce, PerLane: []LaneReport{}, PerTenant: []TenantReport{},
		Runtime: meter.report(int64(rep.Total.Steps), time.Duration(rep.MeasuredS*float64(time.Second))),
		Hosts:   rep,
	}
	if replayed+eager > 0 {
		out.ReplayShare = float64(replayed) / float64(replayed+eager)
	}
	return out
}
