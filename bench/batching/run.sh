#!/usr/bin/env bash
# Dynamic batching, side by side in one run: the digits CNN (models/digits) on the ONNX
# Runtime engine, 64 concurrent single-image gRPC clients (closed loops, v2-load
# --tensors digits), calls/s and p50/p99 for
#   - netaccel with [dynamic_batching] (max_queue_delay_microseconds DELAY_US),
#   - netaccel without it (each call a device call of its own),
#   - NVIDIA Triton (PyPI nvidia-pytriton: `@batch`, ONNX Runtime inside its Python
#     function, its dynamic batcher with the same max_batch_size 64 and delay).
# Goals (issue 30): calls/s with batching >= 3x without; p99 <= DELAY + 2 batch
# executions; netaccel >= 3x Triton's calls/s at a lower p99. Method and figures:
# docs/benchmarks.md ("Dynamic batching").
#
# Usage: bench/batching/run.sh
#
# The Triton venv is bench/triton/run.sh's (VENV, made once; onnxruntime is added to
# it). The node's ONNX Runtime is the library of the onnxruntime Python wheel of
# python3 (pip install onnxruntime), or ORT_LIB. Both servers are pinned to
# SERVER_CPU and up for the whole run (one node: two models, each in a slot of its
# own, its network thread and slot workers on that core; slot_worker_policy =
# "normal", so that on a shared host a model's worker is not starved at SCHED_IDLE);
# the client to CLIENT_CPU. Each round measures the three cases in alternating order
# for DURATION s after WARMUP s; the figures are medians over ROUNDS rounds. The mean
# batch size and batch execution time come from the node's /metrics (slot calls and
# busy seconds of the batched model's slot over the measured cases).
#
# Environment (defaults in brackets):
#   DURATION [5]  WARMUP [1]  ROUNDS [3]  SERVER_CPU [0]  CLIENT_CPU [1]  CONNS [64]
#   DELAY_US [2000]  PYTRITON_VERSION [0.7.0]
#   LOOPS_PER_CONN [1]: the clients sharing one HTTP/2 connection (v2-load
#   --loops-per-connection; 1: each client its own connection, as separate client
#   processes have)
#   VENV [$HOME/.cache/netaccel/triton/venv-$PYTRITON_VERSION]  ORT_LIB [from python3]
#   NODE_BIN [target/release/netaccel-node]  LOAD_BIN [target/release/v2-load]
#   (both built with cargo if missing)
#   UPDATE_DOCS [0]: 1 writes the table into docs/benchmarks.md (between the
#   <!-- batching:begin --> and <!-- batching:end --> markers)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH_NAME=batching
HOST=127.0.0.1
# shellcheck source=bench/common/lib.sh
source "$ROOT/bench/common/lib.sh"

DURATION=${DURATION:-5}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-3}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
CONNS=${CONNS:-64}
LOOPS_PER_CONN=${LOOPS_PER_CONN:-1}
DELAY_US=${DELAY_US:-2000}
UPDATE_DOCS=${UPDATE_DOCS:-0}
PYTRITON_VERSION=${PYTRITON_VERSION:-0.7.0}
VENV=${VENV:-$HOME/.cache/netaccel/triton/venv-$PYTRITON_VERSION}
NODE_BIN=${NODE_BIN:-$ROOT/target/release/netaccel-node}
LOAD_BIN=${LOAD_BIN:-$ROOT/target/release/v2-load}
MODEL=$ROOT/models/digits
TRITON_START_S=180

pick_ports NODE_HTTP NODE_GRPC NODE_RAC TRITON_HTTP TRITON_GRPC TRITON_METRICS

ORT_LIB=${ORT_LIB:-$(python3 -c 'import glob, os, onnxruntime; print(sorted(glob.glob(os.path.join(os.path.dirname(onnxruntime.__file__), "capi", "libonnxruntime.so*")))[0])' 2>/dev/null)} ||
    die "no ONNX Runtime library: pip install onnxruntime (or set ORT_LIB)"
if [[ ! -x "$VENV/bin/python" ]] || ! "$VENV/bin/python" -c "import pytriton" 2>/dev/null; then
    /usr/bin/python3 -c "import ensurepip" 2>/dev/null || die "Debian's python3 with venv is needed: apt-get install python3-venv"
    log "making $VENV with nvidia-pytriton==$PYTRITON_VERSION (once; about 400 MB)"
    /usr/bin/python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "nvidia-pytriton==$PYTRITON_VERSION" || die "pip install nvidia-pytriton failed"
