#!/usr/bin/env bash
# Does netaccel-bench agree with wrk? Same target, same connections, same core
# split: wrk -t1 -cC and `netaccel-bench run -t1 -cC` (closed loop, 1 call in flight
# per connection) against the C epoll HTTP responder (bench/common/c/http_responder, GET
# /health), alternating tool order over ROUNDS rounds. Passes when the median over
# rounds of netaccel-bench's calls/s ÷ wrk's, and of its p50 ÷ wrk's, are within
# TOLERANCE (10%) of 1, at every connection count in CONNS_LIST.
#
# Usage: bench/wrk_agreement/run.sh   (about 30 s on 2 cores once built; ./test.sh runs it with
#   CONNS_LIST=1)
#
# Environment (defaults in brackets): DURATION [1] s per run, ROUNDS [5],
#   CONNS_LIST ["1 16"], TOLERANCE [0.10], SERVER_CPU [0], CLIENT_CPU [1],
#   PORT [a free port], BENCH_BIN [target/release/netaccel-bench] (built when missing),
#   PRIO [auto]: rt (chrt -f 50, as root), none.  KEEP_AWAKE [1]: a SCHED_IDLE busy
#   loop on both CPUs, so that neither halts between calls (see lib.sh).
# Exit status 0 when every comparison passes, 1 otherwise (and when a tool fails: its
# error output is shown). The last line is "N passed, N failed".
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH_NAME=wrk_agreement
# shellcheck source=bench/common/lib.sh
source "$ROOT/bench/common/lib.sh"
DURATION=${DURATION:-1}
ROUNDS=${ROUNDS:-5}
CONNS_LIST=${CONNS_LIST:-"1 16"}
TOLERANCE=${TOLERANCE:-0.10}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
BENCH_BIN=${BENCH_BIN:-$ROOT/target/release/netaccel-bench}
PRIO=${PRIO:-auto}
HOST=127.0.0.1
PORT=${PORT:-}
pick_ports PORT
URL="http://$HOST:$PORT/health"
SERVER_PID=""
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/netaccel-wrk-agreement.XXXXXX")

cleanup() {
    awake_stop
    [[ -z "$SERVER_PID" ]] || { kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null; } || true
    rm -rf -- "$SCRATCH"
}
trap cleanup EXIT

if ! command -v wrk >/dev/null; then
    log "installing wrk"
    sudo=(); [[ $(id -u) -eq 0 ]] || sudo=(sudo)
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q wrk >&2
fi
make -s -C "$ROOT/bench/common/c" http_responder >&2 || die "building bench/common/c/http_responder failed"
if [[ ! -x "$BENCH_BIN" ]]; then
    (cd "$ROOT" && cargo build --release -p netaccel-bench >&2) || die "cargo build -p netaccel-bench failed"
