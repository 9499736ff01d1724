#!/usr/bin/env bash
# RAC transport overhead: the node's RAC echo against a minimal C TCP echo server.
#
# Acceptance criterion: in one run, RAC echo of 64 B and 4 KiB against a minimal C
# TCP echo server on the same machine, closed loop, one connection, 100,000 calls:
# the p50 gap is at most 2 µs; pipelined throughput (calls/s with 32 in flight) is at
# least 80% of the C echo's messages/s with the same pipelining.
#
#   RAC echo   netaccel-node --rac … --io-threads 1, accelerator `echo` (id 1): a
#              64-byte call header + payload out, a 64-byte result header + payload back
#   C echo     bench/common/c/tcp_echo (single-threaded epoll): the same payload out and back,
#              no header (the transport floor)
#
# Per size and round: CALLS calls over one connection with 1 in flight (latency) and
# CALLS calls over one connection with INFLIGHT in flight (throughput), for each
# server; the server order alternates between rounds and every figure is the median
# over ROUNDS rounds. The p50 gap is the median of the per-round gaps (the two
# servers of a round run back to back, so a drift of the machine moves both alike). Servers are pinned to SERVER_CPU, netaccel-bench to CLIENT_CPU.
# During the 1-in-flight runs a SCHED_IDLE busy loop keeps both CPUs from halting
# between calls (KEEP_AWAKE=1, see awake_start in lib.sh): waking a halted virtual CPU
# waits for the host's scheduler and moved the C echo's own p50 by 18-31 us between
# rounds. Not during pipelined runs: the node's slot workers (SCHED_IDLE) work then.
# Writes bench/out/rac-DATE.md (with the JSON reports) and, with UPDATE_DOCS=1 (the
# default), the generated block of the "RAC transport overhead" section of
# docs/benchmarks.md.
#
# Usage: bench/rac/run.sh
#
# Environment (defaults in brackets):
#   CALLS [100000]  INFLIGHT [32]  SIZES ["64 4096"]  ROUNDS [5]  WARMUP [0.5] s
#   SERVER_CPU [0]  CLIENT_CPU [1]  PRIO [auto]: rt (chrt -f 50, root), nice, none
#   NODE_BIN [target/release/netaccel-node]  BENCH_BIN [target/release/netaccel-bench]
#     (built with cargo when missing)
#   HTTP_PORT  RAC_PORT  ECHO_PORT [free ports, chosen at start]
#   GAP_MAX_US [2]  RATIO_MIN [0.80]  KEEP_AWAKE [1]
#   ECHO_WAIT_MS [none]: the C echo's epoll_wait timeout (tcp_echo -w); 60000 makes it
#     sleep with a kernel timer armed around every wait, as the node does (issue 28)
#   OUT_DIR [bench/out]  UPDATE_DOCS [1]  STRICT [0]: exit 1 if a criterion fails
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH_NAME=rac.sh
# shellcheck source=bench/common/lib.sh
source "$ROOT/bench/common/lib.sh"

CALLS=${CALLS:-100000}
INFLIGHT=${INFLIGHT:-32}
SIZES=${SIZES:-"64 4096"}
ROUNDS=${ROUNDS:-5}
WARMUP=${WARMUP:-0.5}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
PRIO=${PRIO:-auto}
NODE_BIN=${NODE_BIN:-$ROOT/target/release/netaccel-node}
BENCH_BIN=${BENCH_BIN:-$ROOT/target/release/netaccel-bench}
HTTP_PORT=${HTTP_PORT:-}
RAC_PORT=${RAC_PORT:-}
ECHO_PORT=${ECHO_PORT:-}
GAP_MAX_US=${GAP_MAX_US:-2}
RATIO_MIN=${RATIO_MIN:-0.80}
OUT_DIR=${OUT_DIR:-$ROOT/bench/out}
UPDATE_DOCS=${UPDATE_DOCS:-1}
STRICT=${STRICT:-0}
HOST=127.0.0.1
pick_ports HTTP_PORT RAC_PORT ECHO_PORT
STAMP=$(date +%Y%m%d-%H%M%S)
RUN_DIR="$OUT_DIR/rac-$STAMP"

declare -a PIDS=()
declare -a PRIO_CMD=()
RUNS=0


stop_servers() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    PIDS=()
}
trap 'awake_stop; stop_servers' EXIT
trap 'exit 130' INT TERM


build() {
    make -s -C "$ROOT/bench/common/c" tcp_echo >&2 || die "building bench/common/c failed"
    build_release_bins
    "$BENCH_BIN" run --help | grep -q -- '--calls' || die "$BENCH_BIN has no --calls option; rebuild it"
}


