#!/usr/bin/env bash
# The project's test command: every package under the race detector, then a
# short run of each fuzz target so the parsers and validators stay fuzzed.
set -euo pipefail
cd "$(dirname "$0")/.."

# LANES_TIMING=1 adds the timing step below; no other step sees it (the
# timing tests judge wall-clock figures only where they run alone).
timing=${LANES_TIMING:-}
unset LANES_TIMING
case $timing in
  "" | 0) timing= ;;
  1) ;;
  *) echo "LANES_TIMING=$timing: give 1 (judge wall-clock figures too) or leave it unset" >&2; exit 2 ;;
esac
scale=${FUZZ_SCALE:-1}
if ! [[ $scale =~ ^[1-9][0-9]*$ ]]; then
  echo "FUZZ_SCALE=$scale: give a whole number of times each fuzz target's count (1 by default)" >&2
  exit 2
fi

# Every simulated device the tests open reports a read of device memory
# never written (sim.Config.InitCheck), as compute-sanitizer's initcheck
# does on a GPU: a test whose program reads what it never wrote fails.
export LANES_SIM_INITCHECK=1

echo "== go test -race ./..."
go test -race -count=1 ./...

# The embedder suite: a serving backend in a module of its own
# (examples/embedder) that uses the public API alone, with careless and
# malicious tenants beside healthy ones. EMBEDDER_RUN sets its long run.
# Its hostile-tenant tests assert heap figures, which the race detector's
# shadow memory makes meaningless: they skip those checks there and run
# here once more without it.
echo "== the embedder suite (at ${SECONDS}s)"
(cd examples/embedder && go vet ./... && go test -race -count=1 ./... &&
  go test -count=1 -v -run '^(TestHugeBatch|TestKeyChurnLeavesNeighboursReplayed|TestNothingGrowsWithHistory)$' ./... |
  grep -E '^(=== RUN|--- |ok|FAIL)|hostile_test|faults_test')

# Wall-clock figures (a latency ratio, a detection time) mean something
# on a quiet machine only, so the default run proves the same isolation
# with counts and the virtual clock, and judges no figure of time; with
# LANES_TIMING=1 (on a machine doing nothing else) this step judges them
# too: the quarantine's cost to healthy tenants' p99, light tenants' p99
# beside a flood, a device-wide stall's culprit told from its bystander by
# hangs declared in wall-clock time, a lost host's detection within its
# bound (a partition,
# kill -9, SIGSTOP) and the other host's p99 meanwhile.
if [ -n "$timing" ]; then
  echo "== timing (LANES_TIMING=1): wall-clock figures judged"
  LANES_TIMING=1 go test -race -count=1 -run '^TestQuarantineDoesNotRaiseHealthyP99$' -v ./actors | grep -E '^(=== RUN|--- |ok|FAIL)|p99'
  (cd examples/embedder && LANES_TIMING=1 go test -count=1 -v -run '^(TestFloodLeavesLightTenantsTheirLatency|TestDeviceWideStallBlamesItsCause)$' ./... |
    grep -E '^(=== RUN|--- |ok|FAIL)|hostile_test|faults_test')
  LANES_TIMING=1 go test -count=1 -run '^(TestAPartitionThatHeals|TestKillNineEndsInFlightOnceAndRestartsTheHost|TestSigstopIsDetectedWithinTheBoundAndLateAnswersDropped)$' ./remote
fi

# A count, not a duration: a duration can end mid-input and fail with
# "context deadline exceeded" on a slow machine. Each target's count keeps
# it near ten seconds on a quiet 2-core machine, building it included
# (the slow ones run the lane core or the scheduler per input), and -fuzzminimizetime bounds the minimizing
# of each new interesting input (by default up to 60 s, which showed as a
# target stalled at 0 execs/sec): the whole step stays under two minutes.
# FUZZ_SCALE multiplies every count (FUZZ_SCALE=10 for a longer run).
echo "== fuzz targets (at ${SECONDS}s)"
for target in "./cuda FuzzCommandDecode 200000" "./cuda FuzzRegion 200000" "./cuda/sim FuzzEnqueue 150000" "./cache FuzzDiscover 100000" \
  "./lanes FuzzSubmit 40000" "./actors FuzzTenantName 15000" "./cmd/lanedemo FuzzFlags 12000" "./internal/demo FuzzManifest 15000" \
  "./remote FuzzBatchFromWire 15000" "./remote FuzzCallFromWire 8000" "./remote FuzzReceiptFromWire 12000" "./remote FuzzGuard 6000" "./remote FuzzHello 20000" \
  "./internal/shmring FuzzReader 150000" "./cuda/kernels FuzzReadPTX 100000"; do
  set -- $target
  go test -run '^$' -fuzz "^$2\$" -fuzztime "$(($3 * scale))x" -fuzzminimizetime 100x "$1"
done
echo "== done in ${SECONDS}s"
