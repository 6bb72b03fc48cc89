#!/usr/bin/env bash
# The defaults' measurements, from one command (issue 56):
#   replayed ÷ eager for a step of many kernels and library calls (the
#   transformer example's decode step: 9 kernels of its own and 4 cuBLAS
#   calls), at 1, 4 and 8 tenants and 1, 2 and 8 steps in flight, with the
#   zero actors.Config; one step in flight's wall ÷ device time; and a lane
#   host's steps/s ÷ one process's at 2 and 8 in flight (lanedemo
#   --host-per-gpu against --in-process, the same loop).
#
#   scripts/fast-by-default.sh                 # the simulated device, built here
#   scripts/fast-by-default.sh cuda DIR        # a GPU: DIR holds transformer, lanedemo and lanehost built with -tags cuda
#
# Wall-clock ratios: compare only runs of one machine, in one call.
set -euo pipefail
cd "$(dirname "$0")/.."
device=${1:-sim}
case "$device" in
  sim)
    bin=$(mktemp -d); trap 'rm -rf "$bin"' EXIT
    go build -o "$bin/" ./examples/transformer ./cmd/lanedemo ./cmd/lanehost
    sweep=(--channels 64 --heads 2 --ctx 256 --steps 256)
    ;;
  cuda)
    bin=$(cd "${2:?usage: fast-by-default.sh cuda DIR}" && pwd)
    sweep=(--channels 768 --heads 12 --ctx 1024 --steps 1024)
    ;;
  *) echo "usage: fast-by-default.sh [sim | cuda DIR]" >&2; exit 2 ;;
esac
echo "# $(date -u +%FT%TZ) on $(nproc) CPUs, device $device"
batches=(1)
[ "$device" = cuda ] && batches=(1 8)
for b in "${batches[@]}"; do
  "$bin/transformer" --sweep "${sweep[@]}" --batch "$b"
done
echo "# a lane host against one process: lanedemo --host-per-gpu --devices 1 --tenants 8 --duration 4s"
for c in 2 8; do
  inproc=$("$bin/lanedemo" --device "$device" --host-per-gpu --in-process --devices 1 --tenants 8 --duration 4s --concurrency "$c" --quiet 2>&1 | awk '/^total/{print $4}')
  out=$("$bin/lanedemo" --device "$device" --host-per-gpu --devices 1 --tenants 8 --duration 4s --concurrency "$c" --quiet --lanehost "$bin/lanehost" 2>&1)
  host=$(awk '/^total/{print $4}' <<<"$out")
  wire=$(grep -o 'wire both ways [0-9]*' <<<"$out" | awk '{print $4}' | head -1)
  awk -v c="$c" -v i="$inproc" -v h="$host" -v w="$wire" 'BEGIN{printf "%d in flight: one process %d steps/s, a lane host %d steps/s: host ÷ in-process %.2f (wire both ways %s µs)\n", c, i, h, h/i, w}'
done
