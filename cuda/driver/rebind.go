//go:build cuda

// In-place parameter updates of executables (cuGraphExecKernelNodeSetParams
// over the chain of kernel nodes a capture recorded), and the device memory
// executables hold, measured around instantiation and upload.

package driver

/*
#include <stdint.h>
#include <cuda.h>

#if CUDA_VERSION >= 13000
#define LANES_DEPENDENTS(node, out, count) cuGraphNodeGetDependentNodes(node, out, NULL, count)
#else
#define LANES_DEPENDENTS(node, out, count) cuGraphNodeGetDependentNodes(node, out, count)
#endif

// lanes_chain lists g's nodes in dependency order into out (room for n):
// 0 when g is one chain of n kernel nodes; -1 when it is not a chain of n
// nodes; -2 - i when node i is not a kernel node; a CUresult otherwise
// (positive).
static int lanes_chain(CUgraph g, CUgraphNode *out, size_t n) {
	size_t roots = 0;
	CUresult r = cuGraphGetRootNodes(g, NULL, &roots);
	if (r != CUDA_SUCCESS) return (int)r;
	if (roots != 1 || n == 0) return -1;
	CUgraphNode cur;
	r = cuGraphGetRootNodes(g, &cur, &roots);
	if (r != CUDA_SUCCESS) return (int)r;
	for (size_t i = 0; i < n; i++) {
		CUgraphNodeType t;
		r = cuGraphNodeGetType(cur, &t);
		if (r != CUDA_SUCCESS) return (int)r;
		if (t != CU_GRAPH_NODE_TYPE_KERNEL) return -2 - (int)i;
		out[i] = cur;
		size_t deps = 0;
		r = LANES_DEPENDENTS(cur, NULL, &deps);
		if (r != CUDA_SUCCESS) return (int)r;
		if (i == n - 1) return deps == 0 ? 0 : -1;
		if (deps != 1) return -1;
		r = LANES_DEPENDENTS(cur, &cur, &deps);
		if (r != CUDA_SUCCESS) return (int)r;
	}
	return -1;
}

// lanes_set_kernels gives node i of x function fns[i], the launch shape
// dims[7i..7i+6] (grid, block, shared bytes) and argc[i] parameters, each
// argv's next value or, where offs' next entry is not negative, blob's
// bytes there. *failed is the node that failed.
static CUresult lanes_set_kernels(CUcontext ctx, CUgraphExec x, CUgraphNode *nodes, int n, CUfunction *fns,
		unsigned *dims, uint64_t *argv, int *argc, unsigned char *blob, int *offs, int *failed) {
	CUcontext cur = NULL;
	CUresult r = cuCtxGetCurrent(&cur);
	if (r != CUDA_SUCCESS) return r;
	if (cur != ctx) return (CUresult)100001;
	void *argp[64];
	int a = 0;
	for (int i = 0; i < n; i++) {
		for (int j = 0; j < argc[i] && j < 64; j++, a++) argp[j] = offs[a] >= 0 ? (void *)(blob + offs[a]) : (void *)&argv[a];
		CUDA_KERNEL_NODE_PARAMS p = {0};
		unsigned *d = dims + 7 * i;
		p.func = fns[i];
		p.gridDimX = d[0]; p.gridDimY = d[1]; p.gridDimZ = d[2];
		p.blockDimX = d[3]; p.blockDimY = d[4]; p.blockDimZ = d[5];
		p.sharedMemBytes = d[6];
		p.kernelParams = argp;
		r = cuGraphExecKernelNodeSetParams(x, nodes[i], &p);
		if (r != CUDA_SUCCESS) { *failed = i; return r; }
	}
	return CUDA_SUCCESS;
}

static CUresult lanes_mem_info(CUcontext ctx, size_t *free_, size_t *total) {
	CUcontext cur = NULL;
	CUresult r = cuCtxGetCurrent(&cur);
	if (r != CUDA_SUCCESS) return r;
	if (cur != ctx) return (CUresult)100001;
	return cuMemGetInfo(free_, total);
}
*/
import "C"

