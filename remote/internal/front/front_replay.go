// A tenant's staged replays through the front: Replay, ReplayInto and
// Repeat, as actors.Scheduler serves them in one process. Inputs go to the
// host (in the upload area where it has room); Repeat sends none, and the
// host's lane replays the inputs it kept of the last replay.

package front

import (
	"context"
	"fmt"
	"time"

	laneerr "github.com/lanesched/lanes/internal/laneerr"
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/lanes"

	dataplane "github.com/lanesched/lanes/remote/internal/dataplane"

	system "github.com/lanesched/lanes/remote/internal/system"

	wire "github.com/lanesched/lanes/remote/internal/wire"
	"google.golang.org/protobuf/proto"
)

// Replay runs a staged program the tenant prepared, with inputs in logical
// order, and returns its outputs (when collect), as
// actors.Scheduler.Replay does: the same StagedResult (OutputCache,
// Resident, DeviceTime, the receipt) and the same errors, through a
// *PeerError. Its inputs of 4 KiB or more go into the upload area of the
// host's data plane where it has room (as uploads do), the rest in the
// message, and the host copies them into the program's staging: once,
// from the area where the GPU host pins it. A program of another tenant,
// released, or prepared under a host registration that is gone is refused
// (a *DeviceStateLostError for a host lost or restarted since: prepare it
// again).
func (f *Front) Replay(ctx context.Context, tenant string, p *StagedProgram, inputs [][]byte, collect bool) (lanes.StagedResult, error) {
	return f.replay(ctx, tenant, p, stagedCall{inputs: inputs, collect: collect})
}

// ReplayInto is Replay with the outputs copied into the caller's buffers,
// as actors.Scheduler.ReplayInto: one per output, in logical order, each
// exactly its length (StagedProgram.MakeOutputs allocates them), the
// result's Outputs being those buffers. Buffers of another number or
// length are refused before anything is sent, with the error one process
// gives (lanes.ErrStagedInput). They are written only while ReplayInto
// waits; a replay that fails leaves their contents unspecified.
func (f *Front) ReplayInto(ctx context.Context, tenant string, p *StagedProgram, inputs, outputs [][]byte) (lanes.StagedResult, error) {
	return f.replay(ctx, tenant, p, stagedCall{inputs: inputs, outputs: outputs, into: true, collect: true})
}

// Repeat runs a staged program again on the inputs of its last replay, as
// actors.Scheduler.Repeat: the inputs are not sent again (the host's lane
// kept its own copy of them, and replays them exactly without comparing;
// while their outputs are cached, it copies them into outputs and launches
// nothing). With nil outputs it collects nothing and always runs; other
// outputs are as ReplayInto's. A program never replayed yet is refused as
// one process refuses it (lanes.ErrStagedInput: nothing to repeat).
func (f *Front) Repeat(ctx context.Context, tenant string, p *StagedProgram, outputs [][]byte) (lanes.StagedResult, error) {
	return f.replay(ctx, tenant, p, stagedCall{outputs: outputs, into: outputs != nil, collect: outputs != nil, repeat: true})
}

// stagedCall is what one Replay, ReplayInto or Repeat asks.
type stagedCall struct {
	inputs, outputs       [][]byte
	into, collect, repeat bool
}

// checkOutputs refuses buffers that do not fit the program's outputs, as
// lanecore.Staged.CheckOutputs does, in its words.
func (p *StagedProgram) checkOutputs(outputs [][]byte) error {
	if len(outputs) != len(p.outSizes) {
		return fmt.Errorf("%w: Fix: the staged program has %d output(s) but %d buffer(s) were passed for them; allocate them with MakeOutputs", lanes.ErrStagedInput, len(p.outSizes), len(outputs))
	}
	for i, n := range p.outSizes {
		if uint64(len(outputs[i])) != n {
			return fmt.Errorf("%w: Fix: output %d is %d bytes but its buffer holds %d; pass buffers of exactly OutputSizes (MakeOutputs allocates them)", lanes.ErrStagedInput, i, n, len(outputs[i]))
		}
	}
	return nil
}