fi
# SCHED_FIFO when allowed (root with CAP_SYS_NICE; a container may lack it), and CPU
# pinning when those CPUs exist; otherwise the default scheduler, unpinned.
PRIO_CMD=()
if [[ "$PRIO" == auto ]] && chrt -f 50 true 2>/dev/null; then PRIO=rt; fi
[[ "$PRIO" == rt ]] && PRIO_CMD=(chrt -f 50)
pin() { if taskset -c "$1" true 2>/dev/null; then echo "taskset -c $1"; fi; }
read -ra PIN_SERVER <<<"$(pin "$SERVER_CPU")"
read -ra PIN_CLIENT <<<"$(pin "$CLIENT_CPU")"
((${#PIN_SERVER[@]} && ${#PIN_CLIENT[@]})) || log "CPUs $SERVER_CPU and $CLIENT_CPU not both available: not pinning"

"${PIN_SERVER[@]}" "${PRIO_CMD[@]}" "$ROOT/bench/common/c/http_responder" -a "$HOST" -p "$PORT" 2>"$SCRATCH/server.log" &
SERVER_PID=$!
server_up http_responder "$SERVER_PID" "$PORT" "$SCRATCH/server.log" || die "the HTTP responder did not start"
curl -fsS -o /dev/null --max-time 5 "$URL" || die "the HTTP responder on port $PORT did not answer GET /health"

client() { timeout $((DURATION + 20)) "${PRIO_CMD[@]}" "${PIN_CLIENT[@]}" "$@"; }

# tool_failed TOOL OUTPUT_FILE [STATUS]: stops the script with the tool's output.
tool_failed() {
    log "$1 failed against $URL${3:+ (exit status $3)}; its output:"
    if [[ -s "$2" ]]; then sed 's/^/    /' "$2" >&2; else log "    (none)"; fi
    die "$1 failed (see above)"
}

# Each prints "calls_per_s p50_us", or stops the script with the tool's output when the
# tool fails, reports errors, or prints no figures.
run_wrk() {
    local out=$SCRATCH/wrk.out figures
    client wrk -t1 -c"$1" -d"${DURATION}s" --latency -s "$ROOT/bench/common/wrk/report.lua" "$URL" >"$out" 2>&1 ||
        tool_failed wrk "$out" $?
    figures=$(awk '/^BENCH/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
        END { e = v["errors_connect"] + v["errors_read"] + v["errors_write"] + v["errors_status"] + v["errors_timeout"]
              if (v["rps"] > 0 && v["p50_us"] > 0 && e == 0) print v["rps"], v["p50_us"] }' "$out")
    [[ -n "$figures" ]] || tool_failed wrk "$out"
    echo "$figures"
}
run_bench() {
    local json=$SCRATCH/bench.json out=$SCRATCH/bench.out figures
    rm -f "$json"
    client "$BENCH_BIN" run "$URL" -t1 -c"$1" -d "$DURATION" -w 0.5 --quiet --json "$json" >"$out" 2>&1 ||
        tool_failed netaccel-bench "$out" $?
    figures=$(awk '/"calls_per_s"/ { gsub(/[,]/, ""); r = $2 } /"p50_ns"/ && !p { gsub(/[,]/, ""); p = $2 / 1000 }
        END { if (r > 0 && p > 0) print r, p }' "$json" 2>>"$out")
    [[ -n "$figures" ]] || tool_failed netaccel-bench "$out"
    echo "$figures"
}

# Both CPUs kept from halting between calls (KEEP_AWAKE, see awake_start in lib.sh).
awake_start "$SERVER_CPU,$CLIENT_CPU"
passed=0 failed=0
for c in $CONNS_LIST; do
    wr=() wp=() br=() bp=() rr=() rp=()
    for ((r = 1; r <= ROUNDS; r++)); do
        # Plain assignments, so that a tool's failure (exit in the substitution) stops
        # the script here.
        if ((r % 2)); then wrk_fig=$(run_wrk "$c"); bench_fig=$(run_bench "$c")
        else bench_fig=$(run_bench "$c"); wrk_fig=$(run_wrk "$c"); fi
        read -r a b <<<"$wrk_fig"
        read -r x y <<<"$bench_fig"
        log "c$c round $r: wrk $a calls/s p50 $b µs; netaccel-bench $x calls/s p50 $y µs"
        wr+=("$a") wp+=("$b") br+=("$x") bp+=("$y")
        rr+=("$(awk -v w="$a" -v b="$x" 'BEGIN { print b / w }')")
        rp+=("$(awk -v w="$b" -v b="$y" 'BEGIN { print b / w }')")
    done
    # The verdict uses the median of the per-round ratios: the two tools of a round run
    # back to back, so a machine whose speed drifts during the run (as this one does by
    # 10-20 % within a minute) moves both sides of a ratio alike.
    for metric in calls/s p50; do
        if [[ $metric == calls/s ]]; then
            w=$(printf '%s\n' "${wr[@]}" | median); b=$(printf '%s\n' "${br[@]}" | median)
            ratio=$(printf '%s\n' "${rr[@]}" | median)
        else
            w=$(printf '%s\n' "${wp[@]}" | median); b=$(printf '%s\n' "${bp[@]}" | median)
            ratio=$(printf '%s\n' "${rp[@]}" | median)
        fi
        if awk -v r="$ratio" -v t="$TOLERANCE" 'BEGIN { d = r - 1; exit !(d <= t && d >= -t) }'; then
            verdict=PASS; passed=$((passed + 1))
        else
            verdict=FAIL; failed=$((failed + 1))
        fi
        awk -v c="$c" -v m="$metric" -v w="$w" -v b="$b" -v r="$ratio" -v v="$verdict" \
            'BEGIN { printf "c%s %s: median of per-round ratios %+.1f%% %s (medians: wrk %.1f, netaccel-bench %.1f)\n", c, m, (r - 1) * 100, v, w, b }'
    done
done
echo "wrk_agreement: $passed passed, $failed failed"
((failed == 0))
