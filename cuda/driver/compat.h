/*
 * compat.h: lanes' CUDA compatibility header, force-included (-include) in
 * every cgo compile of the cuda build tag (scripts/build-cuda.sh sets it).
 *
 * gorgonia.org/cu was written against CUDA 10/11 headers. From CUDA 12 on,
 * cuda.h re-points five names to new ABIs with other signatures
 * (cuCtxCreate -> _v4, cuMemAdvise -> _v2, cuMemPrefetchAsync -> _v2,
 * cuGraphAddDependencies -> _v2, cuGraphGetEdges -> _v2). The driver still
 * exports the legacy symbols, so for CUDA >= 12 this header binds the old
 * names to them again. Guarded against assembly (cgo also preprocesses .S
 * files), and defines _GNU_SOURCE first, which runtime/cgo needs.
 */
#ifndef LANES_CUDA_COMPAT_H
#define LANES_CUDA_COMPAT_H
#ifndef __ASSEMBLER__

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <stddef.h>
#include <cuda.h>

#if CUDA_VERSION >= 12000
#undef cuCtxCreate
CUresult lanes_legacy_cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev) __asm__("cuCtxCreate_v2");
#define cuCtxCreate lanes_legacy_cuCtxCreate

#undef cuMemAdvise
CUresult lanes_legacy_cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device) __asm__("cuMemAdvise");
#define cuMemAdvise lanes_legacy_cuMemAdvise

#undef cuMemPrefetchAsync
CUresult lanes_legacy_cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream) __asm__("cuMemPrefetchAsync");
#define cuMemPrefetchAsync lanes_legacy_cuMemPrefetchAsync

#undef cuGraphAddDependencies
CUresult lanes_legacy_cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to, size_t numDependencies) __asm__("cuGraphAddDependencies");
#define cuGraphAddDependencies lanes_legacy_cuGraphAddDependencies

#undef cuGraphGetEdges
CUresult lanes_legacy_cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, size_t *numEdges) __asm__("cuGraphGetEdges");
#define cuGraphGetEdges lanes_legacy_cuGraphGetEdges
#endif

#endif /* __ASSEMBLER__ */
#endif /* LANES_CUDA_COMPAT_H */
