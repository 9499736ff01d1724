#!/usr/bin/env bash
# Network-thread scaling (issue 15, item 4): calls/s of small calls with --io-threads 1
# and 2, how the kernel spreads connections over the network threads' SO_REUSEPORT
# listeners, and how busy each thread was. Method and figures: docs/benchmarks.md
# ("Network threads").
#
# Usage: bench/scaling/run.sh
#
# Per round, for each front end (HTTP POST /v1/fn/echo and RAC echo, 64 B, CONNS
# connections, closed loop, one call in flight per connection) and each thread count
# in THREADS, a fresh release node (`--io-threads N`) is started, loaded by
# netaccel-bench for DURATION s after WARMUP s, and stopped. Reported per case: calls/s
# and p50/p99 (netaccel-bench), the node's CPU per call (utime+stime of all its
# threads), each network thread's share of the accepted connections
# (`netaccel_connections_accepted_total{thread}`) and of the CPU time (per-thread
# /proc/PID/task/TID/stat, by thread name `net-N`). The thread counts alternate order
# between rounds; each figure is the median over ROUNDS rounds.
#
# The machine has few cores, shared with the load generator: SPLIT says how.
#   shared [default]: node and client both on CPUS (the scheduler places them); what
#                     the node gains from a second thread is what the client leaves.
#   pinned:           node on CPUS, client (one thread) on CLIENT_CPU, itself one of
#                     CPUS: the client takes most of that core, so the node's second
#                     thread competes with it. Shows where "until the cores run out" is.
#
# Environment (defaults in brackets):
#   DURATION [5]  WARMUP [1]  ROUNDS [3]  CONNS [64]  THREADS ["1 2"]  SIZE [64]
#   CPUS [0-1]  CLIENT_CPU [1]  SPLIT [shared]  CLIENT_THREADS [1]
#   PRIO [none]: rt (chrt -f 50, root), nice, none
#   NODE_BIN [target/release/netaccel-node]  BENCH_BIN [target/release/netaccel-bench]
#     (built with cargo when missing)
#   OUT_DIR [bench/out]
# Bounded: every client run is under `timeout`, and the script ends by itself
# (about ROUNDS x 2 front ends x |THREADS| x (DURATION + WARMUP + 2) s).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH_NAME=scaling
HOST=127.0.0.1
# shellcheck source=bench/common/lib.sh
source "$ROOT/bench/common/lib.sh"

DURATION=${DURATION:-5}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-64}
THREADS=${THREADS:-"1 2"}
SIZE=${SIZE:-64}
CPUS=${CPUS:-0-1}
CLIENT_CPU=${CLIENT_CPU:-1}
SPLIT=${SPLIT:-shared}
CLIENT_THREADS=${CLIENT_THREADS:-1}
PRIO=${PRIO:-none}
NODE_BIN=${NODE_BIN:-$ROOT/target/release/netaccel-node}
BENCH_BIN=${BENCH_BIN:-$ROOT/target/release/netaccel-bench}
OUT_DIR=${OUT_DIR:-$ROOT/bench/out}
choose_prio
case "$SPLIT" in
    shared) CLIENT_CPUS=$CPUS ;;
    pinned) CLIENT_CPUS=$CLIENT_CPU ;;
    *) die "SPLIT must be shared or pinned" ;;
esac
build_release_bins

STAMP=$(date +%Y%m%d-%H%M%S)
RUN_DIR="$OUT_DIR/scaling-$STAMP"
mkdir -p "$RUN_DIR"
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
CLK_TCK=$(getconf CLK_TCK)

node_pid=
stop_node() {
    if [[ -n "$node_pid" ]]; then
        kill "$node_pid" 2>/dev/null || true
        wait "$node_pid" 2>/dev/null || true
        node_pid=
    fi
}
trap stop_node EXIT
trap 'exit 130' INT TERM

