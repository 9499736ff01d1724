#!/usr/bin/env bash
# User-space instructions per RAC echo call: the node against the C TCP echo, counted
# by callgrind (valgrind). The RAC counterpart of bench/http/instructions.sh: counts,
# not times, so a change of a few percent in the node's call path shows where
# bench/rac/run.sh's p50 gap drowns in noise (issue 28). Kernel work (the system calls,
# TCP over loopback) is not counted: callgrind sees user space only. Method and
# results: docs/benchmarks.md, "User-space instructions per request".
#
# Usage: bench/rac/instructions.sh [NODE_BIN...]
#   Each NODE_BIN (default: target/release/netaccel-node, built if missing) and the
#   C echo run under `valgrind --tool=callgrind` in turn; netaccel-bench sends WARMUP
#   calls of SIZE bytes over one connection, the counters are zeroed, CALLS more calls
#   are sent, and the counters are dumped. Printed per server: calls, instructions,
#   instructions per call; and, per server, the functions with the most inclusive
#   instructions per call (TOP of them).
#
# Environment (defaults in brackets): SIZE [64]  INFLIGHT [1]: calls in flight on the
#   connection  CALLS [20000]  WARMUP [3000]  TOP [25]
#   NODE_ARGS: extra arguments for every node (e.g. "--network io_uring")
#   BENCH_BIN [target/release/netaccel-bench] (built if missing)
#   OUT_DIR [bench/out]: the callgrind files stay in OUT_DIR/rac-instructions-DATE/
#   for callgrind_annotate or kcachegrind.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH_NAME=rac-instructions.sh
HOST=127.0.0.1
# shellcheck source=bench/common/lib.sh
source "$ROOT/bench/common/lib.sh"

SIZE=${SIZE:-64}
INFLIGHT=${INFLIGHT:-1}
CALLS=${CALLS:-20000}
WARMUP=${WARMUP:-3000}
TOP=${TOP:-25}
read -r -a node_args <<<"${NODE_ARGS:-}"
OUT_DIR=${OUT_DIR:-$ROOT/bench/out}
BENCH_BIN=${BENCH_BIN:-$ROOT/target/release/netaccel-bench}

for tool in valgrind callgrind_control callgrind_annotate; do
    command -v "$tool" >/dev/null || die "$tool is missing (Debian package valgrind)"
done
make -s -C "$ROOT/bench/common/c" tcp_echo >&2 || die "building bench/common/c failed"
if [[ ! -x "$BENCH_BIN" ]]; then
    (cd "$ROOT" && cargo build --release -p netaccel-bench >&2) || die "building netaccel-bench failed"
fi

nodes=("$@")
if ((${#nodes[@]} == 0)); then
    nodes=("$ROOT/target/release/netaccel-node")
    if [[ ! -x "${nodes[0]}" ]]; then
        (cd "$ROOT" && cargo build --release -p netaccel-node >&2) || die "building the node failed"
    fi
fi

run_dir="$OUT_DIR/rac-instructions-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$run_dir"

# calls TARGET N LOG: N echo calls of SIZE bytes over one connection.
calls() {
    "$BENCH_BIN" run "$1" --size "$SIZE" --conns 1 --inflight "$INFLIGHT" --calls "$2" \
        --warmup 0 --quiet >"$3" 2>&1
}

# count NAME PORT TARGET CMD...: one server under callgrind; prints its line of figures.
count() {
    local name=$1 port=$2 target=$3
    shift 3
    local prefix="$run_dir/$name"
    valgrind --tool=callgrind --callgrind-out-file="$prefix.%p" "$@" >"$prefix.log" 2>&1 &
    local pid=$!
    local i
    for ((i = 0; i < 300; i++)); do
        (exec 3<>"/dev/tcp/$HOST/$port") 2>/dev/null && break
        kill -0 "$pid" 2>/dev/null || die "$name exited at start-up: see $prefix.log"
        sleep 0.2
    done
    calls "$target" "$WARMUP" "$prefix.warmup" || die "warm-up calls to $name failed: see $prefix.warmup"
    callgrind_control -z "$pid" >/dev/null 2>&1
    calls "$target" "$CALLS" "$prefix.load" || die "calls to $name failed: see $prefix.load"
    callgrind_control -d "$pid" >/dev/null 2>&1
    stop_process "$pid" 10
    local file="$prefix.$pid.1" ir
    [[ -s "$file" ]] || die "no callgrind dump for $name ($file)"
    ir=$(callgrind_annotate "$file" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }')
    awk -v n="$name" -v c="$CALLS" -v i="$ir" \
        'BEGIN { printf "| %s | %d | %d | %.0f |\n", n, c, i, i / c }'
    # The heaviest functions, inclusive, per call (a call count marks a callee line).
    # (Read to the end, not cut with head: a closed pipe would end the script.)
    callgrind_annotate --inclusive=yes --threshold=100 "$file" 2>/dev/null |
        sed -E 's#/root/.cargo/registry/src/[^/]+/##; s#/rustc/[0-9a-f]+/library/##' |
        awk -v c="$CALLS" -v top="$TOP" '/\([0-9,]+x\)/ { next } /^ *[0-9,]+ \(/ {
                v = $1; gsub(",", "", v); $1 = ""; $2 = ""; sub(/^ +/, "")
                if (!seen[$0]++ && shown++ < top) printf "%8.0f  %s\n", v / c, substr($0, 1, 160) }' \
            >"$prefix.top.txt"
}

echo "| server | calls ($SIZE B, $INFLIGHT in flight) | user-space instructions | per call |"
echo "|---|---:|---:|---:|"
for node in "${nodes[@]}"; do
    pick_ports NODE_PORT NODE_RAC_PORT
    count "node-$(basename "$(dirname "$node")")-$(basename "$node")" "$NODE_RAC_PORT" \
        "rac://$HOST:$NODE_RAC_PORT/echo" \
        "$node" --http "$HOST:$NODE_PORT" --rac "$HOST:$NODE_RAC_PORT" --io-threads 1 \
        ${node_args[@]+"${node_args[@]}"}
    NODE_PORT="" NODE_RAC_PORT=""
done
pick_ports ECHO_PORT
count c-echo "$ECHO_PORT" "tcp-echo://$HOST:$ECHO_PORT" \
    "$ROOT/bench/common/c/tcp_echo" -a "$HOST" -p "$ECHO_PORT"
echo
for f in "$run_dir"/*.top.txt; do
    echo "== $(basename "$f" .top.txt): inclusive instructions per call"
    cat "$f"
done
log "callgrind files: ${run_dir#"$ROOT"/}"