import (
	"sync"
	"unsafe"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/cuda/internal/backend"
)

// rebindScratch is the marshalled form of one Rebind, reused.
type rebindScratch struct {
	fns  []C.CUfunction
	dims []C.uint
	argv []uint64
	argc []C.int
	offs []C.int
	blob []byte
}

// Rebind sets the parameters of the executable's kernel nodes from cmds
// (cuGraphExecKernelNodeSetParams on each node of the chain its capture
// recorded; the first Rebind walks the chain once). A command equal to
// the one before it is validated once.
func (x *exec) Rebind(cmds []cuda.Command) error {
	const op = "graph exec rebind"
	if x.destroyed.Load() {
		return cuda.Contractf(op, cuda.ErrStaleHandle, "the executable was destroyed")
	}
	d := x.dev
	if err := d.live(op); err != nil {
		return err
	}
	if err := backend.CheckRebind(cmds, x.nodes); err != nil {
		return err
	}
	if err := x.walkChain(); err != nil {
		return err
	}
	table := d.table.Load()
	sc := &x.scratch
	sc.fns, sc.dims, sc.argv, sc.argc, sc.offs, sc.blob = sc.fns[:0], sc.dims[:0], sc.argv[:0], sc.argc[:0], sc.offs[:0], sc.blob[:0]
	for i := range cmds {
		cmd := &cmds[i]
		if i == 0 || !sameLaunch(cmd, &cmds[i-1]) {
			err := backend.ValidateEnqueue(op, *cmd, table.kernels, func(b cuda.Buffer) error {
				_, err := d.lookup(op, b)
				return err
			})
			if err != nil {
				return err
			}
		}
		g, b := cmd.Config.Grid, cmd.Config.Block
		sc.fns = append(sc.fns, table.funcs[cmd.Kernel])
		sc.dims = append(sc.dims, C.uint(g.X), C.uint(g.Y), C.uint(g.Z), C.uint(b.X), C.uint(b.Y), C.uint(b.Z), C.uint(cmd.Config.SharedBytes))
		sc.argc = append(sc.argc, C.int(len(cmd.Args)))
		for _, a := range cmd.Args {
			switch a.Kind {
			case cuda.ParamBuffer:
				sc.argv, sc.offs = append(sc.argv, a.Region.Addr()), append(sc.offs, -1)
			case cuda.ParamStruct:
				for len(sc.blob)%16 != 0 {
					sc.blob = append(sc.blob, 0)
				}
				sc.argv, sc.offs = append(sc.argv, 0), append(sc.offs, C.int(len(sc.blob)))
				sc.blob = append(sc.blob, a.Struct...)
			default:
				sc.argv, sc.offs = append(sc.argv, a.Bits), append(sc.offs, -1)
			}
		}
	}
	if len(sc.blob) == 0 {
		sc.blob = append(sc.blob, 0)
	}
	if len(sc.argv) == 0 {
		sc.argv, sc.offs = append(sc.argv, 0), append(sc.offs, -1)
	}
	var failed C.int
	r := C.lanes_set_kernels(x.dev.ctx, x.x, &x.chain[0], C.int(len(cmds)), &sc.fns[0], &sc.dims[0],
		(*C.uint64_t)(unsafe.Pointer(&sc.argv[0])), &sc.argc[0], (*C.uchar)(unsafe.Pointer(&sc.blob[0])), &sc.offs[0], &failed)
	if r != 0 {
		err := d.check(op, r, "cuGraphExecKernelNodeSetParams")
		if cuda.Classify(err).Sticky || r == codeNotBound {
			return err
		}
		return &cuda.RebindRefusedError{Refusal: cuda.RebindDeviceRefused, Node: int(failed), Detail: err.Error()}
	}
	h := backend.Handles{}
	for _, cmd := range cmds {
		h.Add(cmd)
	}
	x.handles = h
	x.checked.Store(0)
	return nil
}

