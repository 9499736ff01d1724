#!/usr/bin/env bash
# What tokio's per-event machinery costs a small call, and what an event loop of our
# own would (issue 28). One TCP echo (64 B calls over one connection) served three
# ways: bench/common/c/tcp_echo (the floor), evloop-echo on tokio's current-thread
# runtime (the node's network threads' runtime, with the node's connection pattern and
# lazy idle timer) and evloop-echo on a minimal epoll loop of its own (src/own.rs: a
# task slab, a queue of woken tasks, wakers carrying a task's index, idle deadlines
# swept once a second from a coarse clock read per loop turn).
#
#   1. Instructions (callgrind, user space only; counts that do not move with the
#      machine's load): per call at 1 in flight and at INFLIGHT in flight.
#   2. Times, ROUNDS rounds (0: skip): per server and round, CALLS calls at 1 in flight
#      (p50; SCHED_IDLE loops keep both CPUs awake, as in bench/rac) and at INFLIGHT in
#      flight (calls/s), with the server's CPU per call (its thread's schedstat, ns);
#      medians over rounds, and per-round ratios to the C echo, median.
#
# Servers on SERVER_CPU [0], netaccel-bench on CLIENT_CPU [1].
# Environment (defaults in brackets): SIZE [64]  CALLS [20000]  INFLIGHT [32]
#   ROUNDS [5]  IDLE_MS [60000]: evloop-echo's idle timeout (0: none)
#   BENCH_BIN [target/release/netaccel-bench]  PRIO [auto]  KEEP_AWAKE [1]
#   OUT_DIR [bench/out]
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH_NAME=evloop.sh
HOST=127.0.0.1
# shellcheck source=bench/common/lib.sh
source "$ROOT/bench/common/lib.sh"

SIZE=${SIZE:-64}
CALLS=${CALLS:-20000}
INFLIGHT=${INFLIGHT:-32}
ROUNDS=${ROUNDS:-5}
IDLE_MS=${IDLE_MS:-60000}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
PRIO=${PRIO:-auto}
OUT_DIR=${OUT_DIR:-$ROOT/bench/out}
BENCH_BIN=${BENCH_BIN:-$ROOT/target/release/netaccel-bench}
ECHO_BIN="$HERE/target/release/evloop-echo"
SERVERS=(c tokio own)
RUN_DIR="$OUT_DIR/evloop-$(date -u +%Y%m%dT%H%M%SZ)"
declare -A PID=() PORT=() R=()

label() {
    case "$1" in
        c) echo "C tcp_echo (epoll)" ;;
        tokio) echo "evloop-echo tokio" ;;
        own) echo "evloop-echo own loop" ;;
    esac
}

command_of() { # server port
    case "$1" in
        c) echo "$ROOT/bench/common/c/tcp_echo -a $HOST -p $2" ;;
        *) echo "$ECHO_BIN $1 $HOST:$2 --idle-ms $IDLE_MS" ;;
    esac
}

calls() { # port n inflight [json]
    "$BENCH_BIN" run "tcp-echo://$HOST:$1" --size "$SIZE" --conns 1 --inflight "$3" --calls "$2" \
        --warmup 0 --quiet ${4:+--json "$4"} >/dev/null 2>>"$RUN_DIR/bench.log"
}

one() { # port n inflight json: calls pinned to CLIENT_CPU, at the scripts' priority
    taskset -c "$CLIENT_CPU" "${PRIO_CMD[@]}" "$BENCH_BIN" run "tcp-echo://$HOST:$1" --size "$SIZE" \
        --conns 1 --inflight "$3" --calls "$2" --warmup 0 --quiet ${4:+--json "$4"} \
        >/dev/null 2>>"$RUN_DIR/bench.log"
}

stop_all() {
    local s
    for s in "${!PID[@]}"; do kill "${PID[$s]}" 2>/dev/null || true; wait "${PID[$s]}" 2>/dev/null || true; done
    PID=()
}
trap 'awake_stop; stop_all' EXIT
trap 'exit 130' INT TERM

build() {
    make -s -C "$ROOT/bench/common/c" tcp_echo >&2 || die "building bench/common/c failed"
    (cd "$HERE" && cargo build --release --quiet) || die "building evloop-echo failed"
    [[ -x "$BENCH_BIN" ]] || (cd "$ROOT" && cargo build --release -p netaccel-bench >&2) || die "building netaccel-bench failed"
}

# Part 1: instructions per call under callgrind, one server at a time.
instructions() {
    command -v valgrind >/dev/null || die "valgrind is missing (Debian package valgrind)"
    echo "| server | user-space instructions per call, 1 in flight | $INFLIGHT in flight |"
    echo "|---|---:|---:|"
    local s port pid inflight row file ir
    for s in "${SERVERS[@]}"; do
        pick_ports port
        row="| $(label "$s") |"
        for inflight in 1 "$INFLIGHT"; do
            # shellcheck disable=SC2046 # the command's words
            valgrind --tool=callgrind --callgrind-out-file="$RUN_DIR/$s-P$inflight.%p" $(command_of "$s" "$port") \
                >"$RUN_DIR/$s-P$inflight.log" 2>&1 &
            pid=$!
            server_up "$s" "$pid" "$port" "$RUN_DIR/$s-P$inflight.log" || die "$s did not come up under callgrind"
            calls "$port" 2000 "$inflight" || die "warm-up calls to $s failed (see $RUN_DIR/bench.log)"
            callgrind_control -z "$pid" >/dev/null 2>&1
            calls "$port" "$CALLS" "$inflight" || die "calls to $s failed (see $RUN_DIR/bench.log)"
            callgrind_control -d "$pid" >/dev/null 2>&1
            kill "$pid"; wait "$pid" 2>/dev/null || true
            file="$RUN_DIR/$s-P$inflight.$pid.1"
            [[ -s "$file" ]] || die "no callgrind dump for $s ($file)"
            ir=$(callgrind_annotate "$file" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }')
            row+=" $(awk -v i="$ir" -v c="$CALLS" 'BEGIN { printf "%.0f", i / c }') |"
        done
        echo "$row"
        port=""
    done
}

