#!/usr/bin/env bash
# The overload contract's timing figures (issue 15), on loopback; stops by itself.
#
#   bench/overload/run.sh
#
# For each of CASES (queue_depth_max/queue_wait_factor): a node whose echo slot has a
# simulated device time of EXEC_US
# (a known, CPU-independent capacity), its capacity measured closed-loop, then twice
# that offered for DURATION seconds per front end (HTTP /v1/fn, Open Inference Protocol v2,
# RAC) from CLIENTS connections each: refusal share, accepted p50/p99 against the
# same front end unloaded, duplicates by request id, node RSS. Then: one client's p99
# alone and beside SLOWLORIS connections that send a request head a byte a second;
# echo's p99 alone and while the fault slot runs a call that never returns (found
# after KERNEL_TIMEOUT_MS); SIGTERM at 2x load (exit time, answers by fate, with
# drain_timeout_ms = DRAIN_MS). Each phase prints one JSON line (bench/overload/load.py).
#
# Environment:
#   EXEC_US [1000]  CASES ["64/8 64/0 8/0"] (64/8: the defaults; 64/0: the queue
#   bounded in calls alone)  DURATION [5]  CLIENTS [16] (at least; more when
#   needed to offer 2x with one call in flight each)  SLOWLORIS [10000]
#   KERNEL_TIMEOUT_MS [2000]  DRAIN_MS [2000]  IO_THREADS [1]
#   PHASES ["overload slowloris hung drain"]: the parts to run
#   NODE_BIN [target/release/netaccel-node]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck disable=SC2034 # read by lib.sh
BENCH_NAME=overload/run.sh
HOST=127.0.0.1
# shellcheck source=bench/common/lib.sh
source "$ROOT/bench/common/lib.sh"

EXEC_US=${EXEC_US:-1000}
CASES=${CASES:-"64/8 64/0 8/0"}
SECONDS_EACH=${DURATION:-5}
CLIENTS=${CLIENTS:-16}
SLOWLORIS=${SLOWLORIS:-10000}
KERNEL_TIMEOUT_MS=${KERNEL_TIMEOUT_MS:-2000}
DRAIN_MS=${DRAIN_MS:-2000}
IO_THREADS=${IO_THREADS:-1}
NODE_BIN=${NODE_BIN:-$ROOT/target/release/netaccel-node}
PHASES=${PHASES:-"overload slowloris hung drain"}
want() { [[ " $PHASES " == *" $1 "* ]]; }

if [[ ! -x "$NODE_BIN" ]]; then
    log "netaccel-node missing: cargo build --release -p netaccel-node"
    (cd "$ROOT" && cargo build --release -p netaccel-node >&2) || die "cargo build failed"
fi
RUN_DIR=$(mktemp -d)
NODE_PID=
stop_node() {
    if [[ -n "$NODE_PID" ]]; then kill "$NODE_PID" 2>/dev/null || true; wait "$NODE_PID" 2>/dev/null || true; fi
    NODE_PID=
}
cleanup() { stop_node; rm -rf "$RUN_DIR"; }
trap cleanup EXIT

# start_node TOML: a node with that configuration on fresh free ports.
start_node() {
    HTTP_PORT='' RAC_PORT=''
    pick_ports HTTP_PORT RAC_PORT
    printf '%s\n' "$1" >"$RUN_DIR/node.toml"
    "$NODE_BIN" --config "$RUN_DIR/node.toml" --http "$HOST:$HTTP_PORT" --rac "$HOST:$RAC_PORT" \
        --io-threads "$IO_THREADS" --log-level warn >"$RUN_DIR/node.log" 2>&1 &
    NODE_PID=$!
    server_up netaccel-node "$NODE_PID" "$HTTP_PORT" "$RUN_DIR/node.log" || die "the node did not come up"
    server_up netaccel-node "$NODE_PID" "$RAC_PORT" "$RUN_DIR/node.log" || die "the node did not come up"
}

load() {
    timeout 600 python3 "$HERE/load.py" "$@" --host "$HOST" --http-port "$HTTP_PORT" \
        --rac-port "$RAC_PORT" --node-pid "$NODE_PID"
}

want overload || CASES=""
for case in $CASES; do
    q=${case%/*} f=${case#*/}
    start_node "simulated_exec_us = $EXEC_US
queue_depth_max = $q
tenant_queue_depth_max = $q
queue_wait_factor = $f
[[slots]]
accelerator = \"echo\""
    # The calls a full queue holds: q, or with a wait bound about f.
    held=$((f > 0 && f < q ? f : q))
    # Closed loop, no more clients than the queue holds (so none is refused and
    # spins): the slot's calls/s.
    cap=$(load capacity --seconds 3 --clients "$((held < 32 ? held : 32))")
    echo "$cap"
    rate=$(python3 -c "import json,sys; print(2 * json.loads(sys.argv[1])['calls_per_s'])" "$cap")
    log "queue_depth_max = $q, queue_wait_factor = $f: capacity $(python3 -c "import json,sys; print(json.loads(sys.argv[1])['calls_per_s'])" "$cap")/s, offering $rate/s"
    # Each client has one call in flight, so offering twice the capacity while full
    # queues hold each accepted call (held + 1) service times takes that many clients.
    clients=$(python3 -c "import math; print(max($CLIENTS, math.ceil($rate * ($held + 2) * $EXEC_US / 1e6)))")
    load overload --rate "$rate" --clients "$clients" --seconds "$SECONDS_EACH"
    stop_node
done

if want slowloris; then
log "slowloris: $SLOWLORIS connections"
start_node "connections_max = $((SLOWLORIS + 1000))
[[slots]]
accelerator = \"echo\""
load slowloris --slowloris "$SLOWLORIS" --unloaded-calls 3000
stop_node
fi

if want hung; then
log "hung kernel: kernel_timeout_ms = $KERNEL_TIMEOUT_MS"
start_node "fault_injection = true
kernel_timeout_ms = $KERNEL_TIMEOUT_MS
[[slots]]
accelerator = \"echo\"
[[slots]]
accelerator = \"fault\""
load hung --unloaded-calls 3000
stop_node
fi

want drain || exit 0
log "SIGTERM at 2x: drain_timeout_ms = $DRAIN_MS"
start_node "simulated_exec_us = $EXEC_US
drain_timeout_ms = $DRAIN_MS
[[slots]]
accelerator = \"echo\""
rate=$(python3 -c "print(2 * 1e6 / $EXEC_US)")
load drain --rate "$rate" --clients "$CLIENTS" --seconds 4
status=0
wait "$NODE_PID" 2>/dev/null || status=$?
log "node exit status $status"
NODE_PID=
