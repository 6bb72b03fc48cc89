// A lane host's staged programs: declared by a front for a tenant, with
// pinned staging the host makes for each slot, replayed with the bytes a
// front sends, and freed when the front releases them or the tenant ends.

package host

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/lanesched/lanes/actors"
	"github.com/lanesched/lanes/cache"
	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	lanecore "github.com/lanesched/lanes/internal/lanecore"
	"github.com/lanesched/lanes/internal/wirepb"
	"github.com/lanesched/lanes/lanes"

	dataplane "github.com/lanesched/lanes/remote/internal/dataplane"

	wire "github.com/lanesched/lanes/remote/internal/wire"
)

// stagedProgram is a staged program a host keeps for a tenant: its lane
// (where it was prepared, and alone replays it), its staging, and its
// replays in flight.
type stagedProgram struct {
	st      *actors.StagedProgram
	tenant  string // the host's (scoped) name of its tenant
	lane    int
	dev     backend.Device
	staging []cuda.HostBuffer
	busy    int // replays in flight (hostStaged.mu)
}

// hostStaged is a host's staged programs, by id.
type hostStaged struct {
	mu    sync.Mutex
	next  uint64
	progs map[uint64]*stagedProgram
}

func newHostStaged() *hostStaged {
	return &hostStaged{progs: map[uint64]*stagedProgram{}}
}

// held counts the staged programs of tenant the host keeps.
func (hs *hostStaged) held(tenant string) int {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	n := 0
	for _, sp := range hs.progs {
		if sp.tenant == tenant {
			n++
		}
	}
	return n
}

// prepareStaged makes a tenant's staged program: pinned staging for each
// slot, owned by the tenant, and the program captured on the lane
// stagedLane picks.
func (o *hostOps) prepareStaged(res *wirepb.OpResult, epoch uint64, tenant string, m *wirepb.StagedPrepare) error {
	hs := o.staged
	if n := hs.held(tenant); n >= wire.MaxStagedPerTenant {
		return fmt.Errorf("%w: tenant %q keeps %d staged programs on this host (at most %d): release one (Front.ReleaseStaged)", actors.ErrProgramLimit, tenant, n, wire.MaxStagedPerTenant)
	}
	if len(m.Inputs)+len(m.Outputs) > wire.MaxStagedSlots || len(m.InputMap) != len(m.Inputs) || len(m.OutputMap) != len(m.Outputs) {
		return wire.WireErr("a staged program of %d inputs and %d outputs (maps of %d and %d): at most %d slots, a map entry each", len(m.Inputs), len(m.Outputs), len(m.InputMap), len(m.OutputMap), wire.MaxStagedSlots)
	}
	compute, err := wire.BatchFromWire(&wirepb.Batch{Entries: m.Compute}, wire.Decoding{Calls: o.h.cfg.Calls, Host: o.h.cfg.Name, Scope: wire.RegistrationScope(epoch)})
	if err != nil {
		return err
	}
	sp := &stagedProgram{tenant: tenant}
	fail := func(err error) error {
		sp.free()
		return err
	}
	slots := func(regions []*wirepb.Region, what string) ([]lanes.Slot, error) {
		var out []lanes.Slot
		for i, w := range regions {
			r, err := wire.RegionFromWire(w)
			if err != nil {
				return nil, fmt.Errorf("%s slot %d: %w", what, i, err)
			}
			dev := o.deviceOf(r.Buffer)
			switch {
			case dev == nil:
				return nil, cuda.Contractf("staged", cuda.ErrStaleHandle, "%s slot %d names buffer %d of device instance %d, which this host does not serve", what, i, r.Buffer.ID, r.Buffer.Device)
			case sp.dev != nil && dev != sp.dev:
				return nil, cuda.Contractf("staged", cuda.ErrForeignHandle, "%s slot %d is on another device than slot 0: a staged program runs on one lane", what, i)
			case r.Length == 0 || r.Length > wire.MaxHostBytes:
				return nil, cuda.Contractf("staged", cuda.ErrInvalidCommand, "%s slot %d is %d bytes: 1 to %d", what, i, r.Length, uint64(wire.MaxHostBytes))
			}
			sp.dev = dev
			hb, err := dev.AllocHost(r.Length)
			if err != nil {
				return nil, err
			}
			sp.staging = append(sp.staging, hb)
			out = append(out, lanes.Slot{Staging: cuda.HostRegion{Buffer: hb, Length: r.Length}, Device: r})
		}
		return out, nil
	}
	ins, err := slots(m.Inputs, "input")
	if err != nil {
		return fail(err)
	}
	outs, err := slots(m.Outputs, "output")
	if err != nil {
		return fail(err)
	}
	inMap, err := wire.IntsFromWire(m.InputMap, "input map")
	if err != nil {
		return fail(err)
	}
	outMap, err := wire.IntsFromWire(m.OutputMap, "output map")
	if err != nil {
		return fail(err)
	}
	spec := lanes.StagedSpec{Inputs: ins, InputMap: inMap, Outputs: outs, OutputMap: outMap, Compute: compute.Entries}
	if _, err := lanecore.NewStaged(spec.Inputs, spec.InputMap, spec.Outputs, spec.OutputMap, spec.Compute); err != nil {
		return fail(err) // refused before its staging is owned or a lane chosen
	}
	if err := o.h.sched.OwnHost(tenant, sp.staging...); err != nil {
		return fail(err)
	}
	if sp.lane, err = o.stagedLane(tenant, sp.dev); err != nil {
		return fail(err)
	}
	if sp.st, err = o.h.sched.PrepareStaged(context.Background(), tenant, sp.lane, spec); err != nil {
		return fail(err)
	}
	hs.mu.Lock()
	hs.next++
	id := hs.next
	hs.progs[id] = sp
	hs.mu.Unlock()
	res.Staged = id
	res.StagedInBytes, res.StagedOutBytes = sp.st.Bytes()
	return nil
}

