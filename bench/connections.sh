#!/usr/bin/env bash
# Many idle connections to one node: memory per idle connection, accept rate, and
# refusals at the configured bound (issue 15). Loopback only; stops by itself.
#
#   bench/connections.sh                 18,000 connections, half HTTP half RAC, bound 19,000
#   CONNS=2000 BOUND=1500 bench/connections.sh   also exercises the refusals at the bound
#
# What it does: starts netaccel-node (release; built when missing) on free ports with
# `connections_max = BOUND` and a long idle timeout, opens CONNS connections from PROCS
# client processes (bench/connections.py, each from its own loopback source address
# 127.0.0.x), keeps them idle, measures the node's RSS, then drives ACTIVE_PER_PROC
# connections of each process with CALLS sequential calls (HTTP GET /health, RAC echo)
# and checks every idle one is still open. Prints the JSON result and a Markdown row.
#
# Environment:
#   CONNS [18000]  BOUND [19000]  PROCS [8]  ACTIVE_PER_PROC [8]  CALLS [20]
#   IO_THREADS [1]  TIMEOUT [180] (seconds, whole client run)
#   NODE_BIN [target/release/netaccel-node]  HTTP_PORT, RAC_PORT [free ports]
#
# The per-process open-file cap applies to the node: CONNS above what its hard limit
# allows are refused by the kernel (EMFILE at accept), not by the node's bound.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BENCH_NAME=connections.sh
HOST=127.0.0.1
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"

CONNS=${CONNS:-18000}
BOUND=${BOUND:-19000}
PROCS=${PROCS:-8}
ACTIVE_PER_PROC=${ACTIVE_PER_PROC:-8}
CALLS=${CALLS:-20}
IO_THREADS=${IO_THREADS:-1}
TIMEOUT=${TIMEOUT:-180}
NODE_BIN=${NODE_BIN:-$ROOT/target/release/netaccel-node}
HTTP_PORT=${HTTP_PORT:-}
RAC_PORT=${RAC_PORT:-}

if [[ ! -x "$NODE_BIN" ]]; then
    log "netaccel-node missing: cargo build --release -p netaccel-node"
    (cd "$ROOT" && cargo build --release -p netaccel-node >&2) || die "cargo build failed"
fi
pick_ports HTTP_PORT RAC_PORT
RUN_DIR=$(mktemp -d)
NODE_PID=
cleanup() {
    if [[ -n "$NODE_PID" ]]; then kill "$NODE_PID" 2>/dev/null || true; wait "$NODE_PID" 2>/dev/null || true; fi
    rm -rf "$RUN_DIR"
}
trap cleanup EXIT

cat >"$RUN_DIR/node.toml" <<TOML
connections_max = $BOUND
idle_timeout_ms = $(((TIMEOUT + 60) * 1000))
[[slots]]
accelerator = "echo"
TOML
"$NODE_BIN" --config "$RUN_DIR/node.toml" --http "$HOST:$HTTP_PORT" --rac "$HOST:$RAC_PORT" \
    --io-threads "$IO_THREADS" --log-level warn >"$RUN_DIR/node.log" 2>&1 &
NODE_PID=$!
server_up netaccel-node "$NODE_PID" "$RAC_PORT" "$RUN_DIR/node.log" || die "the node did not come up"
server_up netaccel-node "$NODE_PID" "$HTTP_PORT" "$RUN_DIR/node.log" || die "the node did not come up"

log "opening $CONNS connections (bound $BOUND) from $PROCS processes"
timeout "$((TIMEOUT + 30))" python3 "$HERE/connections.py" --host "$HOST" \
    --http-port "$HTTP_PORT" --rac-port "$RAC_PORT" --node-pid "$NODE_PID" \
    --conns "$CONNS" --procs "$PROCS" --active-per-worker "$ACTIVE_PER_PROC" \
    --calls "$CALLS" --timeout "$TIMEOUT" >"$RUN_DIR/result.json"
cat "$RUN_DIR/result.json"
metric=$(curl -s "http://$HOST:$HTTP_PORT/metrics" | grep '^netaccel_connections_refused_total' || true)
log "node metrics: ${metric:-no netaccel_connections_refused_total}"
python3 - "$RUN_DIR/result.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("| connections | accepted | refused (503 / BUSY / closed) | accept rate | RSS idle / before | per idle connection | active ok / failed |")
print("|---:|---:|---|---:|---|---:|---|")
print(f"| {r['opened']} | {r['accepted']} | {r['refused_http_503']} / {r['refused_rac_busy']} / {r['refused_closed']} "
      f"| {r['accept_rate']}/s | {r['rss_idle_kib']/1024:.1f} / {r['rss_before_kib']/1024:.1f} MiB "
      f"| {r['rss_per_idle_conn_bytes']/1024:.2f} KiB | {r['active_ok']} / {r['active_failed']} |")
PY