fi
if ! "$VENV/bin/python" -c "import onnxruntime" 2>/dev/null; then
    log "adding onnxruntime to $VENV"
    "$VENV/bin/pip" install -q onnxruntime || die "pip install onnxruntime failed"
fi
for pair in "netaccel-node:$NODE_BIN" "netaccel-triton-bench:$LOAD_BIN"; do
    if [[ ! -x "${pair#*:}" ]]; then
        log "building ${pair%%:*} (release)"
        (cd "$ROOT" && cargo build --release -q -p "${pair%%:*}") || die "cargo build -p ${pair%%:*} failed"
    fi
done

work=$(mktemp -d)
node_pid=
triton_pid=
cleanup() {
    [[ -n "$node_pid" ]] && kill "$node_pid" 2>/dev/null && wait "$node_pid" 2>/dev/null
    if [[ -n "$triton_pid" ]]; then
        kill -TERM -- "-$triton_pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 -- "-$triton_pid" 2>/dev/null || break; sleep 0.2; done
        kill -KILL -- "-$triton_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

# The model twice, on ONNX Runtime: with dynamic batching and without.
for name in digits_batched digits_single; do
    mkdir -p "$work/models/$name/1"
    cp "$MODEL/1/model.onnx" "$work/models/$name/1/"
    { echo 'backend = "onnxruntime"'; cat "$MODEL/config.toml"; } >"$work/models/$name/config.toml"
done
printf '[dynamic_batching]\nmax_queue_delay_microseconds = %s\n' "$DELAY_US" >>"$work/models/digits_batched/config.toml"
cat >"$work/node.toml" <<TOML
models_dir = "$work/models"
onnxruntime_library = "$ORT_LIB"
slot_worker_policy = "normal"
[[devices]]
name = "cpu0"
backend = "cpu"
slots = ["digits_batched", "digits_single"]
TOML
taskset -c "$SERVER_CPU" "$NODE_BIN" --config "$work/node.toml" --http "$HOST:$NODE_HTTP" --rac "$HOST:$NODE_RAC" \
    --grpc "$HOST:$NODE_GRPC" --io-threads 1 --log-level warn >"$work/node.log" 2>&1 &
node_pid=$!
server_up netaccel-node "$node_pid" "$NODE_GRPC" "$work/node.log" || exit 1

setsid taskset -c "$SERVER_CPU" "$VENV/bin/python" "$HERE/serve_triton.py" \
    "$TRITON_HTTP" "$TRITON_GRPC" "$TRITON_METRICS" "$MODEL/1/model.onnx" "$DELAY_US" >"$work/triton.log" 2>&1 &
triton_pid=$!
log "waiting for Triton to load digits (at most $TRITON_START_S s)"
for ((i = 0; i < TRITON_START_S * 5; i++)); do
    kill -0 "$triton_pid" 2>/dev/null || { tail -n 20 "$work/triton.log" >&2; die "Triton exited at start-up"; }
    curl -fs "http://$HOST:$TRITON_HTTP/v2/models/digits/ready" >/dev/null && break
    sleep 0.2
done
curl -fs "http://$HOST:$TRITON_HTTP/v2/models/digits/ready" >/dev/null ||
    { tail -n 20 "$work/triton.log" >&2; die "Triton did not load digits in $TRITON_START_S s"; }

measure() { # case conns duration warmup loops-per-connection -> one JSON line
    local addr model
    case "$1" in
        batched) addr=$HOST:$NODE_GRPC model=digits_batched ;;
        single) addr=$HOST:$NODE_GRPC model=digits_single ;;
        triton) addr=$HOST:$TRITON_GRPC model=digits ;;
    esac
    taskset -c "$CLIENT_CPU" "$LOAD_BIN" --transport grpc --tensors digits --addr "$addr" \
        --model "$model" --connections "$2" --loops-per-connection "$5" --duration "$3" --warmup "$4"
}
slot_metric() { # name slot -> value
    curl -fs "http://$HOST:$NODE_HTTP/metrics" | awk -v k="netaccel_slot_$1{slot=\"$2\"}" '$1 == k { print $2 }'
}

log "servers pinned to cpu $SERVER_CPU, v2-load to cpu $CLIENT_CPU; $ROUNDS rounds of ${WARMUP} + ${DURATION} s per case, $CONNS clients, $LOOPS_PER_CONN a connection"
for c in batched single triton; do
    measure "$c" 1 0.5 0 1 >/dev/null || die "$c does not answer"
