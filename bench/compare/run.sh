#!/usr/bin/env bash
# Deployment comparison for to_uppercase (64 B and 4 KiB payloads), measured with
# netaccel-bench, in the manner of Cooke & Fahmy's Table I (median, p90, p99, p99.9)
# plus throughput:
#
#   netaccel HTTP   the node's HTTP front end           POST /v1/fn/to_uppercase
#   netaccel RAC    the node's RAC v1 listener          rac://…/to_uppercase
#   hybrid          nginx reverse proxy (upstream keep-alive) in front of a separate
#                   backend process doing to_uppercase (bench/compare/backend/uppercase_backend.c)
#   hybrid, nginx   the same nginx and backend, proxying with nginx's defaults (a new
#   defaults        HTTP/1.0 upstream connection per request)
#   nginx /health   nginx answering by itself (no body)
#   TCP echo        bench/common/c/tcp_echo: the transport floor
#   in-process      Catalog::builtin().by_name("to_uppercase").run(…) in a loop, no
#                   network: the compute floor
#
# Each scenario is measured twice per size: closed loop over 1 connection with 1
# call in flight (latency), and closed loop over CONNS connections (throughput); all
# of it ROUNDS times, and every figure in the table is the median over the rounds.
# Servers (all their processes) are pinned to SERVER_CPU, netaccel-bench to
# CLIENT_CPU. Writes bench/out/compare-DATE.md, its JSON reports and a CDF figure,
# and (UPDATE_DOCS=1, the default) the generated block of docs/benchmarks.md and
# docs/img/compare-cdf.svg. 24 runs of WARMUP + DURATION s per round: about five
# minutes with the defaults once the binaries are built.
#
# Usage: bench/compare/run.sh
#
# Environment (defaults in brackets):
#   DURATION [3]  WARMUP [0.5]  ROUNDS [3]  CONNS [16]  SIZES ["64 4096"]
#   SERVER_CPU [0]  CLIENT_CPU [1]  PRIO [auto]: rt (chrt -f 50, root), nice, none
#   NODE_BIN [target/release/netaccel-node]  BENCH_BIN [target/release/netaccel-bench]
#     (both built with cargo when missing)
#   NODE_PORT RAC_PORT NGINX_PORT BACKEND_PORT ECHO_PORT [free ports, chosen at start]
#   OUT_DIR [bench/out]  UPDATE_DOCS [1]  STRICT [0]: exit 1 if a check fails
#   KEEP_AWAKE [1]: a SCHED_IDLE busy loop on both CPUs (see awake_start in lib.sh)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH_NAME=compare.sh
# shellcheck source=bench/common/lib.sh
source "$ROOT/bench/common/lib.sh"

DURATION=${DURATION:-3}
WARMUP=${WARMUP:-0.5}
ROUNDS=${ROUNDS:-3}
ROUND=1
CONNS=${CONNS:-16}
SIZES=${SIZES:-"64 4096"}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
PRIO=${PRIO:-auto}
NODE_BIN=${NODE_BIN:-$ROOT/target/release/netaccel-node}
BENCH_BIN=${BENCH_BIN:-$ROOT/target/release/netaccel-bench}
NODE_PORT=${NODE_PORT:-}
RAC_PORT=${RAC_PORT:-}
NGINX_PORT=${NGINX_PORT:-}
BACKEND_PORT=${BACKEND_PORT:-}
ECHO_PORT=${ECHO_PORT:-}
OUT_DIR=${OUT_DIR:-$ROOT/bench/out}
UPDATE_DOCS=${UPDATE_DOCS:-1}
STRICT=${STRICT:-0}
HOST=127.0.0.1
STAMP=$(date +%Y%m%d-%H%M%S)
RUN_DIR="$OUT_DIR/compare-$STAMP"
T_START=$(date +%s)

SCRATCH=""
declare -a PIDS=()
declare -a PRIO_CMD=()
declare -a PENDING=()
NODE_HAS_RAC=0
RUNS=0


stop_servers() {
    local p
    for p in "${PIDS[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    for p in "${PIDS[@]}"; do
        wait "$p" 2>/dev/null || true
    done
    PIDS=()
}