// replay is Replay, ReplayInto and Repeat: c says which, and what with.
func (f *Front) replay(ctx context.Context, tenant string, p *StagedProgram, c stagedCall) (lanes.StagedResult, error) {
	op := "staged replay"
	if c.repeat {
		op = "staged repeat"
	}
	if err := f.admit(ctx, tenant); err != nil {
		return lanes.StagedResult{}, err
	}
	if err := p.of(tenant); err != nil {
		return lanes.StagedResult{}, laneerr.Wrap(op, true, err)
	}
	if c.into {
		if err := p.checkOutputs(c.outputs); err != nil {
			return lanes.StagedResult{}, laneerr.Wrap(op, true, err)
		}
	}
	var bytes int64
	for i, in := range c.inputs {
		if len(in) > wire.MaxHostBytes {
			return lanes.StagedResult{}, wire.TooLarge("input %d is %d bytes; at most %d cross the wire", i, len(in), wire.MaxHostBytes)
		}
		bytes += int64(len(in))
	}
	if c.collect {
		bytes += int64(min(p.out, system.MaxBytesInFlight))
	}
	pl, err := f.place(tenant)
	if err != nil {
		return lanes.StagedResult{}, err
	}
	l, epoch := pl.link, pl.epoch
	if l.Name != p.host || epoch != p.epoch {
		return lanes.StagedResult{}, laneerr.Wrap(op, true, l.stateLost(tenant, p.epoch))
	}
	if err := refuseLeaving(tenant, l, epoch); err != nil {
		return lanes.StagedResult{}, err
	}
	m := &wirepb.StagedReplay{Epoch: epoch, Tenant: tenant, Staged: p.id, Collect: c.collect, Repeat: c.repeat}
	var slots []areaSlot
	for i, in := range c.inputs {
		w := &wirepb.Input{Entry: uint32(i), Host: in}
		m.Inputs = append(m.Inputs, w)
		if len(in) >= dataplane.AreaMinUpload {
			slots = append(slots, areaSlot{host: &w.Host, area: &w.Area})
		}
	}
	res, err := f.opWith(ctx, l, epoch, tenant, bytes, func(p *Pending) {
		if len(slots) > 0 {
			l.intoArea(epoch, slots, p)
		}
	}, func(call uint64) proto.Message {
		m.Call = call
		return m
	})
	if res == nil || res.Replay == nil {
		return lanes.StagedResult{}, err
	}
	out := lanes.StagedResult{Outputs: res.Replay.Outputs, DeviceTime: time.Duration(res.Replay.DeviceTimeNs), TimeKnown: res.Replay.TimeKnown,
		OutputCache: res.Replay.OutputCache, Resident: res.Replay.Resident}
	if w := res.Replay.Receipt; w != nil {
		_, _, r, _, rerr := wire.ReceiptFromWire(w)
		if rerr != nil && err == nil {
			err = rerr
		}
		out.Receipt = r
	}
	switch {
	case len(out.Outputs) == 0:
		out.Outputs = nil
	case c.into:
		if werr := handOver(out.Outputs, c.outputs); werr != nil {
			out.Outputs = nil
			if err == nil {
				err = werr
			}
			break
		}
		out.Outputs = c.outputs
	}
	return out, err
}

// handOver copies a replay's outputs, as the host sent them, into the
// caller's buffers (checked against the program's sizes already): a host
// that sent others is refused.
func handOver(got, into [][]byte) error {
	if len(got) != len(into) {
		return wire.WireErr("a replay of %d outputs answered with %d", len(into), len(got))
	}
	for i, b := range got {
		if len(b) != len(into[i]) {
			return wire.WireErr("output %d: %d bytes for a buffer of %d", i, len(b), len(into[i]))
		}
	}
	for i, b := range got {
		copy(into[i], b)
	}
	return nil
}
