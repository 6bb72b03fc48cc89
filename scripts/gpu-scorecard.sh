#!/usr/bin/env bash
# The GPU scorecard (run on the GPU machine, not in CI). Builds no Go code
# there: it runs the test binaries and lanedemo built here with
# `scripts/build-cuda.sh test-binaries DIR`, compiles only the anchors with
# nvcc as their README says, and prints one table of ratios: ours against
# the C++ driver loop and PyTorch, eager, replay and multi-lane throughput.
#
#   scripts/gpu-scorecard.sh BIN_DIR ANCHORS_DIR [OUT_DIR]
#
# With two or more GPUs it also runs lanedemo on every GPU against one GPU
# and reports the aggregate replay throughput as a ratio, beside the same
# load run as a process per GPU (the host's own limit).
set -uo pipefail
bin=${1:?usage: gpu-scorecard.sh BIN_DIR ANCHORS_DIR [OUT_DIR]}
anchors=${2:?usage: gpu-scorecard.sh BIN_DIR ANCHORS_DIR [OUT_DIR]}
out=${3:-$(mktemp -d)}
mkdir -p "$out"
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
work=$(mktemp -d)
cp "$anchors"/k.cu "$anchors"/launch_bench.cu "$anchors"/torch_bench.py "$work"/
(cd "$work" && nvcc -ptx -arch=sm_90 k.cu -o k.ptx && nvcc -O2 -arch=sm_90 -o launch_bench launch_bench.cu -lcuda) || exit 1

"$bin/driver.test" -test.run '^$' -test.bench 'Step|Streams' -test.benchtime 2000x > "$out/ours.txt" 2>&1
(cd "$work" && for K in 8 16 64 256; do ./launch_bench $K 2000 1; done; ./launch_bench 64 2000 8; ./launch_bench 16 2000 8) > "$out/cpp.txt" 2>&1
(cd "$work" && for K in 8 64 256; do python3 torch_bench.py $K 2000; done) > "$out/torch.txt" 2>&1
for L in 1 4 8; do
  "$bin/lanedemo" --device cuda --lanes $L --tenants 16 --eager-tenants 0 --kernels 16 --timing off --duration 5s --warmup 3 --quiet --json "$out/demo-$L.json" > "$out/demo-$L.txt" 2>&1
done
if [ "$gpus" -ge 2 ]; then
  # Three rounds, interleaved: one GPU; every GPU from one process; and a
  # process per GPU at once (CUDA_VISIBLE_DEVICES), the baseline that shares
  # nothing but the host, so that the host's own limit shows beside ours.
  # Then one GPU and every GPU again with GOMAXPROCS=16.
  demo() { "$bin/lanedemo" --device cuda --lanes 4 --eager-tenants 0 --kernels 16 --timing off --duration 5s --warmup 3 --quiet "$@"; }
  for round in 1 2 3; do
    demo --devices 1 --tenants 16 --json "$out/multi-1-$round.json" > "$out/multi-1-$round.txt" 2>&1
    demo --devices "$gpus" --tenants $((16 * gpus)) --json "$out/multi-$gpus-$round.json" > "$out/multi-$gpus-$round.txt" 2>&1
    for ((g = 0; g < gpus; g++)); do
      CUDA_VISIBLE_DEVICES=$g demo --devices 1 --tenants 16 --json "$out/proc-$g-$round.json" > "$out/proc-$g-$round.txt" 2>&1 &
    done
    wait
    for D in 1 "$gpus"; do
      GOMAXPROCS=16 demo --devices $D --tenants $((16 * D)) --json "$out/procs16-$D-$round.json" > "$out/procs16-$D-$round.txt" 2>&1
    done
  done
fi
python3 - "$out" "$gpus" <<'PY'
import json, os, re, sys
out, gpus = sys.argv[1], int(sys.argv[2])
ours = {}
for line in open(os.path.join(out, "ours.txt")):
    m = re.match(r"BenchmarkStep/(eager|graph)/K=(\d+)\S*\s+\d+\s+\S+ ns/op\s+([\d.]+) us/step", line)
    if m: ours[(m[1], int(m[2]))] = float(m[3])
    m = re.match(r"BenchmarkStreams\S*\s+\d+\s+\S+ ns/op\s+([\d.]+) steps/s", line)
    if m: ours["streams"] = float(m[1])
cpp = {}
for line in open(os.path.join(out, "cpp.txt")):
    m = re.match(r"cpp-driver K=(\d+) streams=(\d+) eager_us_per_step=([\d.]+) graph_us_per_step=([\d.]+) .*agg_graph_steps_per_s=(\d+)", line)
    if m: cpp[(int(m[1]), int(m[2]))] = (float(m[3]), float(m[4]), float(m[5]))
