#!/usr/bin/env bash
# The gRPC front end's CPU per call (F), on its own: the node pinned to SERVER_CPU,
# v2-load to CLIENT_CPU, CONNS closed-loop gRPC clients calling
#   - upper: the built-in to_uppercase (64 B), no engine at all;
#   - single: the digits CNN on ONNX Runtime, no batching (one run per call);
#   - batched: the same model with [dynamic_batching] (DELAY_US).
# For each case: calls/s, the node's utime+stime (all threads, /proc/PID/stat) over the
# calls of the measured window (µs of CPU a call), and v2-load's own CPU a call (bash's
# `time` of the client process over its whole run, warm-up included, divided by all
# its calls at the measured rate), and the node's context switches a call (all its
# threads, /proc/PID/task/*/status: each a sleep and wake-up, or a preemption). Medians over ROUNDS rounds, cases alternating.
# This is how docs/benchmarks.md ("Dynamic batching") measures F before and after a
# change to crates/node/src/front/grpc.
#
# Usage: bench/batching/front.sh
#
# Environment (defaults in brackets):
#   DURATION [5]  WARMUP [1]  ROUNDS [3]  SERVER_CPU [0]  CLIENT_CPU [1]  CONNS [64]
#   LOOPS_PER_CONN [1]: v2-load's closed loops sharing one HTTP/2 connection
#   DELAY_US [2000]  CASES ["upper single batched"]  ORT_LIB [from python3]
#   NODE_BIN [target/release/netaccel-node]  LOAD_BIN [target/release/v2-load]
#   PERF [none]: a case name; `perf record -g` of the node over that case's measured
#   window in the first round, the report's top lines printed (perf must be installed);
#   PERF_DATA [a temporary file]: where perf writes
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH_NAME=front
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
read -ra CASES <<<"${CASES:-upper single batched}"
PERF=${PERF:-none}
NODE_BIN=${NODE_BIN:-$ROOT/target/release/netaccel-node}
LOAD_BIN=${LOAD_BIN:-$ROOT/target/release/v2-load}
MODEL=$ROOT/models/digits
CLK_TCK=$(getconf CLK_TCK)

[[ -x "$NODE_BIN" && -x "$LOAD_BIN" ]] ||
    die "build first: cargo build --release -p netaccel-node -p netaccel-triton-bench"
ORT_LIB=${ORT_LIB:-$(python3 -c 'import glob, os, onnxruntime; print(sorted(glob.glob(os.path.join(os.path.dirname(onnxruntime.__file__), "capi", "libonnxruntime.so*")))[0])' 2>/dev/null)} ||
    die "no ONNX Runtime library: pip install onnxruntime (or set ORT_LIB)"
pick_ports NODE_HTTP NODE_GRPC NODE_RAC

