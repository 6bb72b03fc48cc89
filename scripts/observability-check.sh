#!/usr/bin/env bash
# Not part of CI. Proves what an operator sees, against a real Jaeger v1.76
# and a real Prometheus (Debian's prometheus package), all on loopback:
#
#  1. lanedemo with injected faults exports traces (OTLP gRPC) to Jaeger and
#     serves /metrics on its ops endpoint, which Prometheus scrapes each
#     second; the script then asserts through their HTTP APIs: every
#     submission is a trace or counted as sampled out, no span dropped, every
#     span Jaeger received is one lanedemo exported, every replay span under
#     and inside its submission, error spans with error.type, quarantine
#     spans linked to the submissions that failed their lane, and a
#     histogram_quantile(0.99, ...) over the scraped buckets within 20% of
#     lanedemo's own p99;
#  2. it screenshots a lanes trace and a quarantine in Jaeger's UI and the
#     latency percentiles in Prometheus's, with headless Chromium;
#  3. it measures lanedemo's steps/s with the exporter off and on, side by
#     side, three rounds (Jaeger shares the machine's cores: its own work
#     on the spans counts against "on");
#  4. it feeds 100 000 synthetic submissions/s to Jaeger (scripts/tracefeed)
#     and reports what arrived, what was sampled out and what was dropped.
#
#   JAEGER_UI=../shared/tools/jaeger-ui scripts/observability-check.sh
#
# JAEGER (default /tmp/jaeger) is built from the Go module proxy when
# missing (a few minutes). The proxy's Jaeger carries no UI: JAEGER_UI
# names the built UI of the same release (index.html and static/).
# Everything lands in OUT_DIR (default /tmp/observability-check).
set -euo pipefail
cd "$(dirname "$0")/.."
JAEGER=${JAEGER:-/tmp/jaeger}
JAEGER_UI=${JAEGER_UI:-../shared/tools/jaeger-ui}
PROMETHEUS=${PROMETHEUS:-prometheus}
CHROMIUM=${CHROMIUM:-chromium}
OUT_DIR=${OUT_DIR:-/tmp/observability-check}
DURATION=${DURATION:-20s}
TENANTS=${TENANTS:-4}
OPS=127.0.0.1:19464
PROM=127.0.0.1:19090

[ -f "$JAEGER_UI/index.html" ] || { echo "no Jaeger UI at $JAEGER_UI: set JAEGER_UI to the built jaeger-ui (index.html, static/)" >&2; exit 2; }
for tool in "$PROMETHEUS" "$CHROMIUM" python3 curl; do
  command -v "$tool" >/dev/null || { echo "$tool is missing (apt-get install prometheus chromium python3 curl)" >&2; exit 2; }
done
rm -rf "$OUT_DIR" && mkdir -p "$OUT_DIR"
if [ ! -x "$JAEGER" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && go mod init jaegerbuild >/dev/null && go get -tool github.com/jaegertracing/jaeger/cmd/jaeger@v1.76.0 &&
    go build -o "$JAEGER" github.com/jaegertracing/jaeger/cmd/jaeger)
fi
go build -o "$OUT_DIR/lanedemo" ./cmd/lanedemo
go build -o "$OUT_DIR/tracefeed" ./scripts/tracefeed

pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
"$JAEGER" --set=extensions.jaeger_query.ui.assets_path="$(cd "$JAEGER_UI" && pwd)" > "$OUT_DIR/jaeger.log" 2>&1 &
pids+=($!)
cat > "$OUT_DIR/prometheus.yml" <<EOF
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: lanedemo
    static_configs: [{targets: ['$OPS']}]
EOF
"$PROMETHEUS" --config.file="$OUT_DIR/prometheus.yml" --storage.tsdb.path="$OUT_DIR/prometheus-data" \
  --web.listen-address="$PROM" > "$OUT_DIR/prometheus.log" 2>&1 &
pids+=($!)
ready=
for _ in $(seq 100); do
  curl -sf http://127.0.0.1:16686/api/services >/dev/null && curl -sf http://127.0.0.1:8888/metrics >/dev/null &&
    curl -sf "http://$PROM/-/ready" >/dev/null && ready=1 && break
  sleep 0.3
