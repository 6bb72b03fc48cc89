#!/usr/bin/env bash
# Issue 57's table from one command: lanedemo's serving loop at 16, 256,
# 1,024 and 4,096 tenants of one shape, one step each in flight, timing
# off: the replay share, the executables and their device memory, the
# process CPU and heap per step, and steps per second; then 4,096 tenants
# on one lane. On the simulated device that neither models time nor
# computes bytes (--clock none), so the CPU per step is the scheduler's
# own (and the load generator's), or on a GPU.
#
#   scripts/many-tenants.sh                      # sim, lanedemo built here
#   scripts/many-tenants.sh cuda DIR [SECONDS]   # DIR/lanedemo built with -tags cuda
set -euo pipefail
cd "$(dirname "$0")/.."
device=${1:-sim}
case "$device" in
  sim)
    bin=$(mktemp -d); trap 'rm -rf "$bin"' EXIT
    go build -o "$bin/" ./cmd/lanedemo
    flags=(--clock none); secs=3 ;;
  cuda)
    bin=$(cd "${2:?usage: many-tenants.sh cuda DIR [SECONDS]}" && pwd)
    flags=(--device cuda); secs=${3:-5} ;;
  *) echo "usage: many-tenants.sh [sim | cuda DIR [SECONDS]]" >&2; exit 2 ;;
esac
echo "# $(date -u +%FT%TZ) on $(nproc) CPUs, device $device, ${secs}s each"
run() {
  echo "== $*"
  "$bin/lanedemo" "${flags[@]}" --eager-tenants 0 --timing off --concurrency 1 --duration "${secs}s" --quiet "$@" 2>&1 |
    grep -E '^  total|^tenants:|^  steps|^executables|^replay share|^refused|^exactly once|^go runtime'
}
for t in 16 256 1024 4096; do run --lanes 4 --tenants "$t"; done
for t in 16 256 4096; do run --lanes 1 --tenants "$t"; done