work=$(mktemp -d)
PERF_DATA=${PERF_DATA:-$work/perf.data}
node_pid=
cleanup() {
    [[ -n "$node_pid" ]] && kill "$node_pid" 2>/dev/null && wait "$node_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

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
slots = ["digits_batched", "digits_single", "to_uppercase"]
TOML
taskset -c "$SERVER_CPU" "$NODE_BIN" --config "$work/node.toml" --http "$HOST:$NODE_HTTP" --rac "$HOST:$NODE_RAC" \
    --grpc "$HOST:$NODE_GRPC" --io-threads 1 --log-level warn >"$work/node.log" 2>&1 &
node_pid=$!
server_up netaccel-node "$node_pid" "$NODE_GRPC" "$work/node.log" || exit 1

node_ticks() { # utime+stime of the node, all threads
    local stat rest
    local -a f
    stat=$(cat "/proc/$node_pid/stat")
    rest=${stat##*) }
    read -ra f <<<"$rest"
    echo $((f[11] + f[12]))
}
node_switches() { # context switches of the node's threads (each one a sleep or a preemption)
    cat /proc/"$node_pid"/task/*/status 2>/dev/null |
        awk '/^(voluntary|nonvoluntary)_ctxt_switches/ { n += $2 } END { print n + 0 }'
}
load_args() { # case -> v2-load's arguments
    case "$1" in
        upper) echo "--model to_uppercase --tensors upper" ;;
        single) echo "--model digits_single --tensors digits" ;;
        batched) echo "--model digits_batched --tensors digits" ;;
        *) die "unknown case $1" ;;
    esac
}

measure() { # case round -> one JSON line
    local c=$1 r=$2 out="$work/out" times="$work/times" t0 t1 load
    # shellcheck disable=SC2046
    (
        TIMEFORMAT='%U %S'
        { time taskset -c "$CLIENT_CPU" "$LOAD_BIN" --transport grpc --addr "$HOST:$NODE_GRPC" \
            $(load_args "$c") --connections "$CONNS" --loops-per-connection "$LOOPS_PER_CONN" --duration "$DURATION" --warmup "$WARMUP" \
            >"$out"; } 2>"$times"
    ) &
    local client=$!
    sleep "$WARMUP"
    t0=$(node_ticks) s0=$(node_switches)
    local perf_pid=
    if [[ "$PERF" == "$c" && "$r" == 0 ]]; then
        perf record -g -o "$PERF_DATA" -p "$node_pid" -- sleep "$DURATION" 2>"$work/perf.log" &
        perf_pid=$!
    fi
    sleep "$DURATION"
    t1=$(node_ticks) s1=$(node_switches)
    wait "$client" || { cat "$times" >&2; die "v2-load failed on $c"; }
    [[ -n "$perf_pid" ]] && wait "$perf_pid"
    load=$(cut -d' ' -f1 /proc/loadavg)
    python3 - "$c" "$r" "$t0" "$t1" "$CLK_TCK" "$DURATION" "$WARMUP" "$load" "$(cat "$times")" "$out" "$s0" "$s1" <<'EOF'
import json, sys
c, r, t0, t1, tck, dur, warm, load, times, out, s0, s1 = sys.argv[1:]
d = json.loads(open(out).readline())
calls, dur, warm = d["calls"], float(dur), float(warm)
u, s = (float(x) for x in times.split()[-2:])
node_us = (int(t1) - int(t0)) / int(tck) / max(calls, 1) * 1e6
client_us = (u + s) / max(calls * (dur + warm) / dur, 1) * 1e6
print(json.dumps({"case": c, "round": int(r), "calls_per_s": d["calls_per_s"], "p50_us": d["p50_us"],
                  "p99_us": d["p99_us"], "node_cpu_us": round(node_us, 2),
                  "client_cpu_us": round(client_us, 2),
                  "node_switches": round((int(s1) - int(s0)) / max(calls, 1), 2),
                  "load": float(load)}))
EOF
}

log "node on cpu $SERVER_CPU, v2-load on cpu $CLIENT_CPU, $CONNS loops ($LOOPS_PER_CONN a connection), $ROUNDS rounds of $WARMUP + $DURATION s"
results="$work/results.jsonl"
for ((r = 0; r < ROUNDS; r++)); do
    order=("${CASES[@]}")
    ((r % 2)) && mapfile -t order < <(printf '%s\n' "${CASES[@]}" | tac)
    for c in "${order[@]}"; do
        line=$(measure "$c" "$r")
        log "round $((r + 1)): $line"
        echo "$line" >>"$results"
    done
done
python3 - "$results" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| case | calls/s | p50 µs | p99 µs | node CPU µs/call | node switches/call | v2-load CPU µs/call | load avg |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for c in dict.fromkeys(r["case"] for r in rows):
    m = lambda k: statistics.median(r[k] for r in rows if r["case"] == c)
    print(f"| {c} | {m('calls_per_s'):,.0f} | {m('p50_us'):,.0f} | {m('p99_us'):,.0f} | "
          f"{m('node_cpu_us'):.1f} | {m('node_switches'):.2f} | {m('client_cpu_us'):.1f} | {m('load'):.1f} |")
EOF
if [[ "$PERF" != none && -f "$PERF_DATA" ]]; then
    perf report -i "$PERF_DATA" --no-children --percent-limit 0.7 --stdio -g none 2>/dev/null |
        grep -v '^#' | grep -v '^$' | head -60
    perf report -i "$PERF_DATA" --children --percent-limit 2 --stdio -g none 2>/dev/null |
        grep -v '^#' | grep -v '^$' | head -60
fi