start_servers() {
    taskset -c "$SERVER_CPU" "${PRIO_CMD[@]}" "$NODE_BIN" --http "$HOST:$HTTP_PORT" --rac "$HOST:$RAC_PORT" \
        --io-threads 1 --log-level warn >>"$RUN_DIR/servers.log" 2>&1 &
    PIDS+=($!)
    taskset -c "$SERVER_CPU" "${PRIO_CMD[@]}" "$ROOT/bench/common/c/tcp_echo" -a "$HOST" -p "$ECHO_PORT" ${ECHO_WAIT_MS:+-w "$ECHO_WAIT_MS"} >>"$RUN_DIR/servers.log" 2>&1 &
    PIDS+=($!)
    server_up netaccel-node "${PIDS[0]}" "$RAC_PORT" "$RUN_DIR/servers.log" || die "the node's RAC listener did not come up"
    server_up tcp_echo "${PIDS[1]}" "$ECHO_PORT" "$RUN_DIR/servers.log" || die "tcp_echo did not come up"
}

# one LABEL SIZE INFLIGHT TARGET: CALLS calls over one connection, JSON into RUN_DIR.
one() {
    local label=$1 size=$2 inflight=$3 target=$4 file
    RUNS=$((RUNS + 1))
    file="$RUN_DIR/$(printf '%02d' "$RUNS")-$(tr -c 'A-Za-z0-9_.-' '_' <<<"$label").json"
    log "$label"
    timeout 300 "${PRIO_CMD[@]}" taskset -c "$CLIENT_CPU" "$BENCH_BIN" run "$target" \
        --size "$size" --conns 1 --inflight "$inflight" --calls "$CALLS" --warmup "$WARMUP" \
        --label "$label" --note "server on CPU $SERVER_CPU" --json "$file" --quiet >/dev/null 2>>"$RUN_DIR/bench.log" ||
        die "run failed: $label (see $RUN_DIR/bench.log)"
}


# col LABEL_PREFIX FIELD: median over rounds of a TSV field (2 p50 ns, 3 p99 ns, 4 calls/s, 5 errors)
col() { awk -F'\t' -v l="$1" -v f="$2" 'index($1, l " r") == 1 { print $f }' "$RUN_DIR/summary.tsv" | median; }
# gap SIZE: median over rounds of (RAC p50 - C echo p50), 1 in flight, in ns.
gap() {
    paste <(awk -F'\t' -v l="RAC echo $1 P1" 'index($1, l " r") == 1 { print substr($1, length(l) + 3), $2 }' "$RUN_DIR/summary.tsv" | sort -n) \
        <(awk -F'\t' -v l="C echo $1 P1" 'index($1, l " r") == 1 { print substr($1, length(l) + 3), $2 }' "$RUN_DIR/summary.tsv" | sort -n) |
        awk '$1 == $3 { print $2 - $4 }' | median
}
per_round() { awk -F'\t' -v l="$1" -v f="$2" -v d="$3" 'index($1, l " r") == 1 { printf "%s%.*f", (n++ ? " / " : ""), d, $f / (f <= 3 ? 1000 : 1) }' "$RUN_DIR/summary.tsv"; }


