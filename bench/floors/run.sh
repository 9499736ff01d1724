#!/usr/bin/env bash
# The node against its transport floors, interleaved (issue 28): what bench/rac/run.sh
# and bench/http/run.sh compare in rounds, measured so that the machine's drift cancels.
# Method and results: docs/benchmarks.md, "The transport floors, interleaved".
#
# Usage: bench/floors/run.sh
#
# On a shared machine the same server's median round trip and CPU per request move by
# 10-40 % between rounds measured a minute apart, more than the 2 µs and 5 % the
# comparisons decide on. Here every server runs at once, pinned to SERVER_CPU: the node
# (one process per network path in PATHS: "node" its own epoll loop, the default,
# "uring" --network io_uring), the C TCP echo and the C epoll HTTP responder
# (bench/common/c). Then:
#
# 1. Latency, one call in flight, interleaved call by call (`netaccel-bench pair`: one
#    connection to each of two servers, calls alternating A B B A …, CALLS calls each
#    after a warm-up, cut into BLOCKS blocks; the gap is the median of the per-block
#    gaps of the medians). Per path: RAC echo against the C TCP echo at 64 B and
#    4 KiB, `GET /health` against the C responder, and (informative) the node's
#    `POST /v1/fn/to_uppercase` with 64 B against its own `/health`. The keep-awake
#    loops of lib.sh run on both CPUs meanwhile, as in bench/rac/run.sh.
# 2. CPU per request, in slices that alternate between the node and the C responder
#    (node, C, C, node, node, C …), SLICES pairs of SLICE s each: `fixed_rate` at RATE
#    req/s over RATE_CONNS connections, then `wrk -c CONNS` at its fastest, as
#    bench/http/run.sh measures them. CPU = the server's threads' run time
#    (schedstat) ÷ requests completed in the slice; per pair the ratio node ÷ C; the
#    figure is the median of the pair ratios. No keep-awake loops here (as in
#    bench/http/run.sh).
#
# Environment (defaults in brackets):
#   PATHS ["node uring"]  CALLS [100000]  WARMUP_CALLS [5000]  BLOCKS [20]
#   SLICES [10]  SLICE [2] (s, whole)  RATE [20000]  RATE_CONNS [16]  CONNS [64]
#   SERVER_CPU [0]  CLIENT_CPU [1]  PRIO [auto] (see bench/http/run.sh)
#   NODE_BIN [target/release/netaccel-node]  BENCH_BIN [target/release/netaccel-bench]
#   GAP_MAX_US [2]  CPU_RATIO_MAX [1.05]  OUT_DIR [bench/out]  STRICT [0]: exit 1 if a
#   criterion fails
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH_NAME=floors.sh
HOST=127.0.0.1
# shellcheck source=bench/common/lib.sh
source "$ROOT/bench/common/lib.sh"

PATHS=${PATHS:-"node uring"}
CALLS=${CALLS:-100000}
WARMUP_CALLS=${WARMUP_CALLS:-5000}
BLOCKS=${BLOCKS:-20}
SLICES=${SLICES:-10}
SLICE=${SLICE:-2}
RATE=${RATE:-20000}
RATE_CONNS=${RATE_CONNS:-16}
CONNS=${CONNS:-64}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
PRIO=${PRIO:-auto}
NODE_BIN=${NODE_BIN:-$ROOT/target/release/netaccel-node}
BENCH_BIN=${BENCH_BIN:-$ROOT/target/release/netaccel-bench}
GAP_MAX_US=${GAP_MAX_US:-2}
CPU_RATIO_MAX=${CPU_RATIO_MAX:-1.05}
OUT_DIR=${OUT_DIR:-$ROOT/bench/out}
STRICT=${STRICT:-0}
[[ $SLICE =~ ^[1-9][0-9]*$ ]] || die "SLICE must be a whole number of seconds"

declare -A PID=() HTTP=() RAC=() RES=()
declare -a PIDS=() PRIO_CMD=()
RUN_DIR=""

