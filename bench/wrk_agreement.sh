#!/usr/bin/env bash
# Does netaccel-bench agree with wrk? Same target, same connections, same core
# split: wrk -t1 -cC and `netaccel-bench run -t1 -cC` (closed loop, 1 call in flight
# per connection) against the C epoll HTTP responder (bench/c/http_responder, GET
# /health), alternating tool order over ROUNDS rounds. Passes when the median over
# rounds of netaccel-bench's calls/s ÷ wrk's, and of its p50 ÷ wrk's, are within
# TOLERANCE (10%) of 1, at every connection count in CONNS_LIST.
#
# Usage: bench/wrk_agreement.sh   (about 30 s on 2 cores once built; ./test.sh runs it with
#   CONNS_LIST=1)
#
# Environment (defaults in brackets): DURATION [1] s per run, ROUNDS [5],
#   CONNS_LIST ["1 16"], TOLERANCE [0.10], SERVER_CPU [0], CLIENT_CPU [1],
#   PORT [19090], BENCH_BIN [target/release/netaccel-bench] (built when missing),
#   PRIO [auto]: rt (chrt -f 50, as root), none.  KEEP_AWAKE [1]: a SCHED_IDLE busy
#   loop on both CPUs, so that neither halts between calls (see lib.sh).
# Exit status 0 when every comparison passes, 1 otherwise. The last line is
# "N passed, N failed".
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BENCH_NAME=wrk_agreement
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
DURATION=${DURATION:-1}
ROUNDS=${ROUNDS:-5}
CONNS_LIST=${CONNS_LIST:-"1 16"}
TOLERANCE=${TOLERANCE:-0.10}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
PORT=${PORT:-19090}
BENCH_BIN=${BENCH_BIN:-$ROOT/target/release/netaccel-bench}
PRIO=${PRIO:-auto}
URL="http://127.0.0.1:$PORT/health"
SERVER_PID=""

cleanup() { awake_stop; [[ -z "$SERVER_PID" ]] || { kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null; } || true; }
trap cleanup EXIT

if ! command -v wrk >/dev/null; then
    log "installing wrk"
    sudo=(); [[ $(id -u) -eq 0 ]] || sudo=(sudo)
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q wrk >&2
fi
make -s -C "$HERE/c" http_responder >&2
if [[ ! -x "$BENCH_BIN" ]]; then
    (cd "$ROOT" && cargo build --release -p netaccel-bench >&2)
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

"${PIN_SERVER[@]}" "${PRIO_CMD[@]}" "$HERE/c/http_responder" -a 127.0.0.1 -p "$PORT" 2>/dev/null &
SERVER_PID=$!
for _ in $(seq 50); do curl -fsS -o /dev/null "$URL" 2>/dev/null && break; sleep 0.1; done

client() { timeout $((DURATION + 20)) "${PRIO_CMD[@]}" "${PIN_CLIENT[@]}" "$@"; }

# prints "calls_per_s p50_us"
run_wrk() {
    client wrk -t1 -c"$1" -d"${DURATION}s" --latency -s "$HERE/wrk/report.lua" "$URL" |
        awk '/^BENCH/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
             END { print v["rps"], v["p50_us"] }'
}
run_bench() {
    local json
    json=$(mktemp)
    client "$BENCH_BIN" run "$URL" -t1 -c"$1" -d "$DURATION" -w 0.5 --quiet --json "$json" >/dev/null 2>&1
    awk '/"calls_per_s"/ { gsub(/[,]/, ""); r = $2 } /"p50_ns"/ && !p { gsub(/[,]/, ""); p = $2 / 1000 }
         END { print r, p }' "$json"
    rm -f "$json"
}

# Both CPUs kept from halting between calls (KEEP_AWAKE, see awake_start in lib.sh).
awake_start "$SERVER_CPU,$CLIENT_CPU"
passed=0 failed=0
for c in $CONNS_LIST; do
    wr=() wp=() br=() bp=() rr=() rp=()
    for ((r = 1; r <= ROUNDS; r++)); do
        if ((r % 2)); then read -r a b < <(run_wrk "$c"); read -r x y < <(run_bench "$c")
        else read -r x y < <(run_bench "$c"); read -r a b < <(run_wrk "$c"); fi
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
