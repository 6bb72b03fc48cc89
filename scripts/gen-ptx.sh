#!/usr/bin/env bash
# Regenerates cuda/kernels/kernels.ptx from kernels.cu with nvcc (on a
# machine with the CUDA toolkit, e.g. the GPU machine), or, with --check,
# fails if the committed PTX differs from what nvcc makes now.
#
# compute_80 PTX is JIT-compiled by the driver for any newer GPU (the H200 is
# sm_90). -fmad=false keeps every float operation separately rounded, so the
# GPU's results are bit-identical to the Go references the simulator runs.
set -euo pipefail
cd "$(dirname "$0")/.."
NVCC=${NVCC:-${CUDA_HOME:-/usr/local/cuda}/bin/nvcc}
out=cuda/kernels/kernels.ptx
tmp=$(mktemp)
"$NVCC" -ptx -arch=compute_80 -fmad=false -O3 -o "$tmp" cuda/kernels/kernels.cu
if [ "${1:-}" = "--check" ]; then
  if ! diff -q <(grep -v '^//' "$tmp") <(grep -v '^//' "$out") >/dev/null; then
    echo "kernels.ptx is stale: run scripts/gen-ptx.sh and commit it"; exit 1
  fi
  echo "kernels.ptx is current"
else
  mv "$tmp" "$out"
  echo "wrote $out"
fi
