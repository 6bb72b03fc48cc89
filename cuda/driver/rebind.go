//go:build cuda

// In-place parameter updates of executables (cuGraphExec*NodeSetParams
// over the chain of kernel, memcpy and memset nodes a capture recorded), and the device memory
// executables hold, measured around instantiation and upload.

package driver

/*
#include <stdint.h>
#include <string.h>
#include <cuda.h>

#if CUDA_VERSION >= 13000
#define LANES_DEPENDENTS(node, out, count) cuGraphNodeGetDependentNodes(node, out, NULL, count)
#else
#define LANES_DEPENDENTS(node, out, count) cuGraphNodeGetDependentNodes(node, out, count)
#endif

// lanes_chain lists g's nodes in dependency order into out and their
// kinds into kinds (room for n; 0 kernel, 1 memcpy, 2 memset): 0 when g
// is one chain of n such nodes; -1 when it is not a chain of n nodes;
// -2 - i when node i is of another type; a CUresult otherwise (positive).
static int lanes_chain(CUgraph g, CUgraphNode *out, int *kinds, size_t n) {
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
		switch (t) {
		case CU_GRAPH_NODE_TYPE_KERNEL: kinds[i] = 0; break;
		case CU_GRAPH_NODE_TYPE_MEMCPY: kinds[i] = 1; break;
		case CU_GRAPH_NODE_TYPE_MEMSET: kinds[i] = 2; break;
		default: return -2 - (int)i;
		}
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

// lanes_set_nodes gives node i of x its new parameters by its kind:
// a kernel node function fns[i], the launch shape dims[7i..7i+6] (grid,
// block, shared bytes) and argc[i] parameters, each argv's next value
// or, where offs' next entry is not negative, blob's bytes there; a
// memcpy node a one-dimensional copy of lens[i] bytes from ptrs[2i+1] to
// ptrs[2i], of memory types mtypes[2i+1] and mtypes[2i]; a memset node
// a zeroing of lens[i] bytes at ptrs[2i]. *failed is the node that failed.
static CUresult lanes_set_nodes(CUcontext ctx, CUgraphExec x, CUgraphNode *nodes, int n, int *kinds, CUfunction *fns,
		unsigned *dims, uint64_t *argv, int *argc, unsigned char *blob, int *offs,
		uint64_t *ptrs, size_t *lens, int *mtypes, int *failed) {
	CUcontext cur = NULL;
	CUresult r = cuCtxGetCurrent(&cur);
	if (r != CUDA_SUCCESS) return r;
	if (cur != ctx) return (CUresult)100001;
	void *argp[64];
	int a = 0;
	for (int i = 0; i < n; i++) {
		if (kinds[i] == 1) {
			CUDA_MEMCPY3D p;
			memset(&p, 0, sizeof p);
			p.dstMemoryType = (CUmemorytype)mtypes[2 * i];
			p.srcMemoryType = (CUmemorytype)mtypes[2 * i + 1];
			if (p.dstMemoryType == CU_MEMORYTYPE_HOST) p.dstHost = (void *)(uintptr_t)ptrs[2 * i];
			else p.dstDevice = (CUdeviceptr)ptrs[2 * i];
			if (p.srcMemoryType == CU_MEMORYTYPE_HOST) p.srcHost = (const void *)(uintptr_t)ptrs[2 * i + 1];
			else p.srcDevice = (CUdeviceptr)ptrs[2 * i + 1];
			p.WidthInBytes = lens[i];
			p.srcPitch = p.dstPitch = lens[i];
			p.srcHeight = p.dstHeight = 1;
			p.Height = 1;
			p.Depth = 1;
			r = cuGraphExecMemcpyNodeSetParams(x, nodes[i], &p, ctx);
		} else if (kinds[i] == 2) {
			CUDA_MEMSET_NODE_PARAMS p;
			memset(&p, 0, sizeof p);
			p.dst = (CUdeviceptr)ptrs[2 * i];
			p.elementSize = 1;
			p.width = lens[i];
			p.height = 1;
			r = cuGraphExecMemsetNodeSetParams(x, nodes[i], &p, ctx);
		} else {
			for (int j = 0; j < argc[i] && j < 64; j++, a++) argp[j] = offs[a] >= 0 ? (void *)(blob + offs[a]) : (void *)&argv[a];
			CUDA_KERNEL_NODE_PARAMS p = {0};
			unsigned *d = dims + 7 * i;
			p.func = fns[i];
			p.gridDimX = d[0]; p.gridDimY = d[1]; p.gridDimZ = d[2];
			p.blockDimX = d[3]; p.blockDimY = d[4]; p.blockDimZ = d[5];
			p.sharedMemBytes = d[6];
			p.kernelParams = argp;
			r = cuGraphExecKernelNodeSetParams(x, nodes[i], &p);
		}
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
	"runtime"
	"sync"
	"unsafe"

	"github.com/lanesched/lanes/cuda"
	"github.com/lanesched/lanes/internal/backend"
)

// rebindScratch is the marshalled form of one Rebind, reused.
type rebindScratch struct {
	fns    []C.CUfunction
	dims   []C.uint
	argv   []uint64
	argc   []C.int
	offs   []C.int
	blob   []byte
	ptrs   []uint64   // per node: destination and source of a copy, destination of a memset
	lens   []C.size_t // per node: the bytes a copy or memset covers
	mtypes []C.int    // per node: the memory types of ptrs
}

// Node kinds of a chain (lanes_chain).
const (
	nodeKernel = 0
	nodeMemcpy = 1
	nodeMemset = 2
)

// nodeKindOf is the node kind a command of kind k is captured as.
func nodeKindOf(k cuda.CommandKind) C.int {
	switch k {
	case cuda.KindZero:
		return nodeMemset
	case cuda.KindCopy, cuda.KindStageIn, cuda.KindStageOut, cuda.KindUpload:
		return nodeMemcpy
	}
	return nodeKernel
}

// nodeKindNames name lanes_chain's kinds in refusals.
var nodeKindNames = [...]string{nodeKernel: "kernel", nodeMemcpy: "memcpy", nodeMemset: "memset"}

// Rebind sets the parameters of the executable's nodes from cmds
// (cuGraphExecKernelNodeSetParams, cuGraphExecMemcpyNodeSetParams and
// cuGraphExecMemsetNodeSetParams on each node of the chain its capture
// recorded; the first Rebind walks the chain once). A launch equal to the
// one before it is validated once.
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
	for i := range cmds {
		if got := nodeKindOf(cmds[i].Kind); got != x.kinds[i] {
			return &backend.RebindRefusedError{Refusal: backend.RebindNodeKind, Node: i,
				Detail: "the node is a " + nodeKindNames[x.kinds[i]] + " node, the command " + backend.Article(cmds[i].Kind)}
		}
	}
	table := d.table.Load()
	sc := &x.scratch
	sc.fns, sc.dims, sc.argv, sc.argc, sc.offs, sc.blob = sc.fns[:0], sc.dims[:0], sc.argv[:0], sc.argc[:0], sc.offs[:0], sc.blob[:0]
	sc.ptrs, sc.lens, sc.mtypes = sc.ptrs[:0], sc.lens[:0], sc.mtypes[:0]
	lookup := func(b cuda.Buffer) error {
		_, err := d.lookup(op, b)
		return err
	}
	for i := range cmds {
		cmd := &cmds[i]
		switch {
		case cmd.Kind == cuda.KindLaunch && i > 0 && sameLaunch(cmd, &cmds[i-1]):
		case i < len(x.rebound) && backend.CheckedLike(cmd, &x.rebound[i]) && backend.CheckRegions(cmd, lookup):
			// the node's checks hold for it but its buffers', which passed
		default:
			if err := backend.ValidateEnqueue(op, *cmd, table.kernels, lookup); err != nil {
				return err
			}
		}
		if err := sc.addCopy(d, op, cmd); err != nil {
			return err
		}
		if cmd.Kind != cuda.KindLaunch {
			sc.fns = append(sc.fns, nil)
			sc.dims = append(sc.dims, 0, 0, 0, 0, 0, 0, 0)
			sc.argc = append(sc.argc, 0)
			continue
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
	r := C.lanes_set_nodes(x.dev.ctx, x.x, &x.chain[0], C.int(len(cmds)), &x.kinds[0], &sc.fns[0], &sc.dims[0],
		(*C.uint64_t)(unsafe.Pointer(&sc.argv[0])), &sc.argc[0], (*C.uchar)(unsafe.Pointer(&sc.blob[0])), &sc.offs[0],
		(*C.uint64_t)(unsafe.Pointer(&sc.ptrs[0])), &sc.lens[0], &sc.mtypes[0], &failed)
	runtime.KeepAlive(cmds)
	if r != 0 {
		err := d.check(op, r, "cuGraphExec*NodeSetParams")
		if cuda.Classify(err).Sticky || r == codeNotBound {
			return err
		}
		return &backend.RebindRefusedError{Refusal: backend.RebindDeviceRefused, Node: int(failed), Detail: err.Error()}
	}
	h := backend.Handles{}
	for _, cmd := range cmds {
		h.Add(cmd)
	}
	x.handles = h
	x.checked.Store(0)
	// What the nodes now run, checked: the next Rebind of the same step on
	// other buffers checks those alone (backend.CheckedLike).
	if cap(x.rebound) < len(cmds) {
		x.rebound = make([]cuda.Command, len(cmds))
	}
	x.rebound = x.rebound[:len(cmds)]
	for i := range cmds {
		backend.KeepRebound(&x.rebound[i], &cmds[i])
	}
	return nil
}

// sameLaunch reports whether a and b launch the same kernel with the same
// shape and arguments.
func sameLaunch(a, b *cuda.Command) bool {
	return a.Kernel == b.Kernel && a.Config == b.Config && len(a.Args) == len(b.Args) && equalArgs(a.Args, b.Args)
}

// addCopy adds a node's copy or memset operands (zeros for a kernel
// node): the staging's address of a staged copy, the device's of the rest.
func (sc *rebindScratch) addCopy(d *device, op string, cmd *cuda.Command) error {
	var dst, src uint64
	var dstType, srcType C.int = C.CU_MEMORYTYPE_DEVICE, C.CU_MEMORYTYPE_DEVICE
	var n uint64
	switch cmd.Kind {
	case cuda.KindCopy:
		dst, src, n = cmd.Dst.Addr(), cmd.Src.Addr(), cmd.Dst.Length
	case cuda.KindZero:
		dst, n = cmd.Dst.Addr(), cmd.Dst.Length
	case cuda.KindStageIn:
		p, err := d.stagingPointer(op, cmd.Staging)
		if err != nil {
			return err
		}
		dst, src, n, srcType = cmd.Dst.Addr(), uint64(uintptr(p)), cmd.Dst.Length, C.CU_MEMORYTYPE_HOST
	case cuda.KindStageOut:
		p, err := d.stagingPointer(op, cmd.Staging)
		if err != nil {
			return err
		}
		dst, src, n, dstType = uint64(uintptr(p)), cmd.Src.Addr(), cmd.Src.Length, C.CU_MEMORYTYPE_HOST
	}
	sc.ptrs = append(sc.ptrs, dst, src)
	sc.lens = append(sc.lens, C.size_t(n))
	sc.mtypes = append(sc.mtypes, dstType, srcType)
	return nil
}

// walkChain lists the executable's nodes in capture order, and their
// kinds, once; a graph that is not one chain of kernel, memcpy and memset
// nodes is refused.
func (x *exec) walkChain() error {
	if x.chain != nil {
		return nil
	}
	if x.chainRefusal != nil {
		return x.chainRefusal
	}
	chain, kinds := make([]C.CUgraphNode, x.nodes), make([]C.int, x.nodes)
	var rc C.int
	if x.nodes > 0 {
		rc = C.lanes_chain(x.origin.g, &chain[0], &kinds[0], C.size_t(x.nodes))
	}
	switch {
	case x.nodes == 0 || rc == -1:
		x.chainRefusal = &backend.RebindRefusedError{Refusal: backend.RebindNotChain, Node: -1, Detail: "the captured graph is not one chain of nodes"}
	case rc < -1:
		x.chainRefusal = &backend.RebindRefusedError{Refusal: backend.RebindNodeKind, Node: int(-2 - rc), Detail: "the node is not a kernel, memcpy or memset node"}
	case rc > 0:
		return x.dev.check("graph exec rebind", cResult(rc), "cuGraphNodeGetDependentNodes")
	default:
		x.chain, x.kinds = chain, kinds
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
func (d *device) ExecBytes(nodes int) int64 { return d.graphMem.bytes(nodes) }
