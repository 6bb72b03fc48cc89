// Events, graphs and executables of the simulated device.

package sim

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
	"github.com/lanesched/lanes/internal/codes"
)

// event marks a point in a stream: the item seq, due at device time at.
type event struct {
	s        *stream
	seq      uint64
	at       time.Duration
	timed    bool        // a timing event (Record), not a fence (RecordFence)
	released atomic.Bool // handed back with Release: the handle is stale
}

var _ backend.Event = (*event)(nil)

// stale is the error of a handle used after Release.
func (e *event) stale(op string) error { return backend.CheckEvent(op, e.released.Load()) }

// Query reports the event's state. A poisoned device answers every query
// with its sticky error, as CUDA does, whether or not the work had finished;
// an event reached after work its stream failed (Config.InitCheck) answers
// with that error until a Synchronize or Readback of the stream reported it.
func (e *event) Query() backend.FenceQuery {
	if err := e.stale("event query"); err != nil {
		return backend.FenceQuery{State: backend.FenceIndeterminate, Err: err}
	}
	d := e.s.dev
	now := d.clock.now()
	if d.clock.mode == ClockVirtual {
		d.settle(now)
	}
	if err := d.Err(); err != nil {
		return backend.FenceQuery{State: backend.FenceIndeterminate, Err: err}
	}
	if d.clock.timed() && e.at > now {
		return backend.FenceQuery{State: backend.FencePending}
	}
	e.s.mu.Lock()
	done := e.s.doneSeq >= e.seq
	e.s.mu.Unlock()
	if !done {
		return backend.FenceQuery{State: backend.FencePending}
	}
	if err := e.s.failedBy(e.seq, false); err != nil {
		return backend.FenceQuery{State: backend.FenceIndeterminate, Err: err}
	}
	return backend.FenceQuery{State: backend.FenceComplete}
}

// Synchronize blocks until the event completes.
func (e *event) Synchronize() error {
	const op = "event synchronize"
	if err := e.stale(op); err != nil {
		return err
	}
	if err := e.s.waitSeq(op, e.seq, e.at); err != nil {
		return err
	}
	return e.s.failedBy(e.seq, false)
}

// Elapsed is the device time from start to e.
func (e *event) Elapsed(start backend.Event) (time.Duration, error) {
	const op = "event elapsed"
	s, ok := start.(*event)
	if !ok || s.s.dev != e.s.dev {
		return 0, cuda.Contractf(op, cuda.ErrForeignHandle, "the start event belongs to another device")
	}
	for _, ev := range []*event{s, e} {
		if err := ev.stale(op); err != nil {
			return 0, err
		}
		if !ev.timed {
			return 0, backend.DriverError(op, codes.InvalidHandle, "an event recorded with RecordFence has no timing; record both ends with Record")
		}
		if q := ev.Query(); q.State != backend.FenceComplete {
			if q.Err != nil {
				return 0, q.Err
			}
			return 0, backend.DriverError(op, codes.NotReady, "an event has not completed yet; query it until it completes")
		}
	}
	return e.at - s.at, nil
}

// Release marks the handle stale. The simulated device keeps no event
// resources, so there is nothing to reuse.
func (e *event) Release() { e.released.Store(true) }

// graph is a captured node list.
type graph struct {
	dev       *device
	nodes     []node
	destroyed atomic.Bool
}

var _ backend.Graph = (*graph)(nil)

func (g *graph) NodeCount() int { return len(g.nodes) }

// Instantiate makes an executable from the graph. The buffers its nodes
// name are checked when it is launched, not here (see stream.Launch).
func (g *graph) Instantiate() (backend.Exec, error) {
	const op = "graph instantiate"
	if g.destroyed.Load() {
		return nil, cuda.Contractf(op, cuda.ErrStaleHandle, "the graph was destroyed")
	}
	d := g.dev
	if err := d.check(op); err != nil {
		return nil, err
	}
	d.mu.Lock()
	oom := d.fire(FaultOutOfMemory, nil)
	d.mu.Unlock()
	if oom {
		return nil, backend.DriverError(op, codes.OutOfMemory, "injected out-of-memory fault while instantiating")
	}
	d.clock.spin(time.Duration(len(g.nodes)) * d.cost.InstantiateNode)
	x := &exec{dev: d}
	x.setNodes(g.nodes)
	return x, nil
}

// Destroy releases the graph.
func (g *graph) Destroy() error {
	if g.destroyed.Swap(true) {
		return cuda.Contractf("graph destroy", cuda.ErrStaleHandle, "the graph was already destroyed")
	}
	return nil
}

// exec is an executable graph.
type exec struct {
	dev       *device
	nodes     []node
	kernels   []string        // the kernels its nodes launch (nodeKernels), for the fault rules
	cost      time.Duration   // its nodes' device time (nodesCost): a launch charges it every time
	handles   backend.Handles // every buffer and host buffer its nodes name
	checked   atomic.Uint64   // the device's free epoch when its handles were last found live, plus one
	uploaded  atomic.Bool
	destroyed atomic.Bool

	// The last launch (idle): its stream and item, and on how many
	// streams it was launched (2: more than one). The owner's alone.
	lastStream *stream
	lastSeq    uint64
	launchedOn int
	scratch    []string // Rebind's kernel list, reused
}