// stagedLane is the lane a tenant's staged program is prepared on: the
// lane its batches run on when that lane serves dev, else the lane of dev
// that holds the fewest of the host's staged programs (its first, at a
// tie), so that tenants that only replay spread over the lanes; of those,
// one whose preparation is open (a sealed lane captures nothing), when
// there is one.
func (o *hostOps) stagedLane(tenant string, dev cuda.Device) (int, error) {
	devIndex := -1
	for i, d := range o.h.cfg.Scheduler.Devices {
		if d == dev {
			devIndex = i
		}
	}
	held := map[int]int{}
	o.staged.mu.Lock()
	for _, sp := range o.staged.progs {
		held[sp.lane]++
	}
	o.staged.mu.Unlock()
	var order []int
	lane, routed := o.h.sched.TenantLane(tenant)
	for _, l := range o.h.sched.Lanes() {
		if l.Device == devIndex {
			order = append(order, l.ID)
		}
	}
	if len(order) == 0 {
		return 0, fmt.Errorf("%w: no lane serves the device of the program's buffers", actors.ErrUnknownLane)
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case routed && a == lane:
			return -1
		case routed && b == lane:
			return 1
		}
		return held[a] - held[b]
	})
	for _, id := range order {
		if p, _ := o.h.sched.Preparation(context.Background(), id); p.State == cache.PrepOpen {
			return id, nil
		}
	}
	return order[0], nil // it refuses the program, saying why
}

// free frees the program's staging (it is not replaying).
func (sp *stagedProgram) free() {
	for _, hb := range sp.staging {
		_ = sp.dev.FreeHost(hb)
	}
	sp.staging = nil
}

// take is the tenant's staged program id, counted as replaying.
func (hs *hostStaged) take(tenant string, id uint64) (*stagedProgram, error) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	sp, ok := hs.progs[id]
	if !ok || sp.tenant != tenant {
		return nil, fmt.Errorf("%w: staged program %d: tenant %q prepared none of that id on this host (released, its tenant forgotten, or the host restarted: prepare it again)", lanes.ErrStagedInput, id, tenant)
	}
	sp.busy++
	return sp, nil
}

func (hs *hostStaged) done(sp *stagedProgram) {
	hs.mu.Lock()
	sp.busy--
	hs.mu.Unlock()
}

