#!/usr/bin/env bash
# Not part of CI. Proves the traces reach a real Jaeger: builds Jaeger v1.76.0
# from the Go module proxy if $JAEGER is missing (about 3 minutes, in a
# throwaway module), starts it on loopback (OTLP gRPC 127.0.0.1:4317, UI and
# HTTP API on :16686), runs lanedemo against it, checks through Jaeger's HTTP
# API that the replayed-segment spans are there, children of their
# submissions and timed by device events, and screenshots one trace with
# headless Chromium (Debian's chromium) into ${OUT_DIR:-/tmp/jaeger-check}.
set -euo pipefail
cd "$(dirname "$0")/.."
JAEGER=${JAEGER:-/tmp/jaeger}
OUT_DIR=${OUT_DIR:-/tmp/jaeger-check}
mkdir -p "$OUT_DIR"
if [ ! -x "$JAEGER" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && go mod init jaegerbuild >/dev/null && go get -tool github.com/jaegertracing/jaeger/cmd/jaeger@v1.76.0 &&
    go build -o "$JAEGER" github.com/jaegertracing/jaeger/cmd/jaeger)
fi
"$JAEGER" > "$OUT_DIR/jaeger.log" 2>&1 &
jaeger_pid=$!
trap 'kill $jaeger_pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do curl -sf http://127.0.0.1:16686/api/services >/dev/null && break; sleep 0.2; done

go run ./cmd/lanedemo --duration 3s --warmup 2 --otlp-endpoint 127.0.0.1:4317 --service-name lanedemo \
  --resource deployment.environment=jaeger-check --quiet | tee "$OUT_DIR/lanedemo.txt"
sleep 2
curl -sf http://127.0.0.1:16686/api/services | tee "$OUT_DIR/services.json"; echo
curl -sf 'http://127.0.0.1:16686/api/traces?service=lanedemo&operation=lanes.submit&limit=200&lookback=1h' > "$OUT_DIR/traces.json"
trace=$(python3 - "$OUT_DIR/traces.json" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))["data"]
replays = timed = linked = 0
best = None
for t in data:
    spans = {s["spanID"]: s for s in t["spans"]}
    for s in t["spans"]:
        if s["operationName"] != "lanes.replay":
            continue
        replays += 1
        tags = {x["key"]: x["value"] for x in s["tags"]}
        if tags.get("lanes.device_timing") == "events":
            timed += 1
        parents = [r["spanID"] for r in s.get("references", []) if r["refType"] == "CHILD_OF"]
        if parents and spans.get(parents[0], {}).get("operationName") == "lanes.submit":
            linked += 1
            best = best or t["traceID"]
print(f"traces {len(data)}, replay spans {replays}, device-timed {timed}, children of lanes.submit {linked}", file=sys.stderr)
if replays == 0 or timed == 0 or linked != replays:
    sys.exit("FAIL: replayed-segment spans missing, untimed or orphaned")
print(best)
PY
)
echo "trace with replayed segments: $trace"
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
  --disable-component-update --disable-sync --user-data-dir="$(mktemp -d)" --hide-scrollbars \
  --window-size=1600,1000 --virtual-time-budget=15000 --screenshot="$OUT_DIR/jaeger-trace.png" \
  "http://127.0.0.1:16686/trace/$trace?uiEmbed=v0" 2>/dev/null || true
ls -la "$OUT_DIR/jaeger-trace.png"
# A Jaeger built from the Go module proxy carries no UI assets (they are
# built from the jaeger-ui sources with npm): its UI route then serves a
# placeholder page, and the screenshot shows that page, not the trace.
if curl -sf http://127.0.0.1:16686/ | grep -q "not the Jaeger UI"; then
  echo "note: this Jaeger has no UI assets; the screenshot shows its placeholder page. The trace was checked through the HTTP API above."
fi
echo "jaeger check: ok"
