#!/usr/bin/env bash
# HTTP front end benchmark: netaccel-node vs nginx vs a minimal C epoll
# responder (the bare-transport limit). Method and results: docs/benchmarks.md.
#
# Usage: bench/http/run.sh
#
# Every server runs pinned to one core (SERVER_CPU), the load generators to
# the other (CLIENT_CPU). Per server and round:
#   1. warm-up:      wrk -c64 for WARMUP s
#   2. latency:      wrk -t1 -c1 GET /health            -> p50, p99
#   3. (node only)   wrk -t1 -c1 POST /v1/fn/to_uppercase, 64-byte body -> p50, p99
#   4. throughput:   wrk -t1 -c64 GET /health           -> req/s, server CPU/request
#   5. fixed rate:   fixed_rate RATE req/s over RATE_CONNS connections
#                                                        -> server CPU/request
# Server CPU = the time the server's threads ran (the first field of
# /proc/PID/task/TID/schedstat, in ns, summed over its threads and those of its
# child processes, e.g. the nginx worker) before/after the run, divided by the
# requests completed in that run. (utime+stime of /proc/PID/stat is the same
# time in clock ticks: at 100 Hz a 2 s run at 20,000 req/s was ~40 ticks, so one
# tick moved the figure by 2.5 %.) "Of which user" is utime in ticks.
# Each figure is the median over ROUNDS rounds; the server order rotates
# between rounds. Comparisons with the C responder (issue 28: p50 gap, CPU
# ratio) are medians of the per-round gaps and ratios, each round's servers
# measured minutes apart rather than across the whole run.
#
# Environment (defaults in brackets):
#   DURATION [8]     seconds per measured run     WARMUP [1]   warm-up seconds
#   ROUNDS [3]       rounds (median reported)     RATE [20000] fixed-rate req/s
#   RATE_CONNS [16]  fixed-rate connections       CONNS [64]   wrk throughput connections
#   SERVER_CPU [0]   CLIENT_CPU [1]               SERVERS ["node nginx c"]; add
#                    "uring" for the node with --network io_uring and "tokio" for it
#                    with --network tokio (epoll through tokio's runtime), measured side
#                    by side with the default node ("node", its own epoll loop):
#                    SERVERS="node tokio uring nginx c"; "curing" adds the C responder's
#                    io_uring counterpart (bench/common/c/uring_responder.c, the same
#                    ring set-up as the node's io_uring path): what io_uring itself
#                    costs over epoll, beside what the node's io_uring path costs
#   NODE_PORT NGINX_PORT C_PORT [free ports, chosen at start]; NODE_RAC_PORT [free]:
#                    the node's RAC listener, unused here but bound all the same
#   NODE_BIN [target/release/netaccel-node]  (built with cargo if missing)
#   NODE_ARGS        extra arguments for the node
#   NODE_IO_THREADS [1]  passed as --io-threads if the node supports it
#   PRIO [auto]      scheduling of servers and load generators: rt (chrt -f 50,
#                    needs root; the kernel's RT throttling still leaves 5% of
#                    each core to other tasks), nice (nice -n -10), none.
#                    auto = rt as root, else none. On a machine shared with
#                    builds, only rt gives stable figures.
#   OUT_DIR [bench/out]  STRICT [0]: exit 1 if a floor fails
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH_NAME=http.sh
# shellcheck source=bench/common/lib.sh
source "$ROOT/bench/common/lib.sh"

DURATION=${DURATION:-8}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-3}
RATE=${RATE:-20000}
RATE_CONNS=${RATE_CONNS:-16}
CONNS=${CONNS:-64}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
SERVERS=${SERVERS:-"node nginx c"}
NODE_PORT=${NODE_PORT:-}
NODE_RAC_PORT=${NODE_RAC_PORT:-}
NGINX_PORT=${NGINX_PORT:-}
C_PORT=${C_PORT:-}
NODE_BIN_DEFAULT="$ROOT/target/release/netaccel-node"
NODE_BIN=${NODE_BIN:-$NODE_BIN_DEFAULT}
NODE_ARGS=${NODE_ARGS:-}
NODE_IO_THREADS=${NODE_IO_THREADS:-1}
OUT_DIR=${OUT_DIR:-$ROOT/bench/out}
STRICT=${STRICT:-0}
PRIO=${PRIO:-auto}
HOST=127.0.0.1
UPPER_PATH=/v1/fn/to_uppercase

