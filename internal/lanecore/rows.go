// Rows of a receipt as a lane builds them: operation names, memoized,
// and the cache events of a plan.

package lanecore

import (
	"errors"
	"slices"

	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"

	discovery "github.com/lanesched/lanes/internal/discovery"

	lanes "github.com/lanesched/lanes/lanes"
)

// Submission is an accepted batch: its fence and what it did.
type Submission struct {
	Fence       uint64
	Attribution lanes.Attribution
	Preparation discovery.PrepareReport
}

// events lists what preparation did to the cache.
func (p *plan) events() []lanes.CacheEvent {
	var out []lanes.CacheEvent
	rej := 0
	for ci, d := range p.rep.Dispositions {
		key := p.disc.Candidates[ci].Key
		var ev lanes.CacheEvent
		switch d {
		case discovery.DispositionCaptured:
			ev.Kind = "captured"
		case discovery.DispositionUpdated:
			ev.Kind = "updated"
			for _, u := range p.rep.Updates {
				if u.To == key {
					ev.Detail, ev.Reason = "in place of "+u.From.String(), u.InPlace.String()
				}
			}
		case discovery.DispositionCaptureRejected:
			ev.Kind = "capture_rejected"
			if rej < len(p.rep.Rejections) {
				ev.Detail = p.rep.Rejections[rej].Error()
				rej++
			}
		default:
			continue // a hit or a deferral: nothing happened to the cache
		}
		ev.Key = key.String()
		out = append(out, ev)
	}
	for _, k := range p.rep.Evicted {
		if !slices.ContainsFunc(p.rep.Updates, func(u discovery.Update) bool { return u.From == k }) { // an update re-keys, it evicts nothing
			out = append(out, lanes.CacheEvent{Kind: "evicted", Key: k.String()})
		}
	}
	for _, err := range p.rep.UpdateRefusals {
		out = append(out, lanes.CacheEvent{Kind: "update_refused", Detail: err.Error()})
	}
	for _, err := range p.rep.RebindRefusals {
		ev := lanes.CacheEvent{Kind: "rebind_refused", Detail: err.Error()}
		var refused *backend.RebindRefusedError
		if errors.As(err, &refused) {
			ev.Reason = string(refused.Refusal)
		}
		out = append(out, ev)
	}
	return out
}

// launchOp is a launch's operation id, built once per kernel name.
func (l *Lane) launchOp(kernel string) string { return memoOp(&l.ops, "launch:", kernel) }

// callOp is a library call's operation id, built once per call name.
func (l *Lane) callOp(name string) string { return memoOp(&l.callOps, "call:", name) }

// memoOp returns prefix+name, built once per name in *memo (bounded).
func memoOp(memo *map[string]string, prefix, name string) string {
	op, ok := (*memo)[name]
	if !ok {
		if *memo == nil || len(*memo) >= keyMemoLimit {
			*memo = map[string]string{}
		}
		op = prefix + name
		(*memo)[name] = op
	}
	return op
}

// row attributes entry i.
func (l *Lane) row(i int, e lanes.Entry, replayed bool, reason cache.Reason) lanes.Row {
	r := lanes.Row{Index: i, Node: e.Node, Phase: e.Phase, Replayed: replayed, Reason: reason, Work: e.Work}
	switch {
	case e.Invoke != nil:
		r.Op, r.Dispatches = "invoke", e.Invoke.Segment.Commands
	case e.Command.Kind == cuda.KindLaunch:
		r.Op, r.Dispatches = l.launchOp(e.Command.Kernel), 1
	case e.Command.Kind == cuda.KindCall:
		r.Op, r.Dispatches = l.callOp(e.Command.LibraryCall.Name), 1
	default:
		r.Op, r.Transfers = e.Command.Kind.String(), 1
	}
	return r
}
