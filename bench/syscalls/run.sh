#!/usr/bin/env bash
# System calls per request of the node's network paths (epoll and io_uring), side by
# side: the node on SERVER_CPU, `wrk -t1 -cCONNS GET /health` on CLIENT_CPU for
# DURATION s, while `perf stat` counts the node's system calls by kind (tracepoints,
# so the count costs the node little, unlike strace). Prints one table row per path.
# Method and results: docs/benchmarks.md ("The io_uring path").
#
# Usage: bench/syscalls/run.sh        (needs perf and root, or perf_event_paranoid <= 1)
# Environment: CONNS [64] DURATION [5] SERVER_CPU [0] CLIENT_CPU [1]
#              NODE_BIN [target/release/netaccel-node] NETWORKS ["epoll io_uring"]
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CONNS=${CONNS:-64}
DURATION=${DURATION:-5}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
NODE_BIN=${NODE_BIN:-$ROOT/target/release/netaccel-node}
NETWORKS=${NETWORKS:-"epoll io_uring"}
KINDS="io_uring_enter epoll_wait recvfrom sendto"

[[ -x "$NODE_BIN" ]] || { echo "no node binary at $NODE_BIN (cargo build --release -p netaccel-node)" >&2; exit 1; }
command -v perf >/dev/null || { echo "perf is needed" >&2; exit 1; }
command -v wrk >/dev/null || { echo "wrk is needed" >&2; exit 1; }

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

PID=""
cleanup() { [[ -z "$PID" ]] || { kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; }; }
trap cleanup EXIT

events=""
for k in $KINDS; do events+="syscalls:sys_enter_$k,"; done
events+="raw_syscalls:sys_enter"

echo "| network | requests | syscalls/request (all) | $(echo "$KINDS" | sed 's/ / | /g') |"
echo "|---|---:|---:|$(for _ in $KINDS; do printf -- '---:|'; done)"
for net in $NETWORKS; do
    port=$(free_port)
    rac=$(free_port)
    taskset -c "$SERVER_CPU" "$NODE_BIN" --http "127.0.0.1:$port" --rac "127.0.0.1:$rac" --grpc off \
        --io-threads 1 --network "$net" --log-level warn >/dev/null 2>&1 &
    PID=$!
    for _ in $(seq 100); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
        sleep 0.1
    done
    taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNS" -d1s "http://127.0.0.1:$port/health" >/dev/null
    stat=$(mktemp)
    perf stat -x, -e "$events" -p "$PID" -o "$stat" -- sleep "$DURATION" &
    perf_pid=$!
    out=$(taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNS" -d"${DURATION}s" "http://127.0.0.1:$port/health")
    wait "$perf_pid"
    requests=$(awk '/requests in/ { print $1 }' <<<"$out")
    row="| $net | $requests |"
    all=$(awk -F, '$3 == "raw_syscalls:sys_enter" { print $1 }' "$stat")
    row+=" $(awk -v a="$all" -v r="$requests" 'BEGIN { printf "%.2f", a / r }') |"
    for k in $KINDS; do
        n=$(awk -F, -v e="syscalls:sys_enter_$k" '$3 == e { print $1 }' "$stat")
        row+=" $(awk -v a="${n:-0}" -v r="$requests" 'BEGIN { printf "%.3f", a / r }') |"
    done
    echo "$row"
    rm -f "$stat"
    kill "$PID"
    wait "$PID" 2>/dev/null || true
    PID=""
done