// replayStaged runs one replay of a tenant's staged program and answers
// it. It runs on a goroutine of its own: a replay waits for its fence,
// and other tenants' operations do not wait for it.
func (h *Host) replayStaged(epoch, call uint64, m *wirepb.StagedReplay, inputs [][]byte, release func(), inputErr error) {
	defer release()
	if _, ok := h.serving(epoch); !ok {
		return // sent to a registration the front has dropped
	}
	res := &wirepb.OpResult{Epoch: epoch, Call: call}
	defer func() { h.send(Outgoing{result: res}) }()
	tenant := scoped(epoch, m.Tenant)
	if h.Leaving.Load() {
		wire.ErrorToResult(res, errLeaving)
		return
	}
	if inputErr != nil {
		wire.ErrorToResult(res, inputErr)
		return
	}
	sp, err := h.ops.staged.take(tenant, m.Staged)
	if err != nil {
		wire.ErrorToResult(res, err)
		return
	}
	defer h.ops.staged.done(sp)
	var r lanes.StagedResult
	switch {
	case m.Repeat && len(inputs) > 0:
		wire.ErrorToResult(res, wire.WireErr("a repeat with %d inputs: it replays the last replay's", len(inputs)))
		return
	case m.Repeat:
		// The lane's own copy of the last inputs: nothing crossed.
		var outputs [][]byte
		if m.Collect {
			outputs = sp.st.MakeOutputs()
		}
		r, err = h.sched.Repeat(context.Background(), tenant, sp.st, outputs)
	default:
		r, err = h.sched.Replay(context.Background(), tenant, sp.st, inputs, m.Collect)
	}
	out := &wirepb.StagedOutcome{Outputs: r.Outputs, DeviceTimeNs: r.DeviceTime.Nanoseconds(), TimeKnown: r.TimeKnown, OutputCache: r.OutputCache, Resident: r.Resident}
	if r.Receipt.Outcome != 0 || r.Receipt.Fence != 0 {
		out.Receipt = h.receiptToFront(epoch, call, r.Receipt, tenant, m.Tenant)
	}
	res.Replay = out
	if err != nil {
		wire.ErrorToResult(res, err)
	}
}

// stagedInputs are a staged replay's inputs, in logical order: each in
// its message, or in the upload area of the registration's data plane,
// read there in place while the area is held where it is pinned (release
// lets it go), else copied out now (on the goroutine that read the
// message, while the plane is mapped).
func (h *Host) stagedInputs(epoch uint64, m *wirepb.StagedReplay) (inputs [][]byte, release func(), err error) {
	release = func() {}
	if len(m.Inputs) > wire.MaxStagedSlots {
		return nil, release, wire.WireErr("%d inputs; a staged program has at most %d slots", len(m.Inputs), wire.MaxStagedSlots)
	}
	var area []byte
	var held *dataplane.DataPlane
	for _, in := range m.Inputs {
		if in.GetArea() == nil {
			continue
		}
		if r, ok := h.serving(epoch); ok {
			if p := r.PlaneFor(); p != nil {
				area = p.Area
				if p.HoldArea() {
					held = p
					release = p.ReleaseArea
				}
			}
		}
		break
	}
	for i, in := range m.Inputs {
		switch {
		case in == nil || in.Entry != uint32(i) || len(in.Host) > wire.MaxHostBytes:
			return nil, release, wire.WireErr("staged input %d: malformed", i)
		case in.Area != nil:
			b, err := wire.FromArea(area, in.Area, held != nil)
			if err != nil {
				return nil, release, err
			}
			inputs = append(inputs, b)
		default:
			inputs = append(inputs, in.Host)
		}
	}
	return inputs, release, nil
}

// releaseStaged frees a tenant's staged program, unless it is replaying.
func (o *hostOps) releaseStaged(tenant string, m *wirepb.StagedRelease) error {
	hs := o.staged
	hs.mu.Lock()
	sp, ok := hs.progs[m.Staged]
	switch {
	case !ok || sp.tenant != tenant:
		hs.mu.Unlock()
		return fmt.Errorf("%w: staged program %d: tenant %q holds none of that id on this host", lanes.ErrStagedInput, m.Staged, tenant)
	case sp.busy > 0:
		hs.mu.Unlock()
		return fmt.Errorf("%w: staged program %d has %d replays in flight: release it once they end", actors.ErrTenantBusy, m.Staged, sp.busy)
	}
	delete(hs.progs, m.Staged)
	hs.mu.Unlock()
	sp.free()
	return nil
}

// forgetStaged frees every staged program of a tenant the scheduler has
// forgotten (none replays: the scheduler refuses to forget a busy tenant).
func (o *hostOps) forgetStaged(tenant string) {
	hs := o.staged
	hs.mu.Lock()
	var gone []*stagedProgram
	for id, sp := range hs.progs {
		if sp.tenant == tenant && sp.busy == 0 {
			gone = append(gone, sp)
			delete(hs.progs, id)
		}
	}
	hs.mu.Unlock()
	for _, sp := range gone {
		sp.free()
	}
}