done
results="$work/results.jsonl"
for ((r = 0; r < ROUNDS; r++)); do
    case $((r % 3)) in
        0) order=(batched single triton) ;; 1) order=(triton batched single) ;; *) order=(single triton batched) ;;
    esac
    for c in "${order[@]}"; do
        calls0=$(slot_metric calls_total 0) busy0=$(slot_metric busy_seconds_total 0)
        if line=$(measure "$c" "$CONNS" "$DURATION" "$WARMUP" "$LOOPS_PER_CONN" 2>"$work/err"); then
            calls1=$(slot_metric calls_total 0) busy1=$(slot_metric busy_seconds_total 0)
            extra=""
            if [[ $c == batched ]]; then
                extra=$(awk -v c0="$calls0" -v c1="$calls1" -v b0="$busy0" -v b1="$busy1" \
                    'BEGIN { printf "\"device_calls\":%d,\"busy_s\":%.6f,", c1 - c0, b1 - b0 }')
            fi
            load=$(cut -d' ' -f1 /proc/loadavg)
            echo "{\"case\":\"$c\",\"round\":$r,\"load\":$load,$extra${line#\{}" >>"$results"
            log "round $((r + 1)) $c: $line (load $load)"
        else
            echo "{\"case\":\"$c\",\"round\":$r,\"failed\":true}" >>"$results"
            log "round $((r + 1)) $c FAILED: $(cat "$work/err")"
        fi
    done
done

table="$work/table.md"
python3 - "$results" "$DELAY_US" "$CONNS" "$DURATION" "$WARMUP" "$LOOPS_PER_CONN" >"$table" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
delay_us, conns = int(sys.argv[2]), int(sys.argv[3])
shared = f" ({sys.argv[6]} a connection)" if int(sys.argv[6]) > 1 else ""
duration, warmup = float(sys.argv[4]), float(sys.argv[5])
def ok(case):
    return [r for r in rows if r["case"] == case and not r.get("failed")]
def med(case, key):
    v = [r[key] for r in ok(case)]
    return statistics.median(v) if v else float("nan")
names = {"batched": "netaccel, dynamic batching", "single": "netaccel, no batching",
         "triton": "Triton (PyTriton @batch, dynamic batcher)"}
print(f"| digits CNN, ONNX Runtime, {conns} gRPC clients{shared}, delay {delay_us} µs | calls/s | p50 µs | p99 µs | load avg |")
print("| --- | ---: | ---: | ---: | ---: |")
for c in ("batched", "single", "triton"):
    print(f"| {names[c]} | {med(c, 'calls_per_s'):,.0f} | {med(c, 'p50_us'):,.0f} | {med(c, 'p99_us'):,.0f} | {med(c, 'load'):.1f} |")
print()
b = ok("batched")
# Device calls and busy time were read around the whole case (warm-up included).
per_call = [r["busy_s"] / r["device_calls"] * 1e6 for r in b if r.get("device_calls")]
# The calls of the warm-up taken at the measured rate.
size = [r["calls_per_s"] * (duration + warmup) / r["device_calls"] for r in b if r.get("device_calls")]
exec_us = statistics.median(per_call) if per_call else float("nan")
mean_size = statistics.median(size) if size else float("nan")
speedup = med("batched", "calls_per_s") / med("single", "calls_per_s")
vs_triton = med("batched", "calls_per_s") / med("triton", "calls_per_s")
p99_bound = delay_us + 2 * exec_us
print(f"- batching on / off: {speedup:.1f}x calls/s (goal ≥ 3x: {'met' if speedup >= 3 else 'NOT met'})")
print(f"- batched p99 {med('batched', 'p99_us'):,.0f} µs against delay + 2 batch executions = {delay_us} + 2 x {exec_us:,.0f} = {p99_bound:,.0f} µs "
      f"({'met' if med('batched', 'p99_us') <= p99_bound else 'NOT met'}); about {mean_size:.0f} calls a batch")
print(f"- netaccel / Triton: {vs_triton:.1f}x calls/s (goal ≥ 3x: {'met' if vs_triton >= 3 else 'NOT met'}), "
      f"p99 {med('batched', 'p99_us'):,.0f} vs {med('triton', 'p99_us'):,.0f} µs ({'lower' if med('batched', 'p99_us') < med('triton', 'p99_us') else 'NOT lower'})")
for c in names:
    failed = sum(1 for r in rows if r["case"] == c and r.get("failed"))
    if failed:
        print(f"- {names[c]}: {failed} rounds failed (not in the medians)")
EOF
cat "$table"
if [[ "$UPDATE_DOCS" == 1 ]]; then
    replace_docs_block batching "$table" && log "docs/benchmarks.md updated"
fi