# Floors (acceptance criteria).
FLOOR_P50_VS_C_US=1      # node /health p50 - C responder p50 <= 1 us
FLOOR_CPU_VS_NGINX=0.5   # node CPU/request / nginx CPU/request <= 0.5
FLOOR_UPPER_VS_HEALTH_US=2  # to_uppercase(64 B) p50 - /health p50 <= 2 us
FLOOR_URING_CPU_VS_NGINX=0.9  # io_uring node CPU/request at c$CONNS / nginx's <= 0.9
FLOOR_CPU_VS_C=1.05      # node CPU/request / C responder's, per-round median <= 1.05 (issue 28)

SCRATCH=""
CUR_PID=""
CLK_TCK=$(getconf CLK_TCK)
declare -A R=()        # results: R[server,metric,round]
declare -A SKIP=()     # servers skipped, with the reason
declare -a NODE_CMD=()
declare -a PRIO_CMD=()  # prefix for servers and load generators
LOAD_START=""


cleanup() {
    stop_server
    if [[ -n "$SCRATCH" && -d "$SCRATCH" ]]; then
        rm -rf -- "$SCRATCH"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

label() {
    case "$1" in
        node) echo "netaccel-node" ;;
        uring) echo "netaccel-node --network io_uring" ;;
        tokio) echo "netaccel-node --network tokio" ;;
        nginx) echo "nginx (Debian, 1 worker)" ;;
        c) echo "C epoll responder" ;;
        curing) echo "C io_uring responder" ;;
    esac
}

port_of() {
    case "$1" in
        node | uring | tokio) echo "$NODE_PORT" ;;
        nginx) echo "$NGINX_PORT" ;;
        c | curing) echo "$C_PORT" ;;
    esac
}

wants() { [[ " $SERVERS " == *" $1 "* ]]; }

# --- setup ------------------------------------------------------------------

