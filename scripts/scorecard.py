#!/usr/bin/env python3
"""Summarizes scripts/gpu-scorecard.sh's raw output into ratio tables.

    scorecard.py OUT_DIR GPUS ROUNDS
"""
import glob
import json
import os
import re
import sys

out, gpus, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])


def read(name):
    p = os.path.join(out, name)
    return open(p).read() if os.path.exists(p) else ""


def demo(name):
    """steps/s, p50 us and whether exactly-once held, from a lanedemo JSON report."""
    try:
        d = json.load(open(os.path.join(out, name)))
    except Exception as e:  # a run that wrote no report
        return None, None, f"no report ({e.__class__.__name__})"
    # lanedemo-report/1 (snake_case); the older PascalCase reports too
    sps = d.get("steps_per_s", d.get("StepsPerSec"))
    lat = d.get("latency") or d.get("Latency") or {}
    p50 = lat.get("p50_us", lat.get("P50"))
    acc, end = d.get("accepted", d.get("Accepted")), d.get("ended", d.get("Ended"))
    return sps, p50, ("ok" if acc == end else f"BROKEN accepted {acc} ended {end}")


def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "-"


def cpp_serve(name):
    m = re.search(r"steps_per_s=(\d+) p50_us=([\d.]+)", read(name))
    return (float(m[1]), float(m[2])) if m else (None, None)


if glob.glob(os.path.join(out, "serve-cpp-*")):
    print("Same work: lanedemo's closed serving loop (16 tenants, K=16, one step per tenant in flight, timing off, lanedemo's")
    print("defaults: input and readout copies in the replayed graph, a client's next step submitted from its last step's end")
    print("on the lane's thread (--next-step lane), 50us spin) vs serve_fused.cu, the hand-written driver loop with the copies")
    print("captured into its graph (per step: write the pinned input, one graph launch, one event; S streams = lanes): the")
    print("headline. 'caller' is lanedemo with --next-step caller (a goroutine per client waits for each end and submits the")
    print("next); 'bench' is serve_bench.cu (the copies as their own driver calls) and 'eager' lanedemo with --transfers eager")
    print("(the same four driver calls as serve_bench). 'inc' is lanedemo serving serve_fused's own kernels (k.ptx's inc")
    print("through --kernels-from scripts/anchors/inc: the same GPU work; the built-in step's gemv/axpy chain is heavier)")
    print(f"{'lanes':>5} {'round':>5} {'ours/s':>8} {'fused/s':>8} {'ours/fused':>10} {'p50 ours':>8} {'p50 fused':>9} {'p50 x':>6}  {'caller/s':>8} {'/fused':>6}  {'inc/s':>8} {'/fused':>6} {'p50 x':>6}  {'bench/s':>8} {'ours/bench':>10}  {'eager/s':>8} {'/bench':>6}  exactly-once")
    worst = {}
    for L in (1, 4, 8):
        for r in range(1, rounds + 1):
            c, _ = cpp_serve(f"serve-cpp-{L}-{r}.txt")
            f, fp50 = cpp_serve(f"serve-fused-{L}-{r}.txt")
            o, op50, once = demo(f"serve-demo-{L}-{r}.json")
            w, _, wonce = demo(f"serve-caller-{L}-{r}.json")
            i, ip50, ionce = demo(f"serve-inc-{L}-{r}.json")
            ilat = f"{ip50 / fp50:.2f}" if ip50 and fp50 else "-"
            e, _, eonce = demo(f"serve-eager-{L}-{r}.json")
            lat = f"{op50 / fp50:.2f}" if op50 and fp50 else "-"
            print(f"{L:>5} {r:>5} {o or 0:>8.0f} {f or 0:>8.0f} {ratio(o, f):>10} {op50 or 0:>8} {fp50 or 0:>9.0f} {lat:>6}  {w or 0:>8.0f} {ratio(w, f):>6}  {i or 0:>8.0f} {ratio(i, f):>6} {ilat:>6}  {c or 0:>8.0f} {ratio(o, c):>10}  {e or 0:>8.0f} {ratio(e, c):>6}  {once}, {wonce}, {ionce}, {eonce}")
            if o and f and op50 and fp50:
                worst.setdefault(L, []).append((o / f, op50 / fp50, (i or 0) / f, (ip50 or 0) / fp50))
    for L, v in worst.items():
        print(f"  lanes {L}: ours/fused min {min(x[0] for x in v):.2f}, p50 latency ours/fused max {max(x[1] for x in v):.2f};"
              f" same kernels (inc): min {min(x[2] for x in v):.2f}, p50 max {max(x[3] for x in v):.2f}")
    print("\n--timing replay vs --timing off, 4 lanes (same rounds)")
    for r in range(1, rounds + 1):
        on, _, once = demo(f"serve-timing-{r}.json")
        off, _, _ = demo(f"serve-demo-4-{r}.json")
        ft, _ = cpp_serve(f"serve-fused-timed-{r}.txt")
        fo, _ = cpp_serve(f"serve-fused-4-{r}.txt")
        print(f"  round {r}: replay {on or 0:.0f} vs off {off or 0:.0f} steps/s: {ratio(on, off)}  exactly-once {once};"
              f" serve_fused timed the same way {ft or 0:.0f} vs untimed {fo or 0:.0f}: {ratio(ft, fo)}")