done
[ -n "$ready" ] || { echo "Jaeger or Prometheus did not start (is something else on ports 4317, 16686, 8888, ${PROM#*:}?); see $OUT_DIR/*.log" >&2; exit 1; }
accepted() { curl -sf http://127.0.0.1:8888/metrics | awk '/^otelcol_receiver_accepted_spans_total/ {s += $NF} END {print s + 0}'; }

echo "== 1. lanedemo with faults, traces to Jaeger, metrics to Prometheus ($DURATION)"
before=$(accepted)
set +e
"$OUT_DIR/lanedemo" --duration "$DURATION" --tenants "$TENANTS" --eager-tenants 1 --concurrency 1 --warmup 4 --otlp-endpoint 127.0.0.1:4317 --ops-addr "$OPS" \
  --fault-launch 0.00005 --fault-capture 0.002 --json "$OUT_DIR/report.json" --quiet | tee "$OUT_DIR/lanedemo.txt"
demo_rc=${PIPESTATUS[0]}
set -e
echo "lanedemo exit status: $demo_rc"
end=$(date +%s)
sleep 3 # Jaeger's storage catches up
after=$(accepted)
python3 - "$OUT_DIR" "$before" "$after" "$end" "$PROM" "$TENANTS" <<'PY'
import json, sys, urllib.parse, urllib.request
out, before, after, end, prom, tenants = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5], int(sys.argv[6])
rep = json.load(open(f"{out}/report.json"))
tel = rep["Telemetry"]
get = lambda url: json.load(urllib.request.urlopen(url))
fails = []
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        fails.append(what)
dropped = tel["spans_dropped_queue_full"] + tel["spans_dropped_export_failed"]
check(dropped == 0 and tel["submissions_dropped_unrecorded"] == 0 and tel["export_errors"] == 0,
      f"nothing dropped: {tel['spans_exported']} spans exported, {dropped} dropped, {tel['submissions_dropped_unrecorded']} unrecorded, {tel['export_errors']} export errors")
# The in-memory store keeps 100 000 traces, and a search returns fewer.
traces = get("http://127.0.0.1:16686/api/traces?service=lanedemo&limit=99999&lookback=1h")["data"]
stored = sum(len(t["spans"]) for t in traces)
check(stored == tel["spans_exported"] and after - before >= stored,
      f"Jaeger holds every span lanedemo exported: {stored} of {tel['spans_exported']} (its receiver took {after - before:.0f}, its own spans included)")
json.dump(traces[:50], open(f"{out}/traces-sample.json", "w"))
submits = replays = inside = errors = typed = quarantines = linked = 0
refused = sum(rep["Refused"].values()) if rep.get("Refused") else 0
best = qtrace = None
for t in traces:
    spans = {s["spanID"]: s for s in t["spans"]}
    names = {s["operationName"] for s in t["spans"]}
    for s in t["spans"]:
        tags = {x["key"]: x["value"] for x in s["tags"]}
        op = s["operationName"]
        if op == "lanes.submit":
            submits += 1
        if tags.get("error") is True:
            errors += 1
            typed += "error.type" in tags
        if op == "lanes.lane.quarantine":
            quarantines += 1
            linked += any(r["refType"] == "FOLLOWS_FROM" for r in s.get("references", []))
            qtrace = qtrace or t["traceID"]
        if op == "lanes.replay":
            replays += 1
            parents = [spans.get(r["spanID"]) for r in s.get("references", []) if r["refType"] == "CHILD_OF"]
            p = parents[0] if parents else None
            if p and p["operationName"] == "lanes.submit" and s["startTime"] >= p["startTime"] and \
               s["startTime"] + s["duration"] <= p["startTime"] + p["duration"]:
                inside += 1
    if best is None and {"lanes.replay", "lanes.queue", "lanes.enqueue", "lanes.fence_wait"} <= names:
        best = t["traceID"]
ended, warm = rep["Ended"], 4 * tenants  # --warmup 4 steps of each tenant
check(tel["submissions_recorded"] == ended + refused + warm and tel["submissions_traced"] + tel["successes_sampled_out"] + tel.get("refusals_summarised", 0) == tel["submissions_recorded"],
      f"every submission recorded: {tel['submissions_recorded']} = {ended} ended + {refused} refused + {warm} warm-up; "
      f"{tel['submissions_traced']} traced + {tel['successes_sampled_out']} sampled out + {tel.get('refusals_summarised', 0)} refusals summarised")