install_tools() {
    local missing=()
    command -v wrk >/dev/null || missing+=(wrk)
    if wants nginx && ! command -v nginx >/dev/null && [[ ! -x /usr/sbin/nginx ]]; then
        missing+=(nginx-light)
    fi
    command -v curl >/dev/null || missing+=(curl)
    command -v make >/dev/null || missing+=(make)
    command -v gcc >/dev/null || missing+=(gcc)
    command -v taskset >/dev/null || missing+=(util-linux)
    command -v pgrep >/dev/null || missing+=(procps)
    if wants curing && [[ ! -e /usr/include/liburing.h ]]; then missing+=(liburing-dev); fi
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


nginx_bin() {
    if command -v nginx >/dev/null; then command -v nginx; else echo /usr/sbin/nginx; fi
}

build_c() {
    make -s -C "$ROOT/bench/common/c" >&2 || die "building bench/common/c failed"
    if wants curing; then
        make -s -C "$ROOT/bench/common/c" uring_responder >&2 || die "building bench/common/c/uring_responder failed"
    fi
}

prepare_node() {
    wants node || wants uring || wants tokio || return 0
    if [[ ! -x "$NODE_BIN" ]]; then
        if [[ "$NODE_BIN" == "$NODE_BIN_DEFAULT" ]] && command -v cargo >/dev/null; then
            log "node binary missing: cargo build --release -p netaccel-node"
            if ! (cd "$ROOT" && cargo build --release -p netaccel-node >&2); then
                SKIP[node]="cargo build --release -p netaccel-node failed"
                return 0
            fi
        fi
    fi
    if [[ ! -x "$NODE_BIN" ]]; then
        SKIP[node]="no node binary (looked for ${NODE_BIN#"$ROOT"/}; set NODE_BIN=path)"
        return 0
    fi
    local help
    help=$(timeout 5 "$NODE_BIN" --help 2>&1 || true)
    NODE_CMD=("$NODE_BIN" --http "$HOST:$NODE_PORT")
    if [[ "$help" == *--rac* ]]; then
        NODE_CMD+=(--rac "$HOST:$NODE_RAC_PORT")
    fi
    if [[ "$help" == *--io-threads* ]]; then
        NODE_CMD+=(--io-threads "$NODE_IO_THREADS")
    fi
    if [[ -n "$NODE_ARGS" ]]; then
        local extra
        read -ra extra <<<"$NODE_ARGS"
        NODE_CMD+=("${extra[@]}")
    fi
}

# --- servers ----------------------------------------------------------------

start_server() {
    local name=$1 port
    port=$(port_of "$name")
    local logf="$SCRATCH/$name.log"
    case "$name" in
        node)
            "${PRIO_CMD[@]}" taskset -c "$SERVER_CPU" "${NODE_CMD[@]}" >"$logf" 2>&1 &
            ;;
        uring)
            "${PRIO_CMD[@]}" taskset -c "$SERVER_CPU" "${NODE_CMD[@]}" --network io_uring >"$logf" 2>&1 &
            ;;
        tokio)
            "${PRIO_CMD[@]}" taskset -c "$SERVER_CPU" "${NODE_CMD[@]}" --network tokio >"$logf" 2>&1 &
            ;;
        nginx)
            local prefix="$SCRATCH/nginx"
            mkdir -p "$prefix/tmp"
            sed "s/@PORT@/$port/g" "$HERE/nginx-health.conf.template" >"$prefix/nginx.conf"
            "${PRIO_CMD[@]}" taskset -c "$SERVER_CPU" "$(nginx_bin)" -p "$prefix/" -c "$prefix/nginx.conf" \
                -g 'daemon off;' >"$logf" 2>&1 &
            ;;
        c)
            "${PRIO_CMD[@]}" taskset -c "$SERVER_CPU" "$ROOT/bench/common/c/http_responder" -a "$HOST" -p "$port" >"$logf" 2>&1 &
            ;;
        curing)
            "${PRIO_CMD[@]}" taskset -c "$SERVER_CPU" "$ROOT/bench/common/c/uring_responder" -a "$HOST" -p "$port" >"$logf" 2>&1 &
            ;;
    esac
    CUR_PID=$!
    local i
    for ((i = 0; i < 100; i++)); do
        if ! kill -0 "$CUR_PID" 2>/dev/null; then
            log "$(label "$name") exited at start-up (port $port$(port_holder "$port")):"
            tail -n 5 "$logf" >&2 || true
            CUR_PID=""
            return 1
        fi
        if [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "http://$HOST:$port/health" || true) == 200 ]]; then
            return 0
        fi
        sleep 0.1
    done
    log "$(label "$name") did not answer GET /health on port $port with 200 within 10 s; the end of its log:"
    tail -n 5 "$logf" >&2 || true
    stop_server
    return 1
}

stop_server() {
    [[ -n "$CUR_PID" ]] || return 0
    stop_process "$CUR_PID"
    CUR_PID=""
}

# Check the answers once, so a wrong server is not benchmarked.
check_answers() {
    local name=$1 port body ctype
    port=$(port_of "$name")
    body=$(curl -s --max-time 2 "http://$HOST:$port/health")
    ctype=$(curl -s -o /dev/null -w '%{content_type}' --max-time 2 "http://$HOST:$port/health")
    [[ "$body" == '{"status":"ok"}' ]] || log "warning: $(label "$name") /health body is '$body'"
    [[ "$ctype" == application/json* ]] || log "warning: $(label "$name") /health Content-Type is '$ctype'"
    if [[ "$name" == node || "$name" == uring || "$name" == tokio ]]; then
        local up
        up=$(curl -s --max-time 2 -H 'Content-Type: application/octet-stream' \
            --data-binary "$(printf 'abcdefghijklmnop%.0s' 1 2 3 4)" "http://$HOST:$port$UPPER_PATH" || true)
        if [[ "$up" != "$(printf 'ABCDEFGHIJKLMNOP%.0s' 1 2 3 4)" ]]; then
            log "warning: node $UPPER_PATH answered '${up:0:80}', skipping the POST measurement"
            return 1
        fi
    fi
    return 0
}