cleanup() {
    awake_stop
    local p
    for p in "${PIDS[@]}"; do stop_process "$p"; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

label() {
    case $1 in
        node) echo "node (own epoll loop)" ;;
        uring) echo "node --network io_uring" ;;
        c) echo "C epoll responder" ;;
        *) echo "$1" ;;
    esac
}

# start NAME PORT COMMAND...: starts a server pinned to SERVER_CPU, waits for its PORT.
start() {
    local name=$1 port=$2
    shift 2
    taskset -c "$SERVER_CPU" "${PRIO_CMD[@]}" "$@" >>"$RUN_DIR/$name.log" 2>&1 &
    PID[$name]=$!
    PIDS+=($!)
    server_up "$name" "$!" "$port" "$RUN_DIR/$name.log" || die "$name did not come up"
}

start_all() {
    local p http rac echo="" c=""
    for p in $PATHS; do
        http="" rac=""
        pick_ports http rac
        HTTP[$p]=$http RAC[$p]=$rac
        local -a net=()
        [[ $p == uring ]] && net=(--network io_uring)
        [[ $p == node || $p == uring ]] || die "PATHS: unknown path $p (node, uring)"
        start "$p" "$http" "$NODE_BIN" --http "$HOST:$http" --rac "$HOST:$rac" \
            --io-threads 1 --log-level warn "${net[@]}"
    done
    pick_ports echo c
    HTTP[c]=$c RAC[echo]=$echo
    start echo "$echo" "$ROOT/bench/common/c/tcp_echo" -a "$HOST" -p "$echo"
    start c "$c" "$ROOT/bench/common/c/http_responder" -a "$HOST" -p "$c"
}

# pair KEY A B SIZE: one interleaved latency comparison; RES[KEY,*] from its output.
pair() {
    local key=$1 a=$2 b=$3 size=$4 out
    log "latency: $key ($CALLS calls each, interleaved)"
    out=$(timeout 600 "${PRIO_CMD[@]}" taskset -c "$CLIENT_CPU" "$BENCH_BIN" pair "$a" "$b" \
        --size "$size" --calls "$CALLS" --warmup-calls "$WARMUP_CALLS" --blocks "$BLOCKS") ||
        die "netaccel-bench pair $a $b failed"
    echo "$out" >"$RUN_DIR/pair-${key//[^A-Za-z0-9]/_}.txt"
    local k
    for k in a_p50_ns b_p50_ns a_p99_ns b_p99_ns gap_ns block_gaps_ns; do
        RES[$key,$k]=$(grep "^$k=" <<<"$out" | cut -d= -f2)
    done
}

latency() {
    local p
    awake_start "$SERVER_CPU,$CLIENT_CPU"
    for p in $PATHS; do
        pair "$p rac 64" "rac://$HOST:${RAC[$p]}/echo" "tcp-echo://$HOST:${RAC[echo]}" 64
        pair "$p rac 4096" "rac://$HOST:${RAC[$p]}/echo" "tcp-echo://$HOST:${RAC[echo]}" 4096
        pair "$p http" "http://$HOST:${HTTP[$p]}/health" "http://$HOST:${HTTP[c]}/health" 0
        pair "$p upper" "http://$HOST:${HTTP[$p]}/v1/fn/to_uppercase" "http://$HOST:${HTTP[$p]}/health" 64
    done
    awake_stop
}

# load MODE PORT: one slice of load; prints the requests completed.
load() {
    local mode=$1 port=$2 out
    if [[ $mode == rate ]]; then
        out=$(timeout $((SLICE + 30)) "${PRIO_CMD[@]}" taskset -c "$CLIENT_CPU" "$ROOT/bench/common/c/fixed_rate" \
            -a "$HOST" -p "$port" -r "$RATE" -c "$RATE_CONNS" -d "$SLICE" -P /health) ||
            die "fixed_rate against port $port failed"
        grep -o 'completed=[0-9]*' <<<"$out" | cut -d= -f2
    else
        out=$(timeout $((SLICE + 30)) "${PRIO_CMD[@]}" taskset -c "$CLIENT_CPU" wrk -t1 -c"$CONNS" \
            -d"${SLICE}s" --timeout 2s -s "$ROOT/bench/common/wrk/report.lua" "http://$HOST:$port/health") ||
            die "wrk against port $port failed"
        grep -o 'requests=[0-9]*' <<<"$out" | cut -d= -f2
    fi
}

