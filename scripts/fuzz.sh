#!/usr/bin/env bash
# A short run of every fuzz target, so the parsers and validators stay
# fuzzed (their seed corpora run with the tests already). CI runs it after
# scripts/test.sh; FUZZ_SCALE=10 scripts/fuzz.sh runs each ten times longer.
set -euo pipefail
cd "$(dirname "$0")/.."

scale=${FUZZ_SCALE:-1}
if ! [[ $scale =~ ^[1-9][0-9]*$ ]]; then
  echo "FUZZ_SCALE=$scale: give a whole number of times each fuzz target's count (1 by default)" >&2
  exit 2
fi
export LANES_SIM_INITCHECK=1 # as the tests run

# A count, not a duration: a duration can end mid-input and fail with
# "context deadline exceeded" on a slow machine. Each target's count keeps
# it near ten seconds on a quiet 2-core machine, building it included
# (the slow ones run the lane core or the scheduler per input), and -fuzzminimizetime bounds the minimizing
# of each new interesting input (by default up to 60 s, which showed as a
# target stalled at 0 execs/sec): the whole step takes about three
# minutes on a quiet 2-core machine (fifteen targets).
# FUZZ_SCALE multiplies every count (FUZZ_SCALE=10 for a longer run).
echo "== fuzz targets"
for target in "./cuda FuzzCommandDecode 200000" "./cuda FuzzRegion 200000" "./cuda/sim FuzzEnqueue 150000" "./internal/discovery FuzzDiscover 100000" \
  "./internal/lanecore FuzzSubmit 40000" "./actors FuzzTenantName 15000" "./cmd/lanedemo FuzzFlags 12000" "./internal/demo FuzzManifest 15000" \
  "./remote FuzzBatchFromWire 15000" "./remote/internal/wire FuzzCallFromWire 8000" "./remote FuzzReceiptFromWire 12000" "./remote FuzzGuard 6000" "./remote FuzzHello 20000" \
  "./internal/shmring FuzzReader 150000" "./internal/ptx FuzzReadPTX 100000"; do
  set -- $target
  # A target that moved is no target: go test would fuzz nothing and pass.
  # (the list is read whole first: grep -q would close the pipe early,
  # and under pipefail go test's broken pipe would fail the check)
  listed=$(go test -list "^$2\$" "$1")
  if ! grep -qx "$2" <<<"$listed"; then
    echo "fuzz.sh: $1 has no fuzz target $2 (moved? update this list)" >&2
    exit 1
  fi
  go test -run '^$' -fuzz "^$2\$" -fuzztime "$(($3 * scale))x" -fuzzminimizetime 100x "$1"
done
echo "== fuzzed in ${SECONDS}s"