torch = {}
for line in open(os.path.join(out, "torch.txt")):
    m = re.match(r"torch \S+ K=(\d+) eager_us_per_step=([\d.]+) graph_us_per_step=([\d.]+)", line)
    if m: torch[int(m[1])] = (float(m[2]), float(m[3]))
rows = []
def ratio(a, b): return f"{a / b:.2f}" if a and b else "-"
for K in (8, 64, 256):
    for i, mode in enumerate(("eager", "graph")):
        o, c, t = ours.get((mode, K)), cpp.get((K, 1), (None, None))[i], torch.get(K, (None, None))[i]
        rows.append((f"{mode} K={K} (us/step, lower is better)", o, c, ratio(o, c), t, ratio(o, t)))
c8 = cpp.get((64, 8), (0, 0, 0))[2]
rows.append(("8 streams K=64 replay (steps/s, higher is better)", ours.get("streams"), c8, ratio(ours.get("streams"), c8), None, "-"))
c16 = cpp.get((16, 1), (0, 0, 0))[2]
c16x8 = cpp.get((16, 8), (0, 0, 0))[2]
for L in (1, 4, 8):
    try:
        d = json.load(open(os.path.join(out, f"demo-{L}.json")))
        rows.append((f"lanedemo {L} lanes K=16 (steps/s; C++: {'1' if L == 1 else '8'} stream{'s' if L > 1 else ''})", d["StepsPerSec"], c16 if L == 1 else c16x8,
                     ratio(d["StepsPerSec"], c16 if L == 1 else c16x8), None, "-"))
    except Exception as e:
        rows.append((f"lanedemo {L} lanes", None, None, f"error: {e}", None, "-"))
print(f"{'metric':58} {'ours':>10} {'C++':>10} {'ours/C++':>9} {'PyTorch':>10} {'ours/PyTorch':>12}")
fmt = lambda v: f"{v:10.1f}" if isinstance(v, float) else f"{'-':>10}"
for r in rows:
    print(f"{r[0]:58} {fmt(r[1])} {fmt(r[2])} {r[3]:>9} {fmt(r[4])} {r[5]:>12}")
if gpus >= 2:
    print(f"\nlanedemo on {gpus} GPUs vs 1 (4 lanes each, 16 tenants per GPU, K=16, timing off; goal 1.9x), three rounds")
    def sps(name):
        d = json.load(open(os.path.join(out, name)))
        if d["Accepted"] != d["Ended"]:
            raise ValueError(f"{name}: accepted {d['Accepted']} != ended {d['Ended']}")
        return d["StepsPerSec"], d.get("Runtime", {})
    series = {"one GPU": [], f"{gpus} GPUs, one process": [], f"{gpus} GPUs, a process each": [],
              "one GPU, GOMAXPROCS=16": [], f"{gpus} GPUs, GOMAXPROCS=16": []}
    names = list(series)
    for rnd in (1, 2, 3):
        series[names[0]].append(sps(f"multi-1-{rnd}.json")[0])
        series[names[1]].append(sps(f"multi-{gpus}-{rnd}.json")[0])
        series[names[2]].append(sum(sps(f"proc-{g}-{rnd}.json")[0] for g in range(gpus)))
        series[names[3]].append(sps(f"procs16-1-{rnd}.json")[0])
        series[names[4]].append(sps(f"procs16-{gpus}-{rnd}.json")[0])
    for name, v in series.items():
        print(f"  {name:32} " + "  ".join(f"{x:9.0f}" for x in v) + f"   mean {sum(v) / len(v):9.0f} steps/s")
    mean = {k: sum(v) / len(v) for k, v in series.items()}
    print(f"  one process, {gpus} GPUs vs 1:        {mean[names[1]] / mean[names[0]]:.2f}x  (per round: " +
          ", ".join(f"{a / b:.2f}x" for a, b in zip(series[names[1]], series[names[0]])) + ")")
    print(f"  a process per GPU vs 1 (host limit): {mean[names[2]] / mean[names[0]]:.2f}x")
    print(f"  one process vs a process per GPU:    {mean[names[1]] / mean[names[2]]:.2f}")
    print(f"  GOMAXPROCS=16, {gpus} GPUs vs 1:       {mean[names[4]] / mean[names[3]]:.2f}x")
    rt = sps(f"multi-{gpus}-1.json")[1]
    print(f"  go runtime ({gpus} GPUs, round 1): {rt.get('BytesPerStep', 0):.0f} B/step, {rt.get('GCPerSec', 0):.0f} GC/s")
PY
