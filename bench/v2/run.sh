#!/usr/bin/env bash
# The cost of the Open Inference Protocol v2 encoding over /v1/fn, on one node: 64 B
# to_uppercase, 1 connection, wrk. The same call, two encodings: /v1/fn (raw body,
# bench/common/wrk/post64.lua) and v2 binary tensors (JSON head + raw bytes, binary output,
# bench/common/wrk/v2_upper64.lua). Goal: v2 p50 within 3 us of /v1/fn's. Method and figures:
# docs/inference.md ("Cost of the v2 encoding").
#
# Usage: bench/v2/run.sh
#
# The node runs pinned to SERVER_CPU with one network thread, wrk (1 thread, 1
# connection) to CLIENT_CPU. Each round runs both encodings in alternating order for
# DURATION s after a WARMUP s warm-up; the figure is the median over ROUNDS rounds.
#
# Environment (defaults in brackets):
#   DURATION [5]  WARMUP [1]  ROUNDS [5]  SERVER_CPU [0]  CLIENT_CPU [1]
#   NODE_PORT NODE_RAC_PORT [free ports, chosen at start]
#   NODE_BIN [target/release/netaccel-node]  (built with cargo if missing)
#   PRIO [auto]: rt (chrt -f 50, needs root), nice, none; auto = rt as root
#   STRICT [0]: exit 1 if the difference of the p50s is over 3 us
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH_NAME=v2
HOST=127.0.0.1
# shellcheck source=bench/common/lib.sh
source "$ROOT/bench/common/lib.sh"

DURATION=${DURATION:-5}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-5}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
PRIO=${PRIO:-auto}
STRICT=${STRICT:-0}
NODE_BIN=${NODE_BIN:-$ROOT/target/release/netaccel-node}
choose_prio
pick_ports NODE_PORT NODE_RAC_PORT
command -v wrk >/dev/null || die "wrk is needed (apt-get install wrk)"
if [[ ! -x "$NODE_BIN" ]]; then
    log "building $NODE_BIN"
    (cd "$ROOT" && cargo build --release -q -p netaccel-node)
fi

work=$(mktemp -d)
node_pid=
cleanup() {
    [[ -n "$node_pid" ]] && kill "$node_pid" 2>/dev/null && wait "$node_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

taskset -c "$SERVER_CPU" "${PRIO_CMD[@]}" "$NODE_BIN" --http "$HOST:$NODE_PORT" \
    --rac "$HOST:$NODE_RAC_PORT" --io-threads 1 --log-level warn >"$work/node.log" 2>&1 &
node_pid=$!
server_up netaccel-node "$node_pid" "$NODE_PORT" "$work/node.log" || exit 1

base="http://$HOST:$NODE_PORT"
v1="$base/v1/fn/to_uppercase"
v2="$base/v2/models/to_uppercase/infer"
# Both encodings must answer the call before anything is timed.
[[ $(curl -fsS --data-binary abc "$v1") == ABC ]] || die "/v1/fn/to_uppercase does not answer ABC"
json='{"inputs":[{"name":"INPUT0","shape":[3],"datatype":"UINT8","parameters":{"binary_data_size":3}}],"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}}]}'
answer=$({ printf '%s' "$json"; printf abc; } |
    curl -fsS --data-binary @- -H "Inference-Header-Content-Length: ${#json}" "$v2")
[[ "$answer" == *'"binary_data_size":3'*'}ABC' ]] || die "v2 to_uppercase answered: $answer"

run() { # script url -> "p50 p99 rps"
    taskset -c "$CLIENT_CPU" "${PRIO_CMD[@]}" wrk -t1 -c1 -d"${DURATION}s" -s "$ROOT/bench/common/wrk/$1" "$2" |
        awk '/^BENCH/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
             END { if (v["errors_status"] + v["errors_read"] + v["errors_connect"] > 0) exit 1
                   print v["p50_us"], v["p99_us"], v["rps"] }'
}

log "node pinned to cpu $SERVER_CPU, wrk to cpu $CLIENT_CPU, priority $PRIO; $ROUNDS rounds of ${DURATION} s"
DURATION=$WARMUP run post64.lua "$v1" >/dev/null
DURATION=$WARMUP run v2_upper64.lua "$v2" >/dev/null
: >"$work/v1" && : >"$work/v2"
for ((r = 0; r < ROUNDS; r++)); do
    if ((r % 2)); then order=(v2 v1); else order=(v1 v2); fi
    for which in "${order[@]}"; do
        if [[ $which == v1 ]]; then out=$(run post64.lua "$v1"); else out=$(run v2_upper64.lua "$v2"); fi
        [[ -n "$out" ]] || die "wrk reported errors for $which"
        echo "$out" >>"$work/$which"
        log "round $((r + 1)) $which: p50 p99 (us) calls/s = $out"
    done
done

col() { awk -v c="$2" '{ print $c }' "$work/$1" | median; }
printf '%-26s %9s %9s %10s\n' "64 B to_uppercase, 1 conn" "p50 us" "p99 us" "calls/s"
for which in v1 v2; do
    name=$([[ $which == v1 ]] && echo "/v1/fn (raw body)" || echo "v2 infer (binary tensors)")
    printf '%-26s %9s %9s %10.0f\n' "$name" "$(col "$which" 1)" "$(col "$which" 2)" "$(col "$which" 3)"
done
diff=$(awk -v a="$(col v2 1)" -v b="$(col v1 1)" 'BEGIN { printf "%.1f", a - b }')
echo "v2 p50 - /v1/fn p50: $diff us (goal: at most 3 us)"
if [[ "$STRICT" == 1 ]] && awk -v d="$diff" 'BEGIN { exit !(d > 3) }'; then
    exit 1
fi