# utime+stime in clock ticks of a process (all its threads) and its children.
# With a second argument "user", utime only.
cpu_ticks() {
    local pid=$1 which=${2:-all} total=0 p stat rest
    local -a f
    for p in "$pid" $(pgrep -P "$pid" || true); do
        stat=$(cat "/proc/$p/stat" 2>/dev/null) || continue
        rest=${stat##*) }           # drop "pid (comm) "; comm may hold spaces
        read -ra f <<<"$rest"       # f[0] is field 3 (state)
        if [[ "$which" == user ]]; then
            total=$((total + f[11]))         # field 14 (utime)
        else
            total=$((total + f[11] + f[12])) # fields 14 (utime) and 15 (stime)
        fi
    done
    echo "$total"
}


# --- load generators ----------------------------------------------------------

# value of key=... in text
field() { grep -o "$1=[^ ]*" <<<"$2" | tail -n 1 | cut -d= -f2; }

run_wrk() { # conns script url; wrk's errors go to stderr, and a failure stops the script
    local conns=$1 script=$2 url=$3
    timeout $((DURATION + 30)) "${PRIO_CMD[@]}" taskset -c "$CLIENT_CPU" \
        wrk -t1 -c"$conns" -d"${DURATION}s" --timeout 2s --latency -s "$script" "$url" ||
        die "wrk -c$conns $url failed (exit status $?; its error is above)"
}

check_wrk_errors() { # name what output
    local e k
    for k in errors_connect errors_read errors_write errors_status errors_timeout; do
        e=$(field "$k" "$3")
        [[ "$e" == 0 ]] || log "warning: $(label "$1") $2: $k=$e"
    done
}

measure_server() { # name round
    local name=$1 round=$2 port url out t0 t1 reqs
    port=$(port_of "$name")
    url="http://$HOST:$port/health"

    if ! start_server "$name"; then
        SKIP[$name]="did not start or answer (see log above)"
        return 0
    fi
    local do_post=0
    if check_answers "$name" && [[ "$name" == node || "$name" == uring || "$name" == tokio ]]; then do_post=1; fi

    log "round $round: $(label "$name"): warm-up ${WARMUP}s"
    DURATION=$WARMUP run_wrk "$CONNS" "$ROOT/bench/common/wrk/report.lua" "$url" >/dev/null

    log "round $round: $(label "$name"): -c1 GET /health ${DURATION}s"
    out=$(run_wrk 1 "$ROOT/bench/common/wrk/report.lua" "$url")
    check_wrk_errors "$name" "c1 /health" "$out"
    R[$name,p50,$round]=$(field p50_us "$out")
    R[$name,p99,$round]=$(field p99_us "$out")
    R[$name,mean,$round]=$(field mean_us "$out")

    if ((do_post)); then
        log "round $round: $(label "$name"): -c1 POST $UPPER_PATH (64 B) ${DURATION}s"
        out=$(run_wrk 1 "$ROOT/bench/common/wrk/post64.lua" "http://$HOST:$port$UPPER_PATH")
        check_wrk_errors "$name" "c1 to_uppercase" "$out"
        R[$name,up50,$round]=$(field p50_us "$out")
        R[$name,up99,$round]=$(field p99_us "$out")
        R[$name,upmean,$round]=$(field mean_us "$out")
    fi

    log "round $round: $(label "$name"): -c$CONNS GET /health ${DURATION}s"
    t0=$(cpu_ns "$CUR_PID")
    out=$(run_wrk "$CONNS" "$ROOT/bench/common/wrk/report.lua" "$url")
    t1=$(cpu_ns "$CUR_PID")
    check_wrk_errors "$name" "c$CONNS /health" "$out"
    reqs=$(field requests "$out")
    R[$name,rps,$round]=$(field rps "$out")
    R[$name,cpu64,$round]=$(awk -v d=$((t1 - t0)) -v n="$reqs" \
        'BEGIN { printf "%.3f", (n > 0 ? d / 1e3 / n : 0) }')
    R[$name,util64,$round]=$(awk -v d=$((t1 - t0)) -v s="$DURATION" \
        'BEGIN { printf "%.0f", d / 1e9 / s * 100 }')

    log "round $round: $(label "$name"): fixed rate $RATE req/s over $RATE_CONNS connections ${DURATION}s"
    t0=$(cpu_ns "$CUR_PID")
    local u0 u1
    u0=$(cpu_ticks "$CUR_PID" user)
    out=$(timeout $((DURATION + 30)) "${PRIO_CMD[@]}" taskset -c "$CLIENT_CPU" "$ROOT/bench/common/c/fixed_rate" \
        -a "$HOST" -p "$port" -r "$RATE" -c "$RATE_CONNS" -d "$DURATION" -P /health) ||
        die "fixed_rate against $HOST:$port failed (exit status $?; its error is above)"
    t1=$(cpu_ns "$CUR_PID")
    u1=$(cpu_ticks "$CUR_PID" user)
    reqs=$(field completed "$out")
    R[$name,usrrate,$round]=$(awk -v d=$((u1 - u0)) -v hz="$CLK_TCK" -v n="$reqs" \
        'BEGIN { printf "%.3f", (n > 0 ? d / hz / n * 1e6 : 0) }')
    R[$name,cpurate,$round]=$(awk -v d=$((t1 - t0)) -v n="$reqs" \
        'BEGIN { printf "%.3f", (n > 0 ? d / 1e3 / n : 0) }')
    R[$name,utilrate,$round]=$(awk -v d=$((t1 - t0)) -v s="$DURATION" \
        'BEGIN { printf "%.0f", d / 1e9 / s * 100 }')
    R[$name,achieved,$round]=$(field achieved_rps "$out")
    R[$name,backlog,$round]=$(field max_backlog "$out")
    local errs
    errs=$(field errors "$out")
    [[ "$errs" == 0 ]] || log "warning: $(label "$name") fixed rate: $errs non-200 answers"

    stop_server
}

# --- report -------------------------------------------------------------------

# median of R[name,metric,1..ROUNDS] (empty if none)
median() {
    local name=$1 metric=$2 r
    local -a v=()
    for ((r = 1; r <= ROUNDS; r++)); do
        [[ -n "${R[$name,$metric,$r]:-}" ]] && v+=("${R[$name,$metric,$r]}")
    done
    ((${#v[@]})) || return 0
    printf '%s\n' "${v[@]}" | sort -g | awk '{ a[NR] = $1 }
        END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

# per-round OP of two servers' METRIC (OP: gap = a - b, ratio = a / b), one line
# per round in which both were measured
per_round() { # a b metric op
    local a=$1 b=$2 metric=$3 op=$4 r x y
    for ((r = 1; r <= ROUNDS; r++)); do
        x=${R[$a,$metric,$r]:-}; y=${R[$b,$metric,$r]:-}
        [[ -n "$x" && -n "$y" ]] || continue
        awk -v x="$x" -v y="$y" -v op="$op" \
            'BEGIN { if (op == "gap") print x - y; else if (y > 0) print x / y }'
    done
}

# median of per_round (empty if no round has both)
paired() { # a b metric op
    per_round "$@" | sort -g | awk '{ a[NR] = $1 }
        END { if (NR == 0) exit; if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

# all rounds of a metric, e.g. "25 / 26 / 25"
rounds_of() {
    local name=$1 metric=$2 r s=""
    for ((r = 1; r <= ROUNDS; r++)); do
        s+="${s:+ / }${R[$name,$metric,$r]:--}"
    done
    echo "$s"
}

fmt() { # number decimals -> formatted or "-"
    if [[ -z "$1" ]]; then echo "-"; else awk -v x="$1" -v d="$2" 'BEGIN { printf "%.*f", d, x }'; fi
}

verdict() { # value op limit -> PASS/FAIL ("-" when no value)
    [[ -n "$1" ]] || { echo "n/a"; return; }
    awk -v x="$1" -v l="$3" 'BEGIN { print (x <= l ? "PASS" : "FAIL") }'
}

report() {
    local s row p50 p99 rps c64 crate
    local rate_note="CPU µs/req @ $RATE req/s"
    echo "# HTTP front end: netaccel-node vs nginx vs C epoll responder"
    echo
    echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); kernel $(uname -r); $(nproc) CPUs: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
    echo "- servers pinned to CPU $SERVER_CPU, wrk and fixed_rate pinned to CPU $CLIENT_CPU; 127.0.0.1"
    echo "- scheduling: ${PRIO_CMD[*]:-default (PRIO=none)}; load average at start: $LOAD_START, at end: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "- $DURATION s per run, warm-up $WARMUP s, median of $ROUNDS rounds (server order rotated per round)"
    echo "- $($(nginx_bin) -v 2>&1 | sed 's/^nginx version: //'); $(wrk -v 2>&1 | head -n 1 | awk '{ print $1, $2 }')"
    if wants node && [[ -z "${SKIP[node]:-}" ]]; then
        echo "- node: \`${NODE_CMD[*]/#"$ROOT"\//}\` (commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD -- crates 2>/dev/null || echo ', crates/ modified'))"
    fi
    echo "- CPU/request = the time the server ran (schedstat of all its threads and child processes, in ns) ÷ requests completed in the same run; \"of which user\": utime in ticks / CLK_TCK=$CLK_TCK"
    echo "- comparisons with the C responder: medians of the per-round gaps and ratios (rounds in the details below)"
    echo
    echo "| server | /health p50 µs (c1) | p99 µs (c1) | mean µs (c1) | req/s (c$CONNS) | CPU µs/req (c$CONNS) | server CPU % (c$CONNS) | $rate_note | of which user | server CPU % @ $RATE |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for s in node tokio uring nginx c curing; do
        wants "$s" || continue
        if [[ -n "${SKIP[$s]:-}" && -z "$(median "$s" p50)" ]]; then
            echo "| $(label "$s") | pending: ${SKIP[$s]} | | | | | | | | |"
            continue
        fi
        p50=$(median "$s" p50); p99=$(median "$s" p99); rps=$(median "$s" rps)
        c64=$(median "$s" cpu64); crate=$(median "$s" cpurate)
        local sat=""
        if [[ -n "$(median "$s" achieved)" ]] &&
            awk -v a="$(median "$s" achieved)" -v r="$RATE" 'BEGIN { exit !(a < 0.98 * r) }'; then
            sat=" (rate not sustained: $(fmt "$(median "$s" achieved)" 0) req/s)"
        fi
        row="| $(label "$s") | $(fmt "$p50" 1) | $(fmt "$p99" 1) | $(fmt "$(median "$s" mean)" 2) | $(fmt "$rps" 0) | $(fmt "$c64" 2) | $(fmt "$(median "$s" util64)" 0) | $(fmt "$crate" 2)$sat | $(fmt "$(median "$s" usrrate)" 2) | $(fmt "$(median "$s" utilrate)" 0) |"
        echo "$row"
        if [[ ( "$s" == node || "$s" == uring || "$s" == tokio ) && -n "$(median "$s" up50)" ]]; then
            echo "| $(label "$s") POST to_uppercase 64 B | $(fmt "$(median "$s" up50)" 1) | $(fmt "$(median "$s" up99)" 1) | $(fmt "$(median "$s" upmean)" 2) | | | | | | |"
        fi
    done
    echo

    local d_c="" r_ng="" r_ng64="" d_up=""
    local np50 cp50 ncpu gcpu ncpu64 gcpu64 up50
    np50=$(median node p50); cp50=$(median c p50)
    ncpu=$(median node cpurate); gcpu=$(median nginx cpurate)
    ncpu64=$(median node cpu64); gcpu64=$(median nginx cpu64)
    up50=$(median node up50)
    d_c=$(paired node c p50 gap)
    [[ -n "$ncpu" && -n "$gcpu" ]] && r_ng=$(awk -v a="$ncpu" -v b="$gcpu" 'BEGIN { if (b > 0) print a / b }')
    [[ -n "$ncpu64" && -n "$gcpu64" ]] && r_ng64=$(awk -v a="$ncpu64" -v b="$gcpu64" 'BEGIN { if (b > 0) print a / b }')
    [[ -n "$up50" && -n "$np50" ]] && d_up=$(awk -v a="$up50" -v b="$np50" 'BEGIN { print a - b }')

    echo "| floor | measured | limit | result |"
    echo "|---|---:|---:|---|"
    echo "| /health p50: node − C responder (median of per-round gaps) | $(fmt "$d_c" 1) µs | ≤ $FLOOR_P50_VS_C_US µs | $(verdict "$d_c" le "$FLOOR_P50_VS_C_US") |"
    local s2 r64 rrate note
    for s2 in node uring tokio; do
        wants "$s2" && wants c || continue
        # The tokio path is kept to compare with: its ratio informs, the floor is the
        # default's and io_uring's (issue 28).
        note=""; [[ "$s2" == tokio ]] && note="; informative"
        r64=$(paired "$s2" c cpu64 ratio); rrate=$(paired "$s2" c cpurate ratio)
        echo "| CPU/request at c$CONNS: $(label "$s2") ÷ C responder (median of per-round ratios$note) | $(fmt "$r64" 3) | ≤ $FLOOR_CPU_VS_C | $(verdict "$r64" le "$FLOOR_CPU_VS_C") |"
        echo "| CPU/request at $RATE req/s: $(label "$s2") ÷ C responder (median of per-round ratios$note) | $(fmt "$rrate" 3) | ≤ $FLOOR_CPU_VS_C | $(verdict "$rrate" le "$FLOOR_CPU_VS_C") |"
    done
    echo "| CPU/request: node ÷ nginx, both at $RATE req/s | $(fmt "$r_ng" 2) | ≤ $FLOOR_CPU_VS_NGINX | $(verdict "$r_ng" le "$FLOOR_CPU_VS_NGINX") |"
    echo "| CPU/request: node ÷ nginx, both at c$CONNS (each at its own max rate; informative) | $(fmt "$r_ng64" 2) | ≤ $FLOOR_CPU_VS_NGINX | $(verdict "$r_ng64" le "$FLOOR_CPU_VS_NGINX") |"
    echo "| to_uppercase (64 B) p50 − /health p50, node | $(fmt "$d_up" 1) µs | ≤ $FLOOR_UPPER_VS_HEALTH_US µs | $(verdict "$d_up" le "$FLOOR_UPPER_VS_HEALTH_US") |"
    if wants curing && wants c; then
        # io_uring's own cost over epoll's on this kernel, and the node's io_uring path
        # over that floor (issue 28: the floor of the io_uring path).
        local cu64 curate
        cu64=$(paired curing c cpu64 ratio); curate=$(paired curing c cpurate ratio)
        echo "| CPU/request at c$CONNS: C io_uring responder ÷ C responder (median of per-round ratios; informative: io_uring's own cost) | $(fmt "$cu64" 3) | – | – |"
        echo "| CPU/request at $RATE req/s: C io_uring responder ÷ C responder (median of per-round ratios; informative) | $(fmt "$curate" 3) | – | – |"
        if wants uring; then
            cu64=$(paired uring curing cpu64 ratio); curate=$(paired uring curing cpurate ratio)
            echo "| CPU/request at c$CONNS: $(label uring) ÷ C io_uring responder (median of per-round ratios; informative) | $(fmt "$cu64" 3) | ≤ $FLOOR_CPU_VS_C | $(verdict "$cu64" le "$FLOOR_CPU_VS_C") |"
            echo "| CPU/request at $RATE req/s: $(label uring) ÷ C io_uring responder (median of per-round ratios; informative) | $(fmt "$curate" 3) | ≤ $FLOOR_CPU_VS_C | $(verdict "$curate" le "$FLOOR_CPU_VS_C") |"
        fi
    fi
    if wants uring; then
        # The io_uring path (issue 15 item 5), against nginx and against the epoll node
        # measured in the same run.
        local u64 u_ng64="" u_n64="" u_ngrate="" d_p50=""
        u64=$(median uring cpu64)
        [[ -n "$u64" && -n "$gcpu64" ]] && u_ng64=$(awk -v a="$u64" -v b="$gcpu64" 'BEGIN { if (b > 0) print a / b }')
        [[ -n "$u64" && -n "$ncpu64" ]] && u_n64=$(awk -v a="$u64" -v b="$ncpu64" 'BEGIN { if (b > 0) print a / b }')
        [[ -n "$(median uring cpurate)" && -n "$gcpu" ]] && u_ngrate=$(awk -v a="$(median uring cpurate)" -v b="$gcpu" 'BEGIN { if (b > 0) print a / b }')
        [[ -n "$(median uring p50)" && -n "$np50" ]] && d_p50=$(awk -v a="$(median uring p50)" -v b="$np50" 'BEGIN { print a - b }')
        echo "| CPU/request: io_uring node ÷ nginx at c$CONNS | $(fmt "$u_ng64" 2) | ≤ $FLOOR_URING_CPU_VS_NGINX | $(verdict "$u_ng64" le "$FLOOR_URING_CPU_VS_NGINX") |"
        echo "| CPU/request: io_uring node ÷ nginx at $RATE req/s (informative) | $(fmt "$u_ngrate" 2) | ≤ $FLOOR_URING_CPU_VS_NGINX | $(verdict "$u_ngrate" le "$FLOOR_URING_CPU_VS_NGINX") |"
        echo "| CPU/request: io_uring node ÷ epoll node at c$CONNS (informative) | $(fmt "$u_n64" 2) | < 1 | $(verdict "$u_n64" le 1) |"
        echo "| /health p50 at c1: io_uring node − epoll node | $(fmt "$d_p50" 1) µs | ≤ 0 µs | $(verdict "$d_p50" le 0) |"
    fi
    echo
    for s in "${!SKIP[@]}"; do
        echo "- $(label "$s") skipped: ${SKIP[$s]}"
    done
    echo
    echo "<details><summary>per-round values</summary>"
    echo
    echo "| server | metric | rounds 1..$ROUNDS |"
    echo "|---|---|---|"
    local m
    for s in node tokio uring nginx c curing; do
        wants "$s" || continue
        for m in p50 p99 up50 up99 rps cpu64 cpurate usrrate achieved backlog; do
            [[ -n "$(median "$s" "$m")" ]] || continue
            echo "| $(label "$s") | $m | $(rounds_of "$s" "$m") |"
        done
    done
    # The per-round comparisons behind the floors.
    local what op sign
    for s in node uring tokio curing; do
        wants "$s" && wants c || continue
        for what in "p50 gap" "cpu64 ratio" "cpurate ratio"; do
            read -r m op <<<"$what"
            sign="÷"; [[ "$op" == gap ]] && sign="−"
            echo "| $(label "$s") $sign C responder | $m $op | $(per_round "$s" c "$m" "$op" | awk '{ printf "%s%.3f", (NR > 1 ? " / " : ""), $1 }') |"
        done
    done
    echo
    echo "</details>"
}

floors_failed() {
    grep -q '| FAIL |' "$1"
}

# --- main ---------------------------------------------------------------------

main() {
    (($(nproc) >= 2)) || log "warning: fewer than 2 CPUs; server and client will share a core"
    install_tools
    pick_ports NODE_PORT NODE_RAC_PORT NGINX_PORT C_PORT
    build_c
    prepare_node
    [[ -n "${SKIP[node]:-}" ]] && wants uring && SKIP[uring]=${SKIP[node]}
    [[ -n "${SKIP[node]:-}" ]] && wants tokio && SKIP[tokio]=${SKIP[node]}
    choose_prio
    LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
    SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/netaccel-bench.XXXXXX")

    local -a order=()
    local s
    for s in $SERVERS; do
        [[ -n "${SKIP[$s]:-}" ]] && { log "skipping $(label "$s"): ${SKIP[$s]}"; continue; }
        order+=("$s")
    done
    ((${#order[@]})) || die "no server to measure"

    local round i n=${#order[@]}
    for ((round = 1; round <= ROUNDS; round++)); do
        for ((i = 0; i < n; i++)); do
            s=${order[$(((i + round - 1) % n))]}
            [[ -n "${SKIP[$s]:-}" ]] && continue
            measure_server "$s" "$round"
        done
    done

    mkdir -p "$OUT_DIR"
    local out
    out="$OUT_DIR/http-$(date +%Y%m%d-%H%M%S).md"
    report >"$out"
    cat "$out"
    log "written to ${out#"$ROOT"/}"
    if [[ "$STRICT" == 1 ]] && floors_failed "$out"; then
        exit 1
    fi
}

main "$@"
