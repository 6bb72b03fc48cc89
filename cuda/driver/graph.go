//go:build cuda

// Graphs and executables of the real device: instantiation, upload,
// in-place update and launch.

package driver

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
)

// pinSet is the staging memory of the uploads recorded into one graph. The
// graph and every executable made from it hold a reference; the last release
// returns the memory to the arena. A nil pinSet holds nothing.
type pinSet struct {
	arena *arena
	refs  atomic.Int32
	mu    sync.Mutex
	spans []pinned
}

type pinned struct {
	p unsafe.Pointer
	n uint64
}

func (ps *pinSet) add(p unsafe.Pointer, n uint64) {
	ps.mu.Lock()
	ps.spans = append(ps.spans, pinned{p, n})
	ps.mu.Unlock()
}

func (ps *pinSet) retain() *pinSet {
	if ps != nil {
		ps.refs.Add(1)
	}
	return ps
}

// release drops one reference; a set never retained is freed at once.
func (ps *pinSet) release() {
	if ps == nil || ps.refs.Add(-1) > 0 {
		return
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for _, s := range ps.spans {
		ps.arena.release(s.p, s.n)
	}
	ps.spans = nil
}

// graph is a captured CUgraph. Its executables keep the CUgraph alive
// (refs) after Destroy: Rebind names their nodes by the graph's.
type graph struct {
	dev       *device
	g         cGraph
	nodes     int
	pins      *pinSet
	handles   backend.Handles // the buffers its nodes name
	refs      atomic.Int32    // Destroy's and each executable's
	destroyed atomic.Bool
}

// release drops one reference; the last destroys the CUgraph.
func (g *graph) release() cResult {
	if g.refs.Add(-1) > 0 {
		return 0
	}
	return destroyGraph(g.dev.ctx, g.g)
}

var _ backend.Graph = (*graph)(nil)

func (g *graph) NodeCount() int { return g.nodes }

// Instantiate makes an executable (cuGraphInstantiateWithFlags).
func (g *graph) Instantiate() (backend.Exec, error) {
	const op = "graph instantiate"
	if g.destroyed.Load() {
		return nil, cuda.Contractf(op, cuda.ErrStaleHandle, "the graph was destroyed")
	}
	if err := g.dev.live(op); err != nil {
		return nil, err
	}
	var x cGraphExec
	r := g.dev.graphMem.measure(g.dev.ctx, g.nodes, func() cResult {
		var r cResult
		x, r = instantiate(g.dev.ctx, g.g)
		return r
	})
	if err := g.dev.check(op, r, "cuGraphInstantiateWithFlags"); err != nil {
		return nil, err
	}
	g.refs.Add(1)
	return &exec{dev: g.dev, x: x, nodes: g.nodes, pins: g.pins.retain(), handles: g.handles, origin: g}, nil
}

// Destroy releases the graph; executables made from it stay valid.
func (g *graph) Destroy() error {
	const op = "graph destroy"
	if g.destroyed.Swap(true) {
		return cuda.Contractf(op, cuda.ErrStaleHandle, "the graph was already destroyed")
	}
	g.pins.release()
	return g.dev.check(op, g.release(), "cuGraphDestroy")
}

// exec is an instantiated CUgraphExec.
type exec struct {
	dev       *device
	x         cGraphExec
	nodes     int
	pins      *pinSet
	handles   backend.Handles // the buffers its graph names
	checked   atomic.Uint64   // the device's free epoch when they were last found live, plus one
	destroyed atomic.Bool

	origin       *graph         // the graph it was instantiated from, kept for Rebind
	chain        []cGraphNode   // origin's nodes in capture order (walkChain)
	kinds        []cInt         // their kinds (nodeKernel, nodeMemcpy, nodeMemset)
	rebound      []cuda.Command // the commands the last Rebind gave the nodes (Args its own)
	chainRefusal error          // why origin has no such chain
	scratch      rebindScratch  // Rebind's, reused
}

var _ backend.Exec = (*exec)(nil)

func (x *exec) NodeCount() int { return x.nodes }

// Upload uploads the executable through a stream (cuGraphUpload).
func (x *exec) Upload(st backend.Stream) error {
	const op = "graph upload"
	if x.destroyed.Load() {
		return cuda.Contractf(op, cuda.ErrStaleHandle, "the executable was destroyed")
	}
	s, ok := backend.UnwrapStream(st).(*stream)
	if !ok || s.dev != x.dev {
		return cuda.Contractf(op, cuda.ErrForeignHandle, "the stream does not belong to device %d", x.dev.info.Instance)
	}
	if err := s.live(op); err != nil {
		return err
	}
	r := x.dev.graphMem.measure(x.dev.ctx, -1, func() cResult { return graphUpload(x.dev.ctx, x.x, s.s) })
	return x.dev.check(op, r, "cuGraphUpload")
}

// updateResults names CUgraphExecUpdateResult values.
var updateResults = []string{"SUCCESS", "ERROR", "ERROR_TOPOLOGY_CHANGED", "ERROR_NODE_TYPE_CHANGED", "ERROR_FUNCTION_CHANGED",
	"ERROR_PARAMETERS_CHANGED", "ERROR_NOT_SUPPORTED", "ERROR_UNSUPPORTED_FUNCTION_CHANGE", "ERROR_ATTRIBUTES_CHANGED"}

// Update updates the executable in place with g (cuGraphExecUpdate); it
// takes over g's pinned staging, since its memcpy nodes now read there.
func (x *exec) Update(g backend.Graph) error {
	const op = "graph exec update"
	if x.destroyed.Load() {
		return cuda.Contractf(op, cuda.ErrStaleHandle, "the executable was destroyed")
	}
	gr, ok := g.(*graph)
	if !ok || gr.dev != x.dev {
		return cuda.Contractf(op, cuda.ErrForeignHandle, "the graph was not captured on device %d", x.dev.info.Instance)
	}
	if gr.destroyed.Load() {
		return cuda.Contractf(op, cuda.ErrStaleHandle, "the graph was destroyed")
	}
	if err := x.dev.live(op); err != nil {
		return err
	}
	res, r := execUpdate(x.dev.ctx, x.x, gr.g)
	if r != 0 {
		name := fmt.Sprintf("result %d", res)
		if res >= 0 && res < len(updateResults) {
			name = "CU_GRAPH_EXEC_UPDATE_" + updateResults[res]
		}
		return x.dev.check(op, r, name+"; instantiate the graph instead")
	}
	old := x.pins
	x.pins = gr.pins.retain()
	old.release()
	x.nodes, x.handles = gr.nodes, gr.handles
	x.checked.Store(0)
	return nil
}

// Destroy releases the executable; launches already enqueued complete.
func (x *exec) Destroy() error {
	const op = "graph exec destroy"
	if x.destroyed.Swap(true) {
		return cuda.Contractf(op, cuda.ErrStaleHandle, "the executable was already destroyed")
	}
	err := x.dev.check(op, destroyExec(x.dev.ctx, x.x), "cuGraphExecDestroy")
	x.pins.release()
	if r := x.origin.release(); err == nil {
		err = x.dev.check(op, r, "cuGraphDestroy")
	}
	return err
}

// exec checks that e is a live executable of this device instance.
func (d *device) exec(op string, e backend.Exec) (*exec, error) {
	x, ok := e.(*exec)
	mine := ok && x != nil && x.dev == d
	if err := backend.CheckExec(op, d.info.Instance, mine, mine && x.destroyed.Load()); err != nil {
		return nil, err
	}
	return x, nil
}
