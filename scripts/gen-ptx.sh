#!/usr/bin/env bash
# Regenerates the committed PTX from its CUDA C with nvcc (on a machine with
# the CUDA toolkit, e.g. the GPU machine), or, with --check, fails if a
# committed PTX differs from what nvcc makes now:
#   cuda/kernels/kernels.cu         -> kernels.ptx    (the built-in kernels)
#   internal/conformance/usermodule.cu  -> usermodule.ptx (the suite's user module)
#   examples/customkernels/rmsnorm.cu -> rmsnorm.ptx  (the example's own kernel)
#   examples/transformer/transformer.cu -> transformer.ptx (the transformer example's kernels)
#
# compute_80 PTX is JIT-compiled by the driver for any newer GPU (the H200 is
# sm_90). -fmad=false keeps every float operation separately rounded, so the
# GPU's results are bit-identical to the Go references the simulator runs.
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-${CUDA_HOME:-/usr/local/cuda}/bin/nvcc}
status=0
for src in cuda/kernels/kernels.cu internal/conformance/usermodule.cu examples/customkernels/rmsnorm.cu examples/transformer/transformer.cu; do
  out=${src%.cu}.ptx
  tmp=$(mktemp)
  "$NVCC" -ptx -arch=compute_80 -fmad=false -O3 -o "$tmp" "$src"
  if [ "${1:-}" = "--check" ]; then
    if ! diff -q <(grep -v '^//' "$tmp") <(grep -v '^//' "$out") >/dev/null; then
      echo "$out is stale: run scripts/gen-ptx.sh and commit it"; status=1
    else
      echo "$out is current"
    fi
    rm -f "$tmp"
  else
    mv "$tmp" "$out"
    echo "wrote $out"
  fi
done
exit $status
