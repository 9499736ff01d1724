#!/usr/bin/env bash
# User-space instructions per keep-alive `GET /health`: the node against the C epoll
# responder, counted by callgrind (valgrind). Counts, not times: the figure does not
# move with the load of the machine, so a change of a few percent in the node's user
# space shows where bench/http/run.sh's CPU per request drowns in noise (issue 28).
# Kernel work (the system calls, TCP over loopback) is not counted: callgrind sees
# user space only. Method and results: docs/benchmarks.md, "User-space instructions
# per request".
#
# Usage: bench/http/instructions.sh [NODE_BIN...]
#   Each NODE_BIN (default: target/release/netaccel-node, built if missing) and the
#   C responder run under `valgrind --tool=callgrind` in turn; wrk sends
#   GET /health over CONNS keep-alive connections for WARMUP s, the counters are
#   zeroed, wrk runs DURATION s more, and the counters are dumped. Printed per server:
#   requests, instructions, instructions per request; and, per server, the functions
#   with the most inclusive instructions per request (TOP of them).
#
# Environment (defaults in brackets): CONNS [64]  WARMUP [2]  DURATION [6]  TOP [25]
#   NODE_ARGS: extra arguments for every node (e.g. "--network io_uring")
#   RATE: when set, the measured part is bench/common/c/fixed_rate at RATE req/s over
#   UPPER=1: the request is a keep-alive `POST /v1/fn/to_uppercase` with a 64 B body
#   (bench/common/wrk/post64.lua) instead of `GET /health`, for every server (the C
#   responder answers it as any request), with wrk; not with RATE
#   RATE_CONNS [16] connections instead of wrk at its fastest: requests then come one
#   per wake-up, as in bench/http/run.sh's fixed-rate run (keep RATE within what a
#   server under callgrind answers: 5000 is)
#   OUT_DIR [bench/out]: the callgrind files stay in OUT_DIR/instructions-DATE/ for
#   callgrind_annotate or kcachegrind.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH_NAME=instructions.sh
HOST=127.0.0.1
# shellcheck source=bench/common/lib.sh
source "$ROOT/bench/common/lib.sh"

CONNS=${CONNS:-64}
WARMUP=${WARMUP:-2}
DURATION=${DURATION:-6}
TOP=${TOP:-25}
RATE=${RATE:-}
read -r -a node_args <<<"${NODE_ARGS:-}"
RATE_CONNS=${RATE_CONNS:-16}
UPPER=${UPPER:-0}
if [[ "$UPPER" == 1 ]]; then
    [[ -z "$RATE" ]] || die "UPPER=1 goes with wrk, not RATE"
    REQ_SCRIPT="$ROOT/bench/common/wrk/post64.lua" REQ_PATH=/v1/fn/to_uppercase
else
    REQ_SCRIPT="$ROOT/bench/common/wrk/report.lua" REQ_PATH=/health
fi
OUT_DIR=${OUT_DIR:-$ROOT/bench/out}

for tool in valgrind callgrind_control callgrind_annotate wrk curl; do
    command -v "$tool" >/dev/null || die "$tool is missing (Debian packages valgrind, wrk, curl)"
done
make -s -C "$ROOT/bench/common/c" >&2 || die "building bench/common/c failed"

nodes=("$@")
if ((${#nodes[@]} == 0)); then
    nodes=("$ROOT/target/release/netaccel-node")
    if [[ ! -x "${nodes[0]}" ]]; then
        (cd "$ROOT" && cargo build --release -p netaccel-node >&2) || die "building the node failed"
    fi
fi

run_dir="$OUT_DIR/instructions-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$run_dir"

# count NAME CMD...: one server under callgrind; prints its line of figures.
count() {
    local name=$1 port
    shift
    port=$1
    shift
    local prefix="$run_dir/$name"
    valgrind --tool=callgrind --callgrind-out-file="$prefix.%p" "$@" >"$prefix.log" 2>&1 &
    local pid=$!
    local i
    for ((i = 0; i < 300; i++)); do
        curl -s -o /dev/null --max-time 1 "http://$HOST:$port/health" && break
        kill -0 "$pid" 2>/dev/null || die "$name exited at start-up: see $prefix.log"
        sleep 0.2
    done
    wrk -t1 -c"$CONNS" -d"${WARMUP}s" -s "$REQ_SCRIPT" "http://$HOST:$port$REQ_PATH" >/dev/null
    callgrind_control -z "$pid" >/dev/null 2>&1
    local requests file ir
    if [[ -n "$RATE" ]]; then
        "$ROOT/bench/common/c/fixed_rate" -a "$HOST" -p "$port" -r "$RATE" -c "$RATE_CONNS" \
            -d "$DURATION" -P /health >"$prefix.load"
        requests=$(grep -o 'completed=[0-9]*' "$prefix.load" | cut -d= -f2)
    else
        wrk -t1 -c"$CONNS" -d"${DURATION}s" -s "$REQ_SCRIPT" \
            "http://$HOST:$port$REQ_PATH" >"$prefix.load"
        requests=$(grep -o 'requests=[0-9]*' "$prefix.load" | cut -d= -f2)
    fi
    callgrind_control -d "$pid" >/dev/null 2>&1
    stop_process "$pid" 10
    file="$prefix.$pid.1"
    [[ -s "$file" ]] || die "no callgrind dump for $name ($file)"
    ir=$(callgrind_annotate "$file" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }')
    awk -v n="$name" -v r="$requests" -v i="$ir" \
        'BEGIN { printf "| %s | %d | %d | %.0f |\n", n, r, i, i / r }'
    # The heaviest functions, inclusive, per request (a call count marks a callee line).
    # (Read to the end, not cut with head: a closed pipe would end the script.)
    callgrind_annotate --inclusive=yes --threshold=100 "$file" 2>/dev/null |
        sed -E 's#/root/.cargo/registry/src/[^/]+/##; s#/rustc/[0-9a-f]+/library/##' |
        awk -v r="$requests" -v top="$TOP" '/\([0-9,]+x\)/ { next } /^ *[0-9,]+ \(/ {
                v = $1; gsub(",", "", v); $1 = ""; $2 = ""; sub(/^ +/, "")
                if (!seen[$0]++ && shown++ < top) printf "%8.0f  %s\n", v / r, substr($0, 1, 160) }' \
            >"$prefix.top.txt"
}

echo "| server | requests | user-space instructions | per request |"
echo "|---|---:|---:|---:|"
for node in "${nodes[@]}"; do
    pick_ports NODE_PORT NODE_RAC_PORT
    count "node-$(basename "$(dirname "$node")")-$(basename "$node")" "$NODE_PORT" \
        "$node" --http "$HOST:$NODE_PORT" --rac "$HOST:$NODE_RAC_PORT" --io-threads 1 \
        ${node_args[@]+"${node_args[@]}"}
    NODE_PORT="" NODE_RAC_PORT=""
done
pick_ports C_PORT
count c-responder "$C_PORT" "$ROOT/bench/common/c/http_responder" -a "$HOST" -p "$C_PORT"
echo
for f in "$run_dir"/*.top.txt; do
    echo "== $(basename "$f" .top.txt): inclusive instructions per request"
    cat "$f"
done
log "callgrind files: ${run_dir#"$ROOT"/}"