// sameLaunch reports whether a and b launch the same kernel with the same
// shape and arguments.
func sameLaunch(a, b *cuda.Command) bool {
	return a.Kernel == b.Kernel && a.Config == b.Config && len(a.Args) == len(b.Args) && equalArgs(a.Args, b.Args)
}

// walkChain lists the executable's kernel nodes in capture order, once;
// a graph that is not one chain of kernel nodes is refused.
func (x *exec) walkChain() error {
	if x.chain != nil {
		return nil
	}
	if x.chainRefusal != nil {
		return x.chainRefusal
	}
	chain := make([]C.CUgraphNode, x.nodes)
	var rc C.int
	if x.nodes > 0 {
		rc = C.lanes_chain(x.origin.g, &chain[0], C.size_t(x.nodes))
	}
	switch {
	case x.nodes == 0 || rc == -1:
		x.chainRefusal = &cuda.RebindRefusedError{Refusal: cuda.RebindNotChain, Node: -1, Detail: "the captured graph is not one chain of nodes"}
	case rc < -1:
		x.chainRefusal = &cuda.RebindRefusedError{Refusal: cuda.RebindNodeKind, Node: int(-2 - rc), Detail: "the node is not a kernel node"}
	case rc > 0:
		return x.dev.check("graph exec rebind", cResult(rc), "cuGraphNodeGetDependentNodes")
	default:
		x.chain = chain
		return nil
	}
	return x.chainRefusal
}

// graphMemory measures the device memory executables take: the free
// memory cuMemGetInfo reports before and after each instantiation and
// upload, taken one at a time per device. CUDA hands out this memory in
// 2 MiB chunks (on an H100, most instantiations measure nothing and one
// in ten a whole chunk), so no one measurement is an executable's size:
// an executable of n nodes is charged backend.ExecBytes(n) (the fit of
// such measurements) scaled by what this device measured over what the
// fit predicted for everything it instantiated, so the charges add up to
// what the device measured, and executables of one size cost the same.
type graphMemory struct {
	mu       sync.Mutex
	measured int64 // bytes the measurements found taken, in all
	modelled int64 // backend.ExecBytes of every executable instantiated while measuring
}

// measure runs fn between two readings of the device's free memory and
// adds what it took; nodes is the executable's node count for an
// instantiation, -1 for an upload (whose bytes join its instantiation's).
func (m *graphMemory) measure(ctx cContext, nodes int, fn func() cResult) cResult {
	m.mu.Lock()
	defer m.mu.Unlock()
	var before, after, total C.size_t
	if C.lanes_mem_info(ctx, &before, &total) != 0 {
		before = 0
	}
	r := fn()
	if r == 0 && before != 0 && C.lanes_mem_info(ctx, &after, &total) == 0 && after < before {
		m.measured += int64(before - after)
	}
	if r == 0 && nodes >= 0 {
		m.modelled += backend.ExecBytes(nodes)
	}
	return r
}

// bytes is what an executable of n nodes is charged now.
func (m *graphMemory) bytes(n int) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	fit := backend.ExecBytes(n)
	if m.measured == 0 || m.modelled == 0 {
		return fit
	}
	return int64(float64(fit) * float64(m.measured) / float64(m.modelled))
}

// DeviceBytes is what the executable is charged (graphMemory): the fit
// for its node count, scaled to what this device measured.
// A destroyed executable holds nothing.
func (x *exec) DeviceBytes() int64 {
	if x.destroyed.Load() {
		return 0
	}
	return x.dev.graphMem.bytes(x.nodes)
}

// ExecBytes is what an executable of n nodes is charged on this device
// now (graphMemory): a lane admits misses against its device-byte bound
// on it.
func (d *Device) ExecBytes(nodes int) int64 { return d.graphMem.bytes(nodes) }