cleanup() {
    awake_stop
    stop_servers
    if [[ -n "$SCRATCH" && -d "$SCRATCH" ]]; then rm -rf -- "$SCRATCH"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

install_tools() {
    local missing=()
    command -v nginx >/dev/null || [[ -x /usr/sbin/nginx ]] || missing+=(nginx-light)
    command -v wrk >/dev/null || missing+=(wrk)
    command -v curl >/dev/null || missing+=(curl)
    command -v make >/dev/null || missing+=(make)
    command -v gcc >/dev/null || missing+=(gcc)
    command -v taskset >/dev/null || missing+=(util-linux)
    ((${#missing[@]} == 0)) && return 0
    log "installing: ${missing[*]}"
    local sudo=()
    if [[ $(id -u) -ne 0 ]]; then
        command -v sudo >/dev/null || die "need root or sudo to install ${missing[*]}"
        sudo=(sudo)
    fi
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
}

nginx_bin() { if command -v nginx >/dev/null; then command -v nginx; else echo /usr/sbin/nginx; fi; }


build() {
    make -s -C "$ROOT/bench/common/c" tcp_echo >&2 || die "building bench/common/c failed"
    make -s -C "$HERE/backend" >&2 || die "building bench/compare/backend failed"
    build_release_bins
    [[ -x "$BENCH_BIN" ]] || die "no netaccel-bench at $BENCH_BIN"
}

# Starts a server pinned to SERVER_CPU; remembers its pid.
start() {
    taskset -c "$SERVER_CPU" "${PRIO_CMD[@]}" "$@" >>"$SCRATCH/servers.log" 2>&1 &
    PIDS+=($!)
}

wait_http() { # url
    local i
    for ((i = 0; i < 50; i++)); do
        curl -fsS -o /dev/null "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}


# bench LABEL SIZE CONNS TARGET [extra args]: one run, JSON into RUN_DIR.
bench() {
    local label=$1 size=$2 conns=$3 target=$4
    shift 4
    local file
    RUNS=$((RUNS + 1))
    file="$RUN_DIR/$(printf '%02d' "$RUNS")-$(tr -c 'A-Za-z0-9_.-' '_' <<<"$label-$size-c$conns").json"
    log "round $ROUND: $label, $size B, $conns conn(s): ${DURATION}s"
    if ! timeout $((${WARMUP%.*} + DURATION + 30)) "${PRIO_CMD[@]}" taskset -c "$CLIENT_CPU" "$BENCH_BIN" run "$target" \
        --size "$size" --conns "$conns" --duration "$DURATION" --warmup "$WARMUP" \
        --label "$label ($conns conn) r$ROUND" --note "server on CPU $SERVER_CPU" --json "$file" --quiet "$@" >&2; then
        log "warning: $label ($size B, c$conns) failed"
        PENDING+=("$label, $size B, c$conns, round $ROUND: run failed")
    fi
}

scenario_node() {
    local help
    help=$(timeout 5 "$NODE_BIN" --help 2>&1 || true)
    local -a cmd=("$NODE_BIN" --http "$HOST:$NODE_PORT" --io-threads 1)
    if [[ "$help" == *--rac* ]]; then
        cmd+=(--rac "$HOST:$RAC_PORT")
        NODE_HAS_RAC=1
    fi
    start "${cmd[@]}" --log-level warn
    if ! server_up netaccel-node "${PIDS[-1]}" "$NODE_PORT" "$SCRATCH/servers.log" ||
        ! wait_http "http://$HOST:$NODE_PORT/health"; then
        PENDING+=("netaccel node: did not start or answer /health on port $NODE_PORT (see the log above)")
        stop_servers
        return
    fi
    local answer
    answer=$(curl -fsS --data-binary 'abc' "http://$HOST:$NODE_PORT/v1/fn/to_uppercase" || true)
    [[ "$answer" == ABC ]] || log "warning: node to_uppercase answered '$answer'"
    local size
    for size in $SIZES; do
        bench "netaccel HTTP" "$size" 1 "http://$HOST:$NODE_PORT/v1/fn/to_uppercase"
        bench "netaccel HTTP" "$size" "$CONNS" "http://$HOST:$NODE_PORT/v1/fn/to_uppercase"
        if ((NODE_HAS_RAC)) && wait_port "$RAC_PORT"; then
            bench "netaccel RAC" "$size" 1 "rac://$HOST:$RAC_PORT/to_uppercase"
            bench "netaccel RAC" "$size" "$CONNS" "rac://$HOST:$RAC_PORT/to_uppercase"
        fi
    done
    ((NODE_HAS_RAC)) || PENDING+=("netaccel RAC: pending, this node build has no --rac listener")
    stop_servers
}

scenario_hybrid() {
    local prefix="$SCRATCH/nginx"
    mkdir -p "$prefix/tmp"
    sed -e "s/@PORT@/$NGINX_PORT/g" -e "s/@BACKEND_PORT@/$BACKEND_PORT/g" \
        "$HERE/backend/nginx-hybrid.conf.template" >"$prefix/nginx.conf"
    start "$HERE/backend/uppercase_backend" -a "$HOST" -p "$BACKEND_PORT"
    local backend_pid=${PIDS[-1]}
    start "$(nginx_bin)" -p "$prefix" -c "$prefix/nginx.conf" -g 'daemon off;'
    if ! server_up "the hybrid's backend" "$backend_pid" "$BACKEND_PORT" "$SCRATCH/servers.log" ||
        ! server_up nginx "${PIDS[-1]}" "$NGINX_PORT" "$SCRATCH/servers.log" ||
        ! wait_http "http://$HOST:$NGINX_PORT/health" || ! wait_http "http://$HOST:$BACKEND_PORT/health"; then
        [[ ! -s "$prefix/error.log" ]] || { log "nginx's error.log:"; tail -n 5 "$prefix/error.log" >&2; }
        PENDING+=("hybrid: nginx or the backend did not start (see the log above)")
        stop_servers
        return
    fi
    local answer size
    answer=$(curl -fsS --data-binary 'abc' "http://$HOST:$NGINX_PORT/v1/fn/to_uppercase" || true)
    [[ "$answer" == ABC ]] || log "warning: hybrid to_uppercase answered '$answer'"
    answer=$(curl -fsS --data-binary 'abc' "http://$HOST:$NGINX_PORT/plain/v1/fn/to_uppercase" || true)
    [[ "$answer" == ABC ]] || log "warning: hybrid (nginx defaults) to_uppercase answered '$answer'"
    for size in $SIZES; do
        bench "hybrid nginx+backend" "$size" 1 "http://$HOST:$NGINX_PORT/v1/fn/to_uppercase" --method post
        bench "hybrid nginx+backend" "$size" "$CONNS" "http://$HOST:$NGINX_PORT/v1/fn/to_uppercase" --method post
        bench "hybrid, nginx defaults" "$size" 1 "http://$HOST:$NGINX_PORT/plain/v1/fn/to_uppercase" --method post
        bench "hybrid, nginx defaults" "$size" "$CONNS" "http://$HOST:$NGINX_PORT/plain/v1/fn/to_uppercase" --method post
    done
    bench "nginx /health" 0 1 "http://$HOST:$NGINX_PORT/health"
    bench "nginx /health" 0 "$CONNS" "http://$HOST:$NGINX_PORT/health"
    stop_servers
}

scenario_floors() {
    local size
    start "$ROOT/bench/common/c/tcp_echo" -a "$HOST" -p "$ECHO_PORT"
    if server_up tcp_echo "${PIDS[-1]}" "$ECHO_PORT" "$SCRATCH/servers.log"; then
        for size in $SIZES; do
            bench "TCP echo (C)" "$size" 1 "tcp-echo://$HOST:$ECHO_PORT"
            bench "TCP echo (C)" "$size" "$CONNS" "tcp-echo://$HOST:$ECHO_PORT"
        done
    else
        PENDING+=("TCP echo: did not start")
    fi
    stop_servers
    for size in $SIZES; do
        bench "in-process kernel" "$size" 1 "inproc://to_uppercase"
    done
}

# p50_ns / calls_per_s of a label from the TSV
tsv_field() { awk -F'\t' -v l="$1" -v f="$2" '$1 == l { print $f }' "$RUN_DIR/summary.tsv"; }

checks() {
    local small=${SIZES%% *} hybrid np hp nt ht
    echo "| check ($small B to_uppercase) | measured | limit | result |"
    echo "|---|---:|---:|---|"
    for hybrid in "hybrid nginx+backend" "hybrid, nginx defaults"; do
        np=$(tsv_field "netaccel HTTP (1 conn)" 2 | head -n 1)
        hp=$(tsv_field "$hybrid (1 conn)" 2 | head -n 1)
        nt=$(tsv_field "netaccel HTTP ($CONNS conn)" 4 | head -n 1)
        ht=$(tsv_field "$hybrid ($CONNS conn)" 4 | head -n 1)
        if [[ -n "$np" && -n "$hp" ]]; then
            awk -v a="$np" -v b="$hp" -v h="$hybrid" 'BEGIN { r = a / b; printf "| netaccel HTTP p50 ÷ %s p50 (1 conn) | %.2f | < 0.33 | %s |\n", h, r, (r < 1 / 3 ? "PASS" : "FAIL") }'
        else
            echo "| netaccel HTTP p50 ÷ $hybrid p50 (1 conn) | - | < 0.33 | n/a |"
        fi
        if [[ -n "$nt" && -n "$ht" ]]; then
            awk -v a="$nt" -v b="$ht" -v h="$hybrid" -v c="$CONNS" 'BEGIN { r = a / b; printf "| netaccel HTTP calls/s ÷ %s calls/s (%s conns) | %.2f | ≥ 3 | %s |\n", h, c, r, (r >= 3 ? "PASS" : "FAIL") }'
        else
            echo "| netaccel HTTP calls/s ÷ $hybrid calls/s ($CONNS conns) | - | ≥ 3 | n/a |"
        fi
    done
}

report() {
    local files=("$RUN_DIR"/*.json)
    "$BENCH_BIN" report --rounds "${files[@]}" --markdown "$RUN_DIR/table.md" --tsv "$RUN_DIR/summary.tsv" \
        --cdf "$RUN_DIR/cdf.svg" --cdf-only "(1 conn)" \
        --title "to_uppercase latency CDF, 1 connection, 1 call in flight (server CPU $SERVER_CPU, client CPU $CLIENT_CPU)"
    local rev
    rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')
    git -C "$ROOT" diff --quiet HEAD -- crates 2>/dev/null || rev+=", crates/ modified"
    echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC'), \`bench/compare/run.sh\` (DURATION=$DURATION s per run after $WARMUP s warm-up, CONNS=$CONNS, ROUNDS=$ROUNDS: every figure is the median over the rounds), commit $rev."
    echo
    echo "- machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')), a virtual machine shared with other work (noisy); load average at start $LOAD_START, at end $(cut -d' ' -f1-3 /proc/loadavg); kernel $(uname -r)"
    echo "- core split: every server process (the node with \`--io-threads 1\`; nginx's master and worker *and* the backend; the echo server) pinned to CPU $SERVER_CPU; netaccel-bench (one load thread) pinned to CPU $CLIENT_CPU; in-process runs on CPU $CLIENT_CPU; loopback; scheduling: ${PRIO_CMD[*]:-default}; CPUs kept awake by a SCHED_IDLE busy loop: $([[ ${KEEP_AWAKE:-1} == 1 ]] && echo yes || echo no)"
    echo "- $($(nginx_bin) -v 2>&1 | sed 's/^nginx version: //'), 1 worker, upstream keepalive 64, and nginx's default proxying under \`/plain/\` (\`bench/compare/backend/nginx-hybrid.conf.template\`); backend \`bench/compare/backend/uppercase_backend.c\`"
    echo "- rows \"(1 conn)\": 1 connection, 1 call in flight, closed loop (latency); rows \"($CONNS conn)\": $CONNS connections, 1 call in flight each, closed loop (throughput). MB/s counts request and answer payloads. The CDF figure shows the 1-connection rows."
    echo
    cat "$RUN_DIR/table.md"
    echo
    checks
    local p
    for p in "${PENDING[@]}"; do
        echo
        echo "- $p"
    done
}

update_docs() {
    mkdir -p "$ROOT/docs/img"
    cp "$RUN_DIR/cdf.svg" "$ROOT/docs/img/compare-cdf.svg"
    replace_docs_block compare.sh "$1" || return 0
    log "updated docs/benchmarks.md and docs/img/compare-cdf.svg"
}

main() {
    (($(nproc) >= 2)) || log "warning: fewer than 2 CPUs; server and client share a core"
    install_tools
    pick_ports NODE_PORT RAC_PORT NGINX_PORT BACKEND_PORT ECHO_PORT
    build
    choose_prio
    LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
    SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/netaccel-compare.XXXXXX")
    mkdir -p "$RUN_DIR"
    T_START=$(date +%s)
    # Both CPUs kept from halting between calls (KEEP_AWAKE, see awake_start in lib.sh):
    # the 1-connection runs would otherwise measure the hypervisor's wake-ups, which
    # weigh on every hop of a deployment.
    awake_start "$SERVER_CPU,$CLIENT_CPU"
    for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
        scenario_node
        scenario_hybrid
        scenario_floors
    done
    awake_stop
    local out="$OUT_DIR/compare-$STAMP.md"
    report >"$out"
    cat "$out"
    log "measured in $(($(date +%s) - T_START)) s; written to ${out#"$ROOT"/} (JSON and cdf.svg in ${RUN_DIR#"$ROOT"/})"
    if [[ "$UPDATE_DOCS" == 1 ]]; then update_docs "$out"; fi
    if [[ "$STRICT" == 1 ]] && grep -q '| FAIL |' "$out"; then exit 1; fi
}

main "$@"
