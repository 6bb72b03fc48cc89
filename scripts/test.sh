#!/usr/bin/env bash
# The project's test command: every package under the race detector (each
# fuzz target's seed corpus included), then the embedder suite. CI runs
# scripts/fuzz.sh after it, a short run of each fuzz target.
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

# Every simulated device the tests open reports a read of device memory
# never written (sim.Config.InitCheck), as compute-sanitizer's initcheck
# does on a GPU: a test whose program reads what it never wrote fails.
export LANES_SIM_INITCHECK=1

# The embedder suite: a serving backend in a module of its own
# (examples/embedder) that uses the public API alone, with careless and
# malicious tenants beside healthy ones. EMBEDDER_RUN sets its long run.
# Its hostile-tenant tests assert heap figures, which the race detector's
# shadow memory makes meaningless: they skip those checks there and run
# once more without it. It runs beside the main packages' tests (whose
# lane-host and cluster tests spend much of their time waiting on other
# processes); its output follows theirs.
embedder_log=$(mktemp)
trap 'rm -f "$embedder_log"' EXIT
(cd examples/embedder && go vet ./... && go test -race -count=1 ./... &&
  go test -count=1 -v -run '^(TestHugeBatch|TestKeyChurnLeavesNeighboursReplayed|TestNothingGrowsWithHistory)$' ./... |
  grep -E '^(=== RUN|--- |ok|FAIL)|hostile_test|faults_test') >"$embedder_log" 2>&1 &
embedder=$!

echo "== go test -race ./..."
main_status=0
go test -race -count=1 ./... || main_status=$?

embedder_status=0
wait "$embedder" || embedder_status=$?
echo "== the embedder suite (ended by ${SECONDS}s)"
cat "$embedder_log"
if [ "$main_status" != 0 ] || [ "$embedder_status" != 0 ]; then
  echo "FAIL: go test -race ./... exited $main_status, the embedder suite $embedder_status" >&2
  exit 1
fi

# Wall-clock figures (a latency ratio, a detection time) mean something
# on a quiet machine only, so the default run proves the same isolation
# with counts and the virtual clock, and judges no figure of time; with
# LANES_TIMING=1 (on a machine doing nothing else) this step judges them
# too: the quarantine's cost to healthy tenants' p99, light tenants' p99
# beside a flood, a device-wide stall's culprit told from its bystander by
# hangs declared in wall-clock time, a lost host's detection within its
# bound (a partition,
# kill -9, SIGSTOP) and the other host's p99 meanwhile, and a process that
# fills a gigabyte of simulated memory without standing still.
if [ -n "$timing" ]; then
  echo "== timing (LANES_TIMING=1): wall-clock figures judged"
  LANES_TIMING=1 go test -race -count=1 -run '^TestQuarantineDoesNotRaiseHealthyP99$' -v ./actors | grep -E '^(=== RUN|--- |ok|FAIL)|p99'
  LANES_TIMING=1 go test -count=1 -run '^TestALargeAllocLetsTheProcessRun$' -v ./cuda/sim | grep -E '^(=== RUN|--- |ok|FAIL)|stood still'
  (cd examples/embedder && LANES_TIMING=1 go test -count=1 -v -run '^(TestFloodLeavesLightTenantsTheirLatency|TestDeviceWideStallBlamesItsCause)$' ./... |
    grep -E '^(=== RUN|--- |ok|FAIL)|hostile_test|faults_test')
  LANES_TIMING=1 go test -count=1 -run '^(TestAPartitionThatHeals|TestKillNineEndsInFlightOnceAndRestartsTheHost|TestSigstopIsDetectedWithinTheBoundAndLateAnswersDropped)$' ./remote
fi

echo "== done in ${SECONDS}s"