# ticks of the whole node, and of each network thread as "net-N ticks" lines.
node_ticks() { awk '{ print $14 + $15 }' "/proc/$node_pid/stat"; }
thread_ticks() {
    local t
    for t in /proc/"$node_pid"/task/*; do
        # net-N only: not its companion runtime thread net-N-rt.
        [[ $(cat "$t/comm" 2>/dev/null) =~ ^net-[0-9]+$ ]] || continue
        echo "$(cat "$t/comm") $(awk '{ print $14 + $15 }' "$t/stat")"
    done | sort
}

# one PROTO N ROUND: one case on a fresh node; appends a line to $RUN_DIR/results:
# proto threads round calls/s p50_us p99_us cpu_us_per_call accepted(t0/t1..) cpu_s(t0/t1..)
one() {
    local proto=$1 n=$2 round=$3 http rac target t0 t1 json label acc cpu
    read -r http rac <<<"$(port_probe --free 2 | tr '\n' ' ')"
    taskset -c "$CPUS" "${PRIO_CMD[@]}" "$NODE_BIN" --http "$HOST:$http" --rac "$HOST:$rac" \
        --grpc off --io-threads "$n" --log-level warn >>"$RUN_DIR/node.log" 2>&1 &
    node_pid=$!
    server_up netaccel-node "$node_pid" "$rac" "$RUN_DIR/node.log" || die "the node did not start"
    server_up netaccel-node "$node_pid" "$http" "$RUN_DIR/node.log" || die "the node did not start"
    if [[ $proto == http ]]; then target="http://$HOST:$http/v1/fn/echo"; else target="rac://$HOST:$rac/echo"; fi
    label="$proto io$n r$round"
    json="$RUN_DIR/$(tr ' ' '-' <<<"$label").json"
    t0=$(node_ticks)
    thread_ticks >"$RUN_DIR/ticks0"
    timeout "$(awk -v d="$DURATION" -v w="$WARMUP" 'BEGIN { printf "%d", d + w + 60 }')" taskset -c "$CLIENT_CPUS" "${PRIO_CMD[@]}" "$BENCH_BIN" run "$target" \
        --size "$SIZE" --conns "$CONNS" --threads "$CLIENT_THREADS" --duration "$DURATION" --warmup "$WARMUP" \
        --label "$label" --note "node --io-threads $n on CPUs $CPUS, client on CPUs $CLIENT_CPUS" \
        --json "$json" --quiet >/dev/null 2>>"$RUN_DIR/bench.log" || die "netaccel-bench failed: $label (see $RUN_DIR/bench.log)"
    t1=$(node_ticks)
    thread_ticks >"$RUN_DIR/ticks1"
    acc=$(curl -fsS "http://$HOST:$http/metrics" |
        awk '/^netaccel_connections_accepted_total\{thread="/ { split($1, a, "\""); c[a[2]] = $2; if (a[2] + 0 > m) m = a[2] + 0 }
             END { for (i = 0; i <= m; i++) printf "%s%d", (i ? "/" : ""), c[i] }')
    cpu=$(join "$RUN_DIR/ticks0" "$RUN_DIR/ticks1" | awk -v hz="$CLK_TCK" '{ printf "%s%.1f", (NR > 1 ? "/" : ""), ($3 - $2) / hz }')
    stop_node
    "$BENCH_BIN" report "$json" --tsv "$RUN_DIR/one.tsv" >/dev/null
    awk -F'\t' -v p="$proto" -v n="$n" -v r="$round" -v d=$((t1 - t0)) -v hz="$CLK_TCK" -v dur="$DURATION" -v w="$WARMUP" \
        -v acc="$acc" -v cpu="$cpu" '
        { if ($5 > 0) { print "errors in " $1 > "/dev/stderr"; exit 1 }
          # The ticks span warm-up and run; calls/s x (run + warm-up) approximates the calls.
          printf "%s %s %s %.0f %.1f %.1f %.2f %s %s\n", p, n, r, $4, $2 / 1000, $3 / 1000,
              d / hz * 1e6 / ($4 * (dur + w)), acc, cpu }' "$RUN_DIR/one.tsv" >>"$RUN_DIR/results" ||
        die "errors in $label (see $RUN_DIR/bench.log)"
    log "$(tail -n 1 "$RUN_DIR/results")"
}

log "node on CPUs $CPUS, client ($CLIENT_THREADS thread(s)) on CPUs $CLIENT_CPUS ($SPLIT), priority $PRIO; $ROUNDS rounds; load $LOAD_START"
: >"$RUN_DIR/results"
for ((r = 1; r <= ROUNDS; r++)); do
    order=$THREADS
    ((r % 2)) || order=$(tr ' ' '\n' <<<"$THREADS" | tac | tr '\n' ' ')
    for proto in http rac; do
        for n in $order; do one "$proto" "$n" "$r"; done
    done
done

col() { awk -v p="$1" -v n="$2" -v c="$3" '$1 == p && $2 == n { print $c }' "$RUN_DIR/results" | median; }
list() { awk -v p="$1" -v n="$2" -v c="$3" '$1 == p && $2 == n { printf "%s%s", (k++ ? ", " : ""), $c }' "$RUN_DIR/results"; }
{
    echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC'), \`bench/scaling/run.sh\` (SPLIT=$SPLIT, DURATION=$DURATION s after $WARMUP s warm-up, ROUNDS=$ROUNDS, medians over rounds), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')."
    echo
    echo "- machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')), shared with other work; load average at start $LOAD_START, at end $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "- core split: node on CPUs $CPUS, netaccel-bench ($CLIENT_THREADS load thread(s)) on CPUs $CLIENT_CPUS; scheduling: ${PRIO_CMD[*]:-default}"
    echo "- load: $CONNS connections, $SIZE B echo, one call in flight per connection, closed loop"
    echo
    echo "| front end | io_threads | calls/s | vs 1 thread | p50 µs | p99 µs | node CPU µs/call | accepted per thread (each round) | CPU s per thread (each round) |"
    echo "|---|---:|---:|---:|---:|---:|---:|---|---|"
    for proto in http rac; do
        base=$(col "$proto" 1 4)
        for n in $THREADS; do
            rps=$(col "$proto" "$n" 4)
            printf '| %s | %s | %.0f | %s | %s | %s | %s | %s | %s |\n' "$proto" "$n" "$rps" \
                "$(awk -v a="$rps" -v b="$base" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }')" \
                "$(col "$proto" "$n" 5)" "$(col "$proto" "$n" 6)" "$(col "$proto" "$n" 7)" \
                "$(list "$proto" "$n" 8)" "$(list "$proto" "$n" 9)"
        done
    done
} >"$RUN_DIR/report.md"
cat "$RUN_DIR/report.md"
log "report: ${RUN_DIR#"$ROOT"/}/report.md"