ours, cpp, torch = {}, {}, {}
for line in read("ours.txt").splitlines():
    m = re.match(r"BenchmarkStep/(eager|graph)/K=(\d+)\S*\s+\d+\s+\S+ ns/op\s+([\d.]+) us/step", line)
    if m:
        ours[(m[1], int(m[2]))] = float(m[3])
    m = re.match(r"BenchmarkStreams\S*\s+\d+\s+\S+ ns/op\s+([\d.]+) steps/s", line)
    if m:
        ours["streams"] = float(m[1])
for line in read("cpp.txt").splitlines():
    m = re.match(r"cpp-driver K=(\d+) streams=(\d+) eager_us_per_step=([\d.]+) graph_us_per_step=([\d.]+) .*agg_graph_steps_per_s=(\d+)", line)
    if m:
        cpp[(int(m[1]), int(m[2]))] = (float(m[3]), float(m[4]), float(m[5]))
for line in read("torch.txt").splitlines():
    m = re.match(r"torch \S+ K=(\d+) eager_us_per_step=([\d.]+) graph_us_per_step=([\d.]+)", line)
    if m:
        torch[int(m[1])] = (float(m[2]), float(m[3]))
if ours:
    print("\nOpen loop (K launches per step, no copies, no per-step completion wait): the cost of a launch, not a serving loop")
    print(f"{'metric':50} {'ours':>9} {'C++':>9} {'ours/C++':>9} {'PyTorch':>9} {'ours/PyTorch':>12}")
    fmt = lambda v: f"{v:9.1f}" if isinstance(v, float) else f"{'-':>9}"
    for K in (8, 64, 256):
        for i, mode in enumerate(("eager", "graph")):
            o, c, t = ours.get((mode, K)), cpp.get((K, 1), (None, None))[i], torch.get(K, (None, None))[i]
            print(f"{mode + ' K=' + str(K) + ' (us/step, lower is better)':50} {fmt(o)} {fmt(c)} {ratio(o, c):>9} {fmt(t)} {ratio(o, t):>12}")
    c8 = cpp.get((64, 8), (0, 0, 0))[2]
    print(f"{'8 streams K=64 replay (steps/s, higher is better)':50} {fmt(ours.get('streams'))} {fmt(c8)} {ratio(ours.get('streams'), c8):>9}")

staged = {}
for line in read("staged.txt").splitlines():
    m = re.match(r"BenchmarkStagedReplay/(\S+)/n=(\d+)\S*\s+\d+\s+\S+ ns/op.*?([\d.]+) us/replay", line)
    if m:
        staged[(m[1], int(m[2]))] = float(m[3])
if staged:
    print("\nStaged replays (us per replay; two inputs of n float32, one output of n)")
    modes = sorted({k[0] for k in staged})
    print(f"{'n':>9} " + " ".join(f"{x:>14}" for x in modes))
    for n in sorted({k[1] for k in staged}):
        print(f"{n:>9} " + " ".join(f"{staged.get((x, n), 0):>14.1f}" for x in modes))
        p = staged.get(("pinned-copy", n))
        for x in ("staged", "in-place"):
            if p and staged.get((x, n)):
                print(f"          {x}: {p / staged[(x, n)]:.2f}x the speed of plain pinned copies of the same bytes (inputs in, output out)")
        rc, oc = staged.get(("resident-collect", n)), staged.get(("output-cache", n))
        if rc and oc:
            print(f"          output-cache hit / resident replay collecting the same outputs: {oc / rc:.2f}")

rec = {}
for line in read("recapture.txt").splitlines():
    m = re.match(r"BenchmarkRecapture/(\S+)/K=(\d+)\S*\s+\d+\s+\S+ ns/op\s+([\d.]+) us/op", line)
    if m:
        rec[(m[1], int(m[2]))] = float(m[3])
crec = {}
for line in read("recapture-cpp.txt").splitlines():
    m = re.match(r"cpp-recapture K=(\d+) iters=\d+ (.*)", line)
    if m:
        for kv in m[2].split():
            k, v = kv.split("=")
            crec[(k[:-3], int(m[1]))] = float(v)
if rec or crec:
    print("\nRecapture (us per op): ours (BenchmarkRecapture) and the driver alone (recapture_bench.cu)")
    modes = ["capture", "instantiate", "update", "exec-update", "set-params"]
    print(f"{'K':>4} " + " ".join(f"{m:>22}" for m in modes))
    for K in (64, 256):
        print(f"{K:>4} " + " ".join(f"{rec.get((m, K), 0):>9.1f} / {crec.get((m, K), 0):>9.1f} C" for m in modes))
        for src, d in (("ours", rec), ("driver", crec)):
            if d.get(("update", K)) and d.get(("instantiate", K)):
                print(f"      {src}: update / instantiate {d[('update', K)] / d[('instantiate', K)]:.2f}")

if gpus >= 2 and glob.glob(os.path.join(out, "multi-1-*.json")):
    print(f"\nlanedemo on {gpus} GPUs vs 1 (4 lanes each, 16 tenants per GPU, K=16, timing off), three rounds")
    one = [demo(f"multi-1-{r}.json")[0] or 0 for r in (1, 2, 3)]
    many = [demo(f"multi-{gpus}-{r}.json")[0] or 0 for r in (1, 2, 3)]
    procs = [sum(demo(f"proc-{g}-{r}.json")[0] or 0 for g in range(gpus)) for r in (1, 2, 3)]
    mean = lambda v: sum(v) / len(v)
    print(f"  one GPU {mean(one):.0f}, {gpus} GPUs one process {mean(many):.0f}, a process per GPU {mean(procs):.0f} steps/s")
    print(f"  one process, {gpus} GPUs vs 1: {mean(many) / mean(one):.2f}x; a process per GPU vs 1: {mean(procs) / mean(one):.2f}x")