# slice NAME MODE: CPU µs per request of server NAME over one slice.
slice() {
    local name=$1 mode=$2 t0 t1 n
    t0=$(cpu_ns "${PID[$name]}")
    n=$(load "$mode" "${HTTP[$name]}")
    t1=$(cpu_ns "${PID[$name]}")
    ((n > 0)) || die "$(label "$name"): no request completed in a $mode slice"
    awk -v d=$((t1 - t0)) -v n="$n" 'BEGIN { printf "%.4f", d / 1e3 / n }'
}

cpu() {
    local p mode i x y ratios
    for p in $PATHS; do
        for mode in rate c64; do
            log "CPU per request: $(label "$p") and the C responder, $mode, $SLICES pairs of ${SLICE} s slices"
            load c64 "${HTTP[$p]}" >/dev/null
            load c64 "${HTTP[c]}" >/dev/null
            ratios=() RES[$p,$mode,node]="" RES[$p,$mode,c]=""
            for ((i = 1; i <= SLICES; i++)); do
                if ((i % 2)); then
                    x=$(slice "$p" "$mode"); y=$(slice c "$mode")
                else
                    y=$(slice c "$mode"); x=$(slice "$p" "$mode")
                fi
                ratios+=("$(awk -v x="$x" -v y="$y" 'BEGIN { printf "%.4f", x / y }')")
                RES[$p,$mode,node]+="${RES[$p,$mode,node]:+ }$x"
                RES[$p,$mode,c]+="${RES[$p,$mode,c]:+ }$y"
            done
            RES[$p,$mode,ratios]="${ratios[*]}"
            RES[$p,$mode,ratio]=$(printf '%s\n' "${ratios[@]}" | median)
        done
    done
}

us() { awk -v x="$1" 'BEGIN { printf "%.2f", x / 1000 }'; }
fmt3() { awk -v x="$1" 'BEGIN { printf "%.3f", x }'; }
med() { tr ' ' '\n' <<<"$1" | median; }
verdict() { awk -v x="$1" -v l="$2" 'BEGIN { print (x <= l ? "PASS" : "FAIL") }'; }
spread() { # "v1 v2 …" -> "min–max"
    tr ' ,' '\n\n' <<<"$1" | sort -g | awk -v s="${2:-1}" -v d="${3:-2}" \
        'NR == 1 { lo = $1 } { hi = $1 } END { printf "%.*f–%.*f", d, lo / s, d, hi / s }'
}