report() {
    local rev size n
    rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')
    git -C "$ROOT" diff --quiet HEAD -- crates 2>/dev/null || rev+=", crates/ modified"
    echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC'), \`bench/rac/run.sh\` (CALLS=$CALLS per run after $WARMUP s warm-up, INFLIGHT=$INFLIGHT, ROUNDS=$ROUNDS, medians over rounds), commit $rev."
    echo
    echo "- machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')), a virtual machine shared with other work (noisy); load average at start $LOAD_START, at end $(cut -d' ' -f1-3 /proc/loadavg); kernel $(uname -r)"
    echo "- core split: the node (\`--io-threads 1\`, all its threads) and \`bench/common/c/tcp_echo\` pinned to CPU $SERVER_CPU (both running, measured one at a time); netaccel-bench (one load thread) pinned to CPU $CLIENT_CPU; loopback; scheduling: ${PRIO_CMD[*]:-default}; SCHED_IDLE busy loops on both CPUs during 1-in-flight runs: $([[ ${KEEP_AWAKE:-1} == 1 ]] && echo yes || echo no)"
    echo "- each run: one connection, $CALLS calls (\`netaccel-bench run … -c 1 -P 1|$INFLIGHT -n $CALLS\`), closed loop; RAC carries a 64-byte header each way on top of the payload, the C echo only the payload"
    echo
    echo "| size | server | p50 µs (1 in flight) | p99 µs (1 in flight) | calls/s (1 in flight) | calls/s ($INFLIGHT in flight) | p50 µs ($INFLIGHT in flight) | errors |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|"
    for size in $SIZES; do
        n=$(size_name "$size")
        for server in "RAC echo" "C echo"; do
            awk -v n="$n" -v s="$server" -v p50="$(col "$server $size P1" 2)" -v p99="$(col "$server $size P1" 3)" \
                -v r1="$(col "$server $size P1" 4)" -v rp="$(col "$server $size P$INFLIGHT" 4)" \
                -v pp="$(col "$server $size P$INFLIGHT" 2)" \
                -v e="$(($(col "$server $size P1" 5) + $(col "$server $size P$INFLIGHT" 5)))" \
                'BEGIN { printf "| %s | %s | %.1f | %.1f | %.0f | %.0f | %.1f | %d |\n", n, s, p50 / 1000, p99 / 1000, r1, rp, pp / 1000, e }'
        done
    done
    echo
    echo "| criterion | size | RAC | C echo | measured | limit | result |"
    echo "|---|---|---:|---:|---:|---:|---|"
    for size in $SIZES; do
        n=$(size_name "$size")
        awk -v n="$n" -v a="$(col "RAC echo $size P1" 2)" -v b="$(col "C echo $size P1" 2)" -v g="$(gap "$size")" -v lim="$GAP_MAX_US" \
            'BEGIN { g /= 1000; printf "| p50 gap, 1 in flight (median of per-round gaps) | %s | %.1f µs | %.1f µs | %+.1f µs | ≤ %s µs | %s |\n", n, a / 1000, b / 1000, g, lim, (g <= lim ? "PASS" : "FAIL") }'
    done
    for size in $SIZES; do
        n=$(size_name "$size")
        awk -v n="$n" -v a="$(col "RAC echo $size P$INFLIGHT" 4)" -v b="$(col "C echo $size P$INFLIGHT" 4)" -v lim="$RATIO_MIN" -v p="$INFLIGHT" \
            'BEGIN { r = a / b; printf "| calls/s ratio, %d in flight | %s | %.0f | %.0f | %.2f | ≥ %.2f | %s |\n", p, n, a, b, r, lim, (r >= lim ? "PASS" : "FAIL") }'
    done
    echo
    echo "Per-round p50 µs, 1 in flight (RAC; C echo):"
    for size in $SIZES; do
        echo "$(size_name "$size"): $(per_round "RAC echo $size P1" 2 1); $(per_round "C echo $size P1" 2 1)."
    done
    echo "Per-round calls/s, $INFLIGHT in flight (RAC; C echo):"
    for size in $SIZES; do
        echo "$(size_name "$size"): $(per_round "RAC echo $size P$INFLIGHT" 4 0); $(per_round "C echo $size P$INFLIGHT" 4 0)."
    done
}

update_docs() {
    replace_docs_block rac.sh "$1" || return 0
    log "updated docs/benchmarks.md"
}

main() {
    (($(nproc) >= 2)) || log "warning: fewer than 2 CPUs; server and client share a core"
    command -v taskset >/dev/null || die "taskset (util-linux) is needed"
    build
    choose_prio
    mkdir -p "$RUN_DIR"
    LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
    local t0 r size inflight order server
    t0=$(date +%s)
    start_servers
    for ((r = 1; r <= ROUNDS; r++)); do
        if ((r % 2)); then order=("RAC echo" "C echo"); else order=("C echo" "RAC echo"); fi
        for size in $SIZES; do
            for inflight in 1 "$INFLIGHT"; do
                [[ $inflight != 1 ]] || awake_start "$SERVER_CPU,$CLIENT_CPU"
                for server in "${order[@]}"; do
                    if [[ $server == "RAC echo" ]]; then
                        one "$server $size P$inflight r$r" "$size" "$inflight" "rac://$HOST:$RAC_PORT/echo"
                    else
                        one "$server $size P$inflight r$r" "$size" "$inflight" "tcp-echo://$HOST:$ECHO_PORT"
                    fi
                done
                awake_stop
            done
        done
    done
    stop_servers
    "$BENCH_BIN" report "$RUN_DIR"/*.json --markdown "$RUN_DIR/table.md" --tsv "$RUN_DIR/summary.tsv" >/dev/null
    local out="$OUT_DIR/rac-$STAMP.md"
    report >"$out"
    cat "$out"
    log "measured in $(($(date +%s) - t0)) s; written to ${out#"$ROOT"/} (JSON in ${RUN_DIR#"$ROOT"/})"
    if [[ "$UPDATE_DOCS" == 1 ]]; then update_docs "$out"; fi
    if [[ "$STRICT" == 1 ]] && grep -q '| FAIL |' "$out"; then exit 1; fi
}

main "$@"