json_field() { python3 -c "import json, sys; print(json.load(open(sys.argv[1]))$2)" "$1"; }

# Part 2: times, every server running, measured one at a time, order rotating.
times() {
    local s r i n=${#SERVERS[@]} port inflight json c0 c1
    for s in "${SERVERS[@]}"; do
        pick_ports port
        PORT[$s]=$port
        # shellcheck disable=SC2046 # the command's words
        taskset -c "$SERVER_CPU" "${PRIO_CMD[@]}" $(command_of "$s" "$port") >>"$RUN_DIR/servers.log" 2>&1 &
        PID[$s]=$!
        server_up "$s" "${PID[$s]}" "$port" "$RUN_DIR/servers.log" || die "$s did not come up"
        port=""
    done
    for ((r = 1; r <= ROUNDS; r++)); do
        for inflight in 1 "$INFLIGHT"; do
            [[ $inflight != 1 ]] || awake_start "$SERVER_CPU,$CLIENT_CPU"
            for ((i = 0; i < n; i++)); do
                s=${SERVERS[$(((i + r - 1) % n))]}
                json="$RUN_DIR/$s-P$inflight-r$r.json"
                log "round $r: $(label "$s"), $inflight in flight"
                one "${PORT[$s]}" 2000 "$inflight" "" || die "warm-up calls to $s failed"
                c0=$(cpu_ns "${PID[$s]}")
                one "${PORT[$s]}" "$CALLS" "$inflight" "$json" || die "calls to $s failed"
                c1=$(cpu_ns "${PID[$s]}")
                R[$s,cpu$inflight,$r]=$(awk -v d=$((c1 - c0)) -v n="$CALLS" 'BEGIN { printf "%.3f", d / 1e3 / n }')
                R[$s,p50,$r]=$(json_field "$json" "['scenarios'][0]['latency']['p50_ns']" 2>/dev/null || echo "")
                R[$s,rate$inflight,$r]=$(json_field "$json" "['scenarios'][0]['calls_per_s']" 2>/dev/null || echo "")
            done
            awake_stop
        done
    done
    stop_all
}

median_of() { # server metric
    local r
    for ((r = 1; r <= ROUNDS; r++)); do [[ -n "${R[$1,$2,$r]:-}" ]] && echo "${R[$1,$2,$r]}"; done | median
}

ratio_to_c() { # server metric: median of per-round ratios to the C echo
    local r
    for ((r = 1; r <= ROUNDS; r++)); do
        [[ -n "${R[$1,$2,$r]:-}" && -n "${R[c,$2,$r]:-}" ]] || continue
        awk -v a="${R[$1,$2,$r]}" -v b="${R[c,$2,$r]}" 'BEGIN { if (b > 0) print a / b }'
    done | median
}

report_times() {
    echo "| server | p50 µs, 1 in flight | CPU µs/call, 1 in flight | calls/s, $INFLIGHT in flight | CPU µs/call, $INFLIGHT in flight | CPU ÷ C echo (1 / $INFLIGHT in flight, median of per-round ratios) |"
    echo "|---|---:|---:|---:|---:|---:|"
    local s
    for s in "${SERVERS[@]}"; do
        printf '| %s | %.1f | %.2f | %.0f | %.2f | %.2f / %.2f |\n' "$(label "$s")" \
            "$(awk -v v="$(median_of "$s" p50)" 'BEGIN { print v / 1000 }')" "$(median_of "$s" cpu1)" \
            "$(median_of "$s" "rate$INFLIGHT")" "$(median_of "$s" "cpu$INFLIGHT")" \
            "$(ratio_to_c "$s" cpu1)" "$(ratio_to_c "$s" "cpu$INFLIGHT")"
    done
}

main() {
    build
    mkdir -p "$RUN_DIR"
    choose_prio
    local out="$RUN_DIR/report.md"
    {
        echo "# evloop: tokio's per-event cost against an event loop of our own"
        echo
        echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC'); kernel $(uname -r); load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
        echo "- $SIZE B echo calls over one connection, $CALLS calls a run; evloop-echo idle timeout $IDLE_MS ms; servers on CPU $SERVER_CPU, netaccel-bench on CPU $CLIENT_CPU"
        echo
        instructions
    } >"$out"
    if ((ROUNDS > 0)); then
        times
        {
            echo
            echo "Times, median of $ROUNDS rounds (scheduling: ${PRIO_CMD[*]:-default}; CPUs kept awake at 1 in flight: $([[ ${KEEP_AWAKE:-1} == 1 ]] && echo yes || echo no)):"
            echo
            report_times
        } >>"$out"
    fi
    cat "$out"
    log "written to ${out#"$ROOT"/}"
}

main "$@"