report() {
    local rev p key what size
    rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')
    git -C "$ROOT" diff --quiet HEAD -- crates 2>/dev/null || rev+=", crates/ modified"
    echo "# The transport floors, interleaved"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit $rev; kernel $(uname -r); $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | awk '{ print $1, $2 }')"
    echo "- every server running at once, pinned to CPU $SERVER_CPU (the node \`--io-threads 1\`, one process per path); netaccel-bench, fixed_rate and wrk pinned to CPU $CLIENT_CPU; loopback; scheduling: ${PRIO_CMD[*]:-default}; load average at start: $LOAD_START, at end: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "- latency: \`netaccel-bench pair\`, $CALLS calls to each of the two after $WARMUP_CALLS, alternating A B B A …, one in flight, $BLOCKS blocks; gap = median of the per-block gaps of the medians; keep-awake loops on both CPUs: $([[ ${KEEP_AWAKE:-1} == 1 ]] && echo yes || echo no)"
    echo "- CPU per request: schedstat run time of the server's threads ÷ requests completed, $SLICES pairs of ${SLICE} s slices alternating node and C responder; ratio = median of the pair ratios; fixed rate: \`fixed_rate\` $RATE req/s over $RATE_CONNS connections; c$CONNS: \`wrk -t1 -c$CONNS\`"
    echo
    echo "| path | comparison | node p50 µs | floor p50 µs | node p99 µs | floor p99 µs | gap (median of blocks) | blocks' gaps | limit | result |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"
    for p in $PATHS; do
        for key in "rac 64" "rac 4096" http upper; do
            case $key in
                "rac 64") what="RAC echo 64 B − C TCP echo" ;;
                "rac 4096") what="RAC echo 4 KiB − C TCP echo" ;;
                http) what="\`GET /health\` − C epoll responder" ;;
                upper) what="\`POST to_uppercase\` 64 B − the node's own \`/health\` (informative)" ;;
            esac
            local k="$p $key" g
            g=$(us "${RES[$k,gap_ns]}")
            echo "| $(label "$p") | $what | $(us "${RES[$k,a_p50_ns]}") | $(us "${RES[$k,b_p50_ns]}") | $(us "${RES[$k,a_p99_ns]}") | $(us "${RES[$k,b_p99_ns]}") | **${g} µs** | $(spread "${RES[$k,block_gaps_ns]}" 1000) | ≤ $GAP_MAX_US µs | $([[ $key == upper ]] && echo – || verdict "$g" "$GAP_MAX_US") |"
        done
    done
    echo
    echo "| path | load | node CPU µs/req (median of slices) | C responder | ratio (median of pairs) | pairs' ratios | limit | result |"
    echo "|---|---|---:|---:|---:|---:|---:|---|"
    for p in $PATHS; do
        for size in rate c64; do
            what="$RATE req/s over $RATE_CONNS"
            [[ $size == c64 ]] && what="$CONNS connections, at its fastest"
            echo "| $(label "$p") | $what | $(fmt3 "$(med "${RES[$p,$size,node]}")") | $(fmt3 "$(med "${RES[$p,$size,c]}")") | **$(fmt3 "${RES[$p,$size,ratio]}")** | $(spread "${RES[$p,$size,ratios]}" 1 3) | ≤ $CPU_RATIO_MAX | $(verdict "${RES[$p,$size,ratio]}" "$CPU_RATIO_MAX") |"
        done
    done
    echo
    echo "<details><summary>per block and per slice</summary>"
    echo
    for p in $PATHS; do
        for key in "rac 64" "rac 4096" http upper; do
            echo "- $(label "$p"), $key: block gaps ns ${RES[$p $key,block_gaps_ns]//,/, }"
        done
        for size in rate c64; do
            echo "- $(label "$p"), $size: node µs/req ${RES[$p,$size,node]}; C ${RES[$p,$size,c]}; ratios ${RES[$p,$size,ratios]}"
        done
    done
    echo
    echo "</details>"
}

main() {
    (($(nproc) >= 2)) || log "warning: fewer than 2 CPUs; servers and clients will share a core"
    command -v wrk >/dev/null || die "wrk is missing (Debian package wrk)"
    make -s -C "$ROOT/bench/common/c" tcp_echo http_responder fixed_rate >&2 || die "building bench/common/c failed"
    build_release_bins
    "$BENCH_BIN" pair --help >/dev/null 2>&1 || die "$BENCH_BIN has no pair command; rebuild it"
    choose_prio
    mkdir -p "$OUT_DIR"
    RUN_DIR="$OUT_DIR/floors-$(date +%Y%m%d-%H%M%S)"
    mkdir -p "$RUN_DIR"
    LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
    start_all
    latency
    cpu
    report >"$RUN_DIR/report.md"
    cat "$RUN_DIR/report.md"
    log "written to ${RUN_DIR#"$ROOT"/}/report.md"
    if [[ $STRICT == 1 ]] && grep -q '| FAIL |' "$RUN_DIR/report.md"; then
        exit 1
    fi
}

main "$@"
