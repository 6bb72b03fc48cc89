#!/usr/bin/env bash
# The GPU scorecard (run on the GPU machine, not in CI). Builds no Go code
# there: it runs the test binaries and lanedemo built here with
# `scripts/build-cuda.sh test-binaries DIR`, compiles only the anchors with
# nvcc, and prints tables of ratios.
#
#   scripts/gpu-scorecard.sh BIN_DIR ANCHORS_DIR [OUT_DIR]
#
# Sections (SECTIONS, space separated; default all but multi, which runs
# only with two or more GPUs):
#   serve      the same-work table: lanedemo's closed serving loop against
#              ANCHORS_DIR/serve_bench.cu at 1, 4 and 8 lanes/streams, in
#              ROUNDS (default 2) interleaved rounds, beside lanedemo with
#              --transfers eager (serve_bench's four driver calls) and
#              scripts/anchors/serve_fused.cu (serve_bench with the copies in
#              its graph, lanedemo's default shape) and lanedemo serving
#              serve_fused's own kernels (scripts/anchors/inc, --kernels-from:
#              the same GPU work, where the built-in step's gemv and axpy
#              chain takes longer on the GPU); plus --timing replay
#              against --timing off at 4 lanes, beside serve_fused timing
#              its steps the same way (one timing event per step, "timed")
#              against itself untimed; every lanedemo run must hold
#              exactly-once (accepted == ended) or the table says so.
#   profile    CPU profiles of lanedemo at 1 and 8 lanes and of the eager
#              driver loop (pprof files in OUT_DIR: read them with go tool
#              pprof where Go is installed; Go profiles carry their symbols).
#   launch     the open-loop table: K launches per step with no copies and
#              no per-step completion wait (driver benchmark BenchmarkStep
#              against launch_bench and PyTorch): what replay and eager
#              launch cost, not a serving loop.
#   staged     BenchmarkStagedReplay: staged, in-place, resident-input and
#              output-cache replays beside a plain pinned copy of the same
#              bytes.
#   recapture  BenchmarkRecapture beside scripts/anchors/recapture_bench.cu,
#              the same recapture written on the driver API alone (its
#              set-params is our rebind); BenchmarkGraphMemory beside
#              scripts/anchors/graph_memory.cu (a process per K); and
#              BenchmarkWarmRebuild (time to first replay, cold and warm).
#   multi      lanedemo on every GPU against one GPU (two or more GPUs).
#   hosts      a lane host per GPU (lanedemo --host-per-gpu) against the same
#              loop in one process (--in-process), through the same-host data
#              plane and through the remote alone (--data-plane=false), on
#              every GPU, at 2, 8, 32 and 64 steps in flight per tenant,
#              ROUNDS interleaved rounds, then 2 and 8 with the readers
#              parking at once (LANES_SHM_SPIN=0s),
#              then an out-of-bounds kernel on GPU 0's host at 3 s of 8 s
#              (and the same fault in one process): prints each run's total
#              and round-trip lines and the ratios (issue 23's must-show on
#              the H200 pair; on one GPU, one host against one device).
#   cluster    lane hosts found in a cluster (lanedemo --cluster): a host
#              per GPU (each GPU standing for a machine) against one GPU's
#              host, at 32 and 64 steps in flight per tenant, ROUNDS rounds;
#              then the fleet changing under load: one more host joins at
#              2 s, host0 leaves well at 4 s, host1 is killed at 6 s
#              (issue 24's figure on the H200 pair).
set -uo pipefail
bin=${1:?usage: gpu-scorecard.sh BIN_DIR ANCHORS_DIR [OUT_DIR]}
anchors=${2:?usage: gpu-scorecard.sh BIN_DIR ANCHORS_DIR [OUT_DIR]}
out=${3:-$(mktemp -d)}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
bin=$(cd "$bin" && pwd)
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
sections=${SECTIONS:-serve profile launch staged recapture multi hosts cluster}
rounds=${ROUNDS:-2}
want() { [[ " $sections " == *" $1 "* ]]; }
work=$(mktemp -d)
cp "$anchors"/k.cu "$anchors"/launch_bench.cu "$anchors"/serve_bench.cu "$anchors"/torch_bench.py "$here"/anchors/*.cu "$work"/
(cd "$work" && nvcc -ptx -arch=sm_90 k.cu -o k.ptx &&
  nvcc -O2 -arch=sm_90 -o launch_bench launch_bench.cu -lcuda &&
  nvcc -O2 -arch=sm_90 -o serve_bench serve_bench.cu -lcuda &&
  nvcc -O2 -arch=sm_90 -o serve_fused serve_fused.cu -lcuda &&
  nvcc -O2 -arch=sm_90 -o recapture_bench recapture_bench.cu -lcuda &&
  nvcc -O2 -arch=sm_90 -o graph_memory graph_memory.cu -lcuda) || exit 1
# lanedemo serving serve_fused's own kernels: k.ptx's inc, 16 per step on a
# 256-int accumulator, a 512-byte input and a 1 KiB readout (--kernels-from).
mkdir -p "$work/inc" && cp "$work/k.ptx" "$here/anchors/inc/lanedemo.json" "$work/inc/"
served() { "$bin/lanedemo" --device cuda --tenants 16 --eager-tenants 0 --concurrency 1 --duration 5s --warmup 3 --quiet "$@"; }
demo() { served --kernels 16 "$@"; }

if want serve; then
  for round in $(seq 1 "$rounds"); do
    for L in 1 4 8; do
      (cd "$work" && ./serve_bench 16 5 $L 16) > "$out/serve-cpp-$L-$round.txt" 2>&1
      demo --lanes $L --timing off --json "$out/serve-demo-$L-$round.json" > "$out/serve-demo-$L-$round.txt" 2>&1
      (cd "$work" && ./serve_fused 16 5 $L 16) > "$out/serve-fused-$L-$round.txt" 2>&1
      demo --lanes $L --timing off --next-step caller --json "$out/serve-caller-$L-$round.json" > "$out/serve-caller-$L-$round.txt" 2>&1
      served --lanes $L --timing off --kernels-from "$work/inc" --json "$out/serve-inc-$L-$round.json" > "$out/serve-inc-$L-$round.txt" 2>&1
      demo --lanes $L --timing off --transfers eager --json "$out/serve-eager-$L-$round.json" > "$out/serve-eager-$L-$round.txt" 2>&1
    done
    demo --lanes 4 --timing replay --json "$out/serve-timing-$round.json" > "$out/serve-timing-$round.txt" 2>&1
    (cd "$work" && ./serve_fused 16 5 4 16 timed) > "$out/serve-fused-timed-$round.txt" 2>&1
  done
fi
if want profile; then
  for L in 1 8; do
    demo --lanes $L --timing off --cpuprofile "$out/demo-$L.pprof" > "$out/profile-demo-$L.txt" 2>&1
  done
  demo --lanes 4 --timing replay --cpuprofile "$out/demo-timing-4.pprof" > "$out/profile-demo-timing-4.txt" 2>&1
  "$bin/driver.test" -test.run '^$' -test.bench 'Step/eager/K=64' -test.benchtime 20000x -test.cpuprofile "$out/eager.pprof" > "$out/profile-eager.txt" 2>&1
fi
if want launch; then
  "$bin/driver.test" -test.run '^$' -test.bench 'Step|Streams' -test.benchtime 2000x > "$out/ours.txt" 2>&1
  (cd "$work" && for K in 8 16 64 256; do ./launch_bench $K 2000 1; done; ./launch_bench 64 2000 8) > "$out/cpp.txt" 2>&1
  (cd "$work" && for K in 8 64 256; do python3 torch_bench.py $K 2000; done) > "$out/torch.txt" 2>&1
fi
if want staged; then
  "$bin/driver.test" -test.run '^$' -test.bench 'StagedReplay' -test.benchtime 300x > "$out/staged.txt" 2>&1
fi
if want recapture; then
  "$bin/driver.test" -test.run '^$' -test.bench 'Recapture|GraphMemory|WarmRebuild' -test.benchtime 300x > "$out/recapture.txt" 2>&1
  (cd "$work" && ./recapture_bench 64 300 && ./recapture_bench 256 300) > "$out/recapture-cpp.txt" 2>&1
  (cd "$work" && for K in 16 64 256; do ./graph_memory $K 400; done) > "$out/graph-memory-cpp.txt" 2>&1
fi
if want multi && [ "$gpus" -ge 2 ]; then
  # Three rounds, interleaved: one GPU; every GPU from one process; and a
  # process per GPU at once (CUDA_VISIBLE_DEVICES), the baseline that shares
  # nothing but the host.
  mdemo() { "$bin/lanedemo" --device cuda --lanes 4 --eager-tenants 0 --kernels 16 --timing off --duration 5s --warmup 3 --quiet "$@"; }
  for round in 1 2 3; do
    mdemo --devices 1 --tenants 16 --json "$out/multi-1-$round.json" > "$out/multi-1-$round.txt" 2>&1
    mdemo --devices "$gpus" --tenants $((16 * gpus)) --json "$out/multi-$gpus-$round.json" > "$out/multi-$gpus-$round.txt" 2>&1
    for ((g = 0; g < gpus; g++)); do
      CUDA_VISIBLE_DEVICES=$g mdemo --devices 1 --tenants 16 --json "$out/proc-$g-$round.json" > "$out/proc-$g-$round.txt" 2>&1 &
    done
    wait
  done
fi
if want hosts && [ "$gpus" -ge 1 ]; then
  hdemo() { "$bin/lanedemo" --device cuda --devices "$gpus" --host-per-gpu --tenants $((8 * gpus)) --kernels 16 --lanehost "$bin/lanehost" "$@"; }
  total() { awk '/^total/ {print $4}' "$1"; }
  ratio() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "?"}'; }
  for ((round = 1; round <= rounds; round++)); do
    for conc in 2 8 32 64; do
      hdemo --duration 5s --concurrency $conc --in-process > "$out/hosts-inproc-c$conc-$round.txt" 2>&1
      hdemo --duration 5s --concurrency $conc > "$out/hosts-c$conc-$round.txt" 2>&1
      hdemo --duration 5s --concurrency $conc --data-plane=false > "$out/hosts-remote-c$conc-$round.txt" 2>&1
      a=$(total "$out/hosts-c$conc-$round.txt"); b=$(total "$out/hosts-inproc-c$conc-$round.txt"); r=$(total "$out/hosts-remote-c$conc-$round.txt")
      echo "hosts round $round, $conc in flight per tenant, $gpus GPUs: hosts through the data plane ${a:-?} vs one process ${b:-?} steps/s, ratio $(ratio "$a" "$b"); through the remote ${r:-?}, ratio $(ratio "$r" "$b")"
      grep 'round trip' "$out/hosts-c$conc-$round.txt" "$out/hosts-remote-c$conc-$round.txt" | sed 's/^[^:]*://'
    done
  done
  # The data plane's readers spin 20 µs before they park on a machine of 8
  # CPUs or more: the same at 2 and 8 in flight parking at once.
  for conc in 2 8; do
    LANES_SHM_SPIN=0s hdemo --duration 5s --concurrency $conc > "$out/hosts-nospin-c$conc.txt" 2>&1
    echo "hosts, $conc in flight, LANES_SHM_SPIN=0s: $(total "$out/hosts-nospin-c$conc.txt") steps/s"
    grep 'round trip' "$out/hosts-nospin-c$conc.txt"
  done
  hdemo --duration 8s --concurrency 8 --fault-host-at 3s > "$out/hosts-fault.txt" 2>&1
  hdemo --duration 8s --concurrency 8 --fault-host-at 3s --in-process > "$out/hosts-fault-inproc.txt" 2>&1
  echo "an out-of-bounds kernel on GPU 0's host at 3 s:"; cat "$out/hosts-fault.txt"
  echo "the same in one process:"; cat "$out/hosts-fault-inproc.txt"
fi
if want cluster && [ "$gpus" -ge 1 ]; then
  cdemo() { "$bin/lanedemo" --device cuda --cluster --kernels 16 --lanehost "$bin/lanehost" "$@"; }
  ctotal() { awk '/^total/ {print $4}' "$1"; }
  for ((round = 1; round <= rounds; round++)); do
    for conc in 32 64; do
      cdemo --devices 1 --tenants $((8 * gpus)) --duration 5s --concurrency $conc > "$out/cluster-one-c$conc-$round.txt" 2>&1
      cdemo --devices "$gpus" --tenants $((8 * gpus)) --duration 5s --concurrency $conc > "$out/cluster-all-c$conc-$round.txt" 2>&1
      a=$(ctotal "$out/cluster-all-c$conc-$round.txt"); b=$(ctotal "$out/cluster-one-c$conc-$round.txt")
      echo "cluster round $round, $conc in flight per tenant: a host per GPU ($gpus) ${a:-?} vs one GPU's host ${b:-?} steps/s, ratio $(awk -v a="${a:-0}" -v b="${b:-0}" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "?"}')"
    done
  done
  ords=$(seq -s, 0 $((gpus - 1))); [ "$gpus" -eq 1 ] && ords=0,0
  cdemo --devices 2 --ordinals "$ords" --tenants 16 --duration 8s --concurrency 8 --join-at 2s --leave-at 4s --kill-at 6s > "$out/cluster-fleet.txt" 2>&1
  echo "the fleet changing under load:"; grep -v '^lanehost: \|^lanedemo: host' "$out/cluster-fleet.txt"
fi
python3 "$here/scorecard.py" "$out" "$gpus" "$rounds"