check(submits == tel["submissions_traced"], f"every traced submission is a trace in Jaeger: {submits} of {tel['submissions_traced']}")
check(replays > 0 and inside == replays, f"every replay span under its submission and inside it: {inside} of {replays}")
check(errors > 0 and typed == errors, f"error spans carry error.type: {typed} of {errors}")
check(quarantines > 0 and linked == quarantines, f"quarantine spans linked to the submissions that failed their lane: {linked} of {quarantines}")
q = urllib.parse.quote("histogram_quantile(0.99, sum by (le) (lanes_fence_latency_seconds_bucket))")
res = get(f"http://{prom}/api/v1/query?query={q}&time={end}")["data"]["result"]
up = get(f"http://{prom}/api/v1/query?query=" + urllib.parse.quote('max_over_time(up{job="lanedemo"}[5m])') + f"&time={end}")["data"]["result"]
check(bool(up) and up[0]["value"][1] == "1", "Prometheus scraped lanedemo's /metrics")
own = rep["Latency"]["P99"] / 1e6
got = float(res[0]["value"][1]) if res else float("nan")
check(res and abs(got - own) <= 0.2 * own, f"histogram_quantile(0.99) {got * 1e6:.0f} µs within 20% of lanedemo's own p99 {own * 1e6:.0f} µs")
open(f"{out}/trace-ids", "w").write(f"{best or ''} {qtrace or ''}\n")
sys.exit(1 if fails else 0)
PY
read -r best qtrace < "$OUT_DIR/trace-ids"
shot() { # url file
  "$CHROMIUM" --headless --no-sandbox --disable-gpu --no-first-run --disable-background-networking --disable-component-update \
    --disable-sync --user-data-dir="$(mktemp -d)" --hide-scrollbars --window-size=1600,1000 --virtual-time-budget=15000 \
    --screenshot="$2" "$1" >/dev/null 2>&1 || true
  ls -la "$2"
}
echo "== 2. screenshots"
shot "http://127.0.0.1:16686/trace/$best" "$OUT_DIR/jaeger-trace.png"
shot "http://127.0.0.1:16686/trace/$qtrace" "$OUT_DIR/jaeger-quarantine.png"
q() { python3 -c 'import sys,urllib.parse;print(urllib.parse.quote(sys.argv[1]))' "$1"; }
expr='histogram_quantile(0.99, sum by (le, lanes_lane_id) (rate(lanes_fence_latency_seconds_bucket[5s])))'
# The graph's end is read to the minute: the next minute after the run.
shot "http://$PROM/graph?g0.expr=$(q "$expr")&g0.tab=0&g0.stacked=0&g0.range_input=2m&g0.end_input=$(q "$(date -u -d @"$(((end / 60 + 1) * 60))" '+%Y-%m-%d %H:%M:%S')")" "$OUT_DIR/prometheus-p99.png"

echo "== 3. overhead: lanedemo's steps/s with the exporter off and on (default --trace-successes), three rounds"
for round in 1 2 3; do
  for mode in off on; do
    args=()
    [ "$mode" = on ] && args=(--otlp-endpoint 127.0.0.1:4317)
    "$OUT_DIR/lanedemo" --duration 4s --quiet "${args[@]}" | awk -v m="$mode" -v r="$round" '/^ *total/ {print "round " r " exporter " m ": " $5 " steps/s"}'
  done
done | tee "$OUT_DIR/overhead.txt"

echo "== 4. 100 000 submissions/s into Jaeger, five spans each"
for ratio in 1 0.1; do
  before=$(accepted)
  "$OUT_DIR/tracefeed" --rate 100000 --duration 5s --trace-successes "$ratio" > "$OUT_DIR/tracefeed-$ratio.json"
  sleep 2
  after=$(accepted)
  python3 - "$OUT_DIR/tracefeed-$ratio.json" "$before" "$after" "$ratio" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); s = r["stats"]; got = float(sys.argv[3]) - float(sys.argv[2])
made = (r["submissions"] - s["Behind"] - s["SampledOut"] - s.get("Summarised", 0)) * r["spans_per_submission"]
print(f"ratio {sys.argv[4]}: {r['submissions']} submissions in {r['seconds']:.1f} s ({r['rate']:.0f}/s): "
      f"{s['SampledOut']} sampled out, {s['Behind']} unrecorded (recorder behind); {made} spans made, "
      f"{s['SpansExported']} exported, {s['SpansDroppedQueueFull']} dropped (queue full), {s['SpansDroppedExport']} (export failed); "
      f"Jaeger received {got:.0f}; every span accounted for: {made == s['SpansExported'] + s['SpansDroppedQueueFull'] + s['SpansDroppedExport'] and got == s['SpansExported']}")
PY
done