// setNodes gives the executable its nodes and the handles they name.
func (x *exec) setNodes(ns []node) { x.takeNodes(append([]node(nil), ns...)) }

// takeNodes makes ns, which the caller gives up, the executable's nodes.
func (x *exec) takeNodes(ns []node) {
	x.nodes = ns
	x.refresh()
}

// refresh derives what the executable keeps of its nodes: their kernels,
// cost and handles (none of which a launch holds once it is enqueued).
func (x *exec) refresh() {
	x.kernels = appendKernels(x.kernels[:0], x.nodes)
	x.cost = x.dev.nodesCost(x.nodes)
	x.handles.Reset()
	for _, n := range x.nodes {
		x.handles.Add(n.cmd)
	}
	x.checked.Store(0)
}

var _ backend.Exec = (*exec)(nil)

func (x *exec) NodeCount() int { return len(x.nodes) }

// Upload prepares the executable through s.
func (x *exec) Upload(st backend.Stream) error {
	const op = "graph upload"
	if x.destroyed.Load() {
		return cuda.Contractf(op, cuda.ErrStaleHandle, "the executable was destroyed")
	}
	s, err := x.dev.ownStream(op, st)
	if err != nil {
		return err
	}
	if err := s.check(op); err != nil {
		return err
	}
	if err := s.unsupportedDuringCapture(op); err != nil {
		return err
	}
	if x.uploaded.Swap(true) {
		return nil
	}
	return s.submit(op, nil, x.dev.cost.TransferHost, x.dev.uploadCost(x.nodes))
}

// Update replaces the executable's nodes with g's, as cuGraphExecUpdate:
// same node count (else TOPOLOGY_CHANGED) and the same kind at every position
// (else NODE_TYPE_CHANGED); a kernel node may change its kernel, as drivers
// since 11.2 allow.
func (x *exec) Update(g backend.Graph) error {
	const op = "graph exec update"
	if x.destroyed.Load() {
		return cuda.Contractf(op, cuda.ErrStaleHandle, "the executable was destroyed")
	}
	gr, ok := g.(*graph)
	if !ok || gr == nil || gr.dev != x.dev {
		return cuda.Contractf(op, cuda.ErrForeignHandle, "the graph was not captured on device %d", x.dev.info.Instance)
	}
	if gr.destroyed.Load() {
		return cuda.Contractf(op, cuda.ErrStaleHandle, "the graph was destroyed")
	}
	if err := x.dev.check(op); err != nil {
		return err
	}
	if len(gr.nodes) != len(x.nodes) {
		return backend.DriverError(op, codes.GraphExecUpdateFailure,
			fmt.Sprintf("CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED: the graph has %d nodes, the executable %d; instantiate it instead", len(gr.nodes), len(x.nodes)))
	}
	for i := range gr.nodes {
		if a, b := gr.nodes[i].cmd.Kind, x.nodes[i].cmd.Kind; a != b {
			return backend.DriverError(op, codes.GraphExecUpdateFailure,
				fmt.Sprintf("CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED: node %d is a %v, the executable's a %v; instantiate it instead", i, a, b))
		}
	}
	x.dev.mu.Lock()
	refused := x.dev.fire(FaultUpdateReject, nodeKernels(gr.nodes))
	x.dev.mu.Unlock()
	if refused {
		return backend.DriverError(op, codes.GraphExecUpdateFailure, "CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED: injected update refusal")
	}
	x.dev.clock.spin(time.Duration(len(gr.nodes)) * x.dev.cost.UpdateNode)
	x.setNodes(gr.nodes)
	return nil
}

// Destroy releases the executable; launches already enqueued complete.
func (x *exec) Destroy() error {
	if x.destroyed.Swap(true) {
		return cuda.Contractf("graph exec destroy", cuda.ErrStaleHandle, "the executable was already destroyed")
	}
	return nil
}

// exec checks that e is a live executable of this device.
func (d *device) exec(op string, e backend.Exec) (*exec, error) {
	x, ok := e.(*exec)
	mine := ok && x != nil && x.dev == d
	if err := backend.CheckExec(op, d.info.Instance, mine, mine && x.destroyed.Load()); err != nil {
		return nil, err
	}
	return x, nil
}

// ownStream checks that st is a stream of this device.
func (d *device) ownStream(op string, st backend.Stream) (*stream, error) {
	s, ok := backend.UnwrapStream(st).(*stream)
	if !ok || s == nil || s.dev != d {
		return nil, cuda.Contractf(op, cuda.ErrForeignHandle, "the stream does not belong to device %d", d.info.Instance)
	}
	return s, nil
}

// nodeKernels lists the kernels the nodes launch.
func nodeKernels(ns []node) []string { return appendKernels(nil, ns) }

// appendKernels appends the kernels the nodes launch to out.
func appendKernels(out []string, ns []node) []string {
	for i := range ns {
		if k, ok := kernelOf(&ns[i].cmd); ok {
			out = append(out, k)
		}
	}
	return out
}

// kernelOf is the kernel a command launches, if it launches one (a library
// call is a launch of its own name).
func kernelOf(c *cuda.Command) (string, bool) {
	switch c.Kind {
	case cuda.KindLaunch:
		return c.Kernel, true
	case cuda.KindCall:
		return c.LibraryCall.Name, true
	}
	return "", false
}
