#!/usr/bin/env bash
# Performance isolation on one node, over RAC.
#
# Acceptance criterion: with topk, minmax and logit in their own slots, drive minmax
# well past its capacity from several connections while one client calls logit at a
# modest rate; logit's p50 and p99 stay within 1.5x of its unloaded figures. Same for
# two tenants on one accelerator: the light tenant's latency stays within 2x of
# unloaded while the heavy one floods.
#
# Scenario "slots": node config with three slots (topk, minmax, logit). The light
#   client calls logit (LIGHT_SIZE bytes) open loop at LIGHT_RATE calls/s over one
#   connection, latency from the intended send time (coordinated omission corrected):
#   first alone (unloaded), then while a heavy netaccel-bench floods minmax closed loop
#   with HEAVY_CONNS connections x HEAVY_INFLIGHT calls in flight of HEAVY_SIZE bytes.
# Scenario "tenants": node config with one minmax slot and two tenants; every heavy
#   connection sends hello as tenant "heavy", the light client as tenant "light", both
#   call minmax; light alone, then while heavy floods.
# In both, the flood runs from 1 s before the light run until it ends; the heavy
# figures (calls/s, BUSY answers) show how far past capacity it was, next to the
# in-process minmax rate (one core, no network) for HEAVY_SIZE.
#
# Core split (default): the node (all its threads: the network thread and every slot
# worker) on NODE_CPUS=0, both load generators on CLIENT_CPU=1. The slot workers and
# the network thread share CPU 0, so the flood competes with the light calls for that
# core as well as for the accelerator. As root: the node runs with nice -10 (not
# SCHED_FIFO: FIFO threads of one priority on one core do not share it, a busy slot
# worker would starve the network thread), the light client with SCHED_FIFO
# (chrt -f 50) so that the flooding load generator on the same CPU does not delay its
# sends and reads, the heavy client with default scheduling.
# CPUs are kept awake (KEEP_AWAKE=1) by a SCHED_IDLE busy loop, which any other thread
# preempts at once: CLIENT_CPU throughout, NODE_CPUS during unloaded runs. An idle
# virtual CPU halts, and waking it waits for the host's scheduler (unloaded p50
# 100-250 us, p99 up to 3.6 ms on this machine without them, against 60 us / 100 us
# with them), so without them the figures measured the hypervisor and the "unloaded"
# ones came out slower than the loaded ones. In loaded runs the flood keeps the node's
# CPU busy, and a busy loop there would take CPU time from the slot workers, which run
# in the same SCHED_IDLE class (slot_worker_policy, the node's default).
# Every figure is the median over ROUNDS rounds (unloaded and loaded alternate).
# Writes bench/out/isolation-DATE.md with the JSON reports and, with UPDATE_DOCS=1
# (default), the generated block of the "Performance isolation" section of
# docs/benchmarks.md.
#
# Usage: bench/isolation/run.sh
#
# Environment (defaults in brackets):
#   DURATION [5] s per light run  ROUNDS [3]  LIGHT_RATE [1000]  LIGHT_SIZE [4096]
#   HEAVY_SIZE [65536]  HEAVY_CONNS [4]  HEAVY_INFLIGHT [16]
#   NODE_CPUS [0]  CLIENT_CPU [1]  SCENARIOS ["slots tenants"]
#   NODE_BIN [target/release/netaccel-node]  BENCH_BIN [target/release/netaccel-bench]
#   HTTP_PORT  RAC_PORT [free ports, chosen at start]  SLOTS_LIMIT [1.5]  TENANTS_LIMIT [2]
#   OUT_DIR [bench/out]  UPDATE_DOCS [1]  STRICT [0]: exit 1 if a criterion fails
#   KEEP_AWAKE [1]  NODE_EXTRA: lines added to the node's config
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH_NAME=isolation.sh
# shellcheck source=bench/common/lib.sh
source "$ROOT/bench/common/lib.sh"

DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-3}
LIGHT_RATE=${LIGHT_RATE:-1000}
LIGHT_SIZE=${LIGHT_SIZE:-4096}
HEAVY_SIZE=${HEAVY_SIZE:-65536}
HEAVY_CONNS=${HEAVY_CONNS:-4}
HEAVY_INFLIGHT=${HEAVY_INFLIGHT:-16}
NODE_CPUS=${NODE_CPUS:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
SCENARIOS=${SCENARIOS:-"slots tenants"}
NODE_BIN=${NODE_BIN:-$ROOT/target/release/netaccel-node}
BENCH_BIN=${BENCH_BIN:-$ROOT/target/release/netaccel-bench}
HTTP_PORT=${HTTP_PORT:-}
RAC_PORT=${RAC_PORT:-}
SLOTS_LIMIT=${SLOTS_LIMIT:-1.5}
TENANTS_LIMIT=${TENANTS_LIMIT:-2}
OUT_DIR=${OUT_DIR:-$ROOT/bench/out}
UPDATE_DOCS=${UPDATE_DOCS:-1}
STRICT=${STRICT:-0}
KEEP_AWAKE=${KEEP_AWAKE:-1}
HOST=127.0.0.1
pick_ports HTTP_PORT RAC_PORT
STAMP=$(date +%Y%m%d-%H%M%S)
RUN_DIR="$OUT_DIR/isolation-$STAMP"
RAC="rac://$HOST:$RAC_PORT"

NODE_PID=""
HEAVY_PID=""
declare -a NODE_PRIO=() LIGHT_PRIO=() HEAVY_PRIO=()
RUNS=0


stop_pid() { [[ -z "$1" ]] || { kill "$1" 2>/dev/null; wait "$1" 2>/dev/null; } || true; }
cleanup() { awake_stop; stop_pid "$HEAVY_PID"; stop_pid "$NODE_PID"; }

# unloaded SCENARIO ROUND: the light client alone, with the node's CPUs kept awake too.
unloaded() {
    local before=${#AWAKE_PIDS[@]}
    awake_start "$NODE_CPUS"
    light "$1" unloaded "$2"
    awake_stop "$before"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

build() {
    build_release_bins
    "$BENCH_BIN" run --help | grep -q -- '--tenant' || die "$BENCH_BIN has no --tenant option; rebuild it"
}


# start_node SCENARIO: writes the node's config and starts it on NODE_CPUS.
start_node() {
    local conf="$RUN_DIR/node-$1.toml"
    {
        echo "http = \"$HOST:$HTTP_PORT\""
        echo "rac = \"$HOST:$RAC_PORT\""
        echo "io_threads = 1"
        echo "log_level = \"warn\""
        [[ -n ${NODE_EXTRA:-} ]] && printf '%b\n' "$NODE_EXTRA"
        if [[ $1 == slots ]]; then
            printf '[[slots]]\naccelerator = "%s"\n' topk minmax logit
        else
            printf '[[slots]]\naccelerator = "minmax"\n'
        fi
        printf '[[tenants]]\nname = "heavy"\ntoken = "heavy-token"\n'
        printf '[[tenants]]\nname = "light"\ntoken = "light-token"\n'
    } >"$conf"
    taskset -c "$NODE_CPUS" "${NODE_PRIO[@]}" "$NODE_BIN" --config "$conf" >>"$RUN_DIR/node.log" 2>&1 &
    NODE_PID=$!
    server_up netaccel-node "$NODE_PID" "$RAC_PORT" "$RUN_DIR/node.log" || die "the node did not come up"
}

# light SCENARIO PHASE ROUND: the light client's run.
light() {
    local accel=logit extra=()
    [[ $1 == tenants ]] && { accel=minmax; extra=(--tenant light:light-token); }
    RUNS=$((RUNS + 1))
    log "$1: light $accel at $LIGHT_RATE/s, $2, round $3"
    timeout $((DURATION + 60)) "${LIGHT_PRIO[@]}" taskset -c "$CLIENT_CPU" "$BENCH_BIN" run "$RAC/$accel" \
        --size "$LIGHT_SIZE" --conns 1 --inflight 16 --rate "$LIGHT_RATE" --duration "$DURATION" --warmup 1 \
        "${extra[@]}" --label "$1 light $2 r$3" --note "node on CPU $NODE_CPUS" \
        --json "$RUN_DIR/$(printf '%02d' "$RUNS")-$1-light-$2-r$3.json" --quiet >/dev/null 2>>"$RUN_DIR/bench.log" ||
        die "light run failed ($1 $2 r$3, see $RUN_DIR/bench.log)"
}

# heavy_start SCENARIO ROUND: the flood, in the background, for longer than a light run.
heavy_start() {
    local extra=()
    [[ $1 == tenants ]] && extra=(--tenant heavy:heavy-token)
    RUNS=$((RUNS + 1))
    "${HEAVY_PRIO[@]}" taskset -c "$CLIENT_CPU" "$BENCH_BIN" run "$RAC/minmax" \
        --size "$HEAVY_SIZE" --conns "$HEAVY_CONNS" --inflight "$HEAVY_INFLIGHT" --duration $((DURATION + 1)) --warmup 1 \
        "${extra[@]}" --label "$1 heavy r$2" --note "node on CPU $NODE_CPUS" --timeout 10 \
        --json "$RUN_DIR/$(printf '%02d' "$RUNS")-$1-heavy-r$2.json" --quiet >/dev/null 2>>"$RUN_DIR/bench.log" &
    HEAVY_PID=$!
    sleep 1
}

heavy_stop() {
    wait "$HEAVY_PID" 2>/dev/null || log "warning: the heavy run failed (see $RUN_DIR/bench.log)"
    HEAVY_PID=""
}

# col LABEL FIELD: median over rounds of a TSV field (2 p50 ns, 3 p99 ns, 4 calls/s, 5 errors)
col() { awk -F'\t' -v l="$1" -v f="$2" 'index($1, l " r") == 1 { print $f }' "$RUN_DIR/summary.tsv" | median; }
per_round() { awk -F'\t' -v l="$1" -v f="$2" 'index($1, l " r") == 1 { printf "%s%.1f", (n++ ? " / " : ""), $f / 1000 }' "$RUN_DIR/summary.tsv"; }


report() {
    local rev s limit what
    rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')
    git -C "$ROOT" diff --quiet HEAD -- crates 2>/dev/null || rev+=", crates/ modified"
    echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC'), \`bench/isolation/run.sh\` (DURATION=$DURATION s per light run, ROUNDS=$ROUNDS, medians over rounds), commit $rev."
    echo
    echo "- machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')), a virtual machine shared with other work (noisy); load average at start $LOAD_START, at end $(cut -d' ' -f1-3 /proc/loadavg); kernel $(uname -r)"
    echo "- core split: the node (\`io_threads = 1\`; its network thread and every slot worker) on CPU $NODE_CPUS; the light and the heavy netaccel-bench both on CPU $CLIENT_CPU; scheduling: node ${NODE_PRIO[*]:-default}, light client ${LIGHT_PRIO[*]:-default}, heavy client ${HEAVY_PRIO[*]:-default}; slot workers per the node's defaults${NODE_EXTRA:+, node config adds: $(printf '%b' "$NODE_EXTRA" | paste -sd';')}; SCHED_IDLE busy loop on CPU $CLIENT_CPU throughout and on CPU $NODE_CPUS in unloaded runs: $([[ $KEEP_AWAKE == 1 ]] && echo yes || echo no)"
    echo "- light client: open loop, $LIGHT_RATE calls/s, constant spacing, 1 connection (up to 16 in flight), $(size_name "$LIGHT_SIZE") payload, latency from the intended send time; heavy: closed loop, $HEAVY_CONNS connections × $HEAVY_INFLIGHT in flight, minmax $(size_name "$HEAVY_SIZE")"
    echo "- minmax capacity for reference (in-process, one core, no network, $(size_name "$HEAVY_SIZE")): $(awk -v r="$INPROC_RATE" 'BEGIN { printf "%.0f", r }') calls/s"
    echo
    echo "| scenario | light client | unloaded p50 µs | loaded p50 µs | unloaded p99 µs | loaded p99 µs | heavy calls/s | heavy errors (BUSY …) | light errors |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
    for s in $SCENARIOS; do
        what="logit (own slot)"
        [[ $s == tenants ]] && what="minmax, tenant light (heavy floods minmax as tenant heavy)"
        awk -v s="$s" -v w="$what" -v u50="$(col "$s light unloaded" 2)" -v l50="$(col "$s light loaded" 2)" \
            -v u99="$(col "$s light unloaded" 3)" -v l99="$(col "$s light loaded" 3)" \
            -v hr="$(col "$s heavy" 4)" -v he="$(col "$s heavy" 5)" \
            -v le="$(($(col "$s light unloaded" 5) + $(col "$s light loaded" 5)))" \
            'BEGIN { printf "| %s | %s | %.1f | %.1f | %.1f | %.1f | %.0f | %.0f | %d |\n", s, w, u50 / 1000, l50 / 1000, u99 / 1000, l99 / 1000, hr, he, le }'
    done
    echo
    echo "| criterion | measured | limit | result |"
    echo "|---|---:|---:|---|"
    for s in $SCENARIOS; do
        limit=$SLOTS_LIMIT what="logit, minmax flooded"
        [[ $s == tenants ]] && { limit=$TENANTS_LIMIT what="light tenant, heavy tenant flooding"; }
        for q in 2:p50 3:p99; do
            awk -v w="$what" -v q="${q#*:}" -v u="$(col "$s light unloaded" "${q%%:*}")" -v l="$(col "$s light loaded" "${q%%:*}")" -v lim="$limit" \
                'BEGIN { r = l / u; printf "| %s: loaded %s ÷ unloaded %s | %.2f | ≤ %s | %s |\n", w, q, q, r, lim, (r <= lim ? "PASS" : "FAIL") }'
        done
    done
    echo
    for s in $SCENARIOS; do
        echo "Per-round light p50 / p99 µs, $s: unloaded $(per_round "$s light unloaded" 2), $(per_round "$s light unloaded" 3); loaded $(per_round "$s light loaded" 2), $(per_round "$s light loaded" 3)."
    done
}

update_docs() {
    replace_docs_block isolation.sh "$1" || return 0
    log "updated docs/benchmarks.md"
}

main() {
    (($(nproc) >= 2)) || log "warning: fewer than 2 CPUs"
    command -v taskset >/dev/null || die "taskset (util-linux) is needed"
    build
    if [[ $(id -u) -eq 0 ]] && command -v chrt >/dev/null; then
        NODE_PRIO=(nice -n -10) LIGHT_PRIO=(chrt -f 50)
    fi
    mkdir -p "$RUN_DIR"
    LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
    local t0 s r
    t0=$(date +%s)
    "${LIGHT_PRIO[@]}" taskset -c "$CLIENT_CPU" "$BENCH_BIN" run inproc://minmax --size "$HEAVY_SIZE" \
        --duration 1 --warmup 0.2 --label "inproc minmax" --json "$RUN_DIR/inproc-minmax.json" --quiet >/dev/null 2>>"$RUN_DIR/bench.log"
    INPROC_RATE=$(awk '/"calls_per_s"/ { gsub(/[,]/, ""); print $2; exit }' "$RUN_DIR/inproc-minmax.json")
    awake_start "$CLIENT_CPU"
    for s in $SCENARIOS; do
        start_node "$s"
        for ((r = 1; r <= ROUNDS; r++)); do
            if ((r % 2)); then
                unloaded "$s" "$r"
                heavy_start "$s" "$r"; light "$s" loaded "$r"; heavy_stop
            else
                heavy_start "$s" "$r"; light "$s" loaded "$r"; heavy_stop
                unloaded "$s" "$r"
            fi
        done
        stop_pid "$NODE_PID"
        NODE_PID=""
    done
    awake_stop
    "$BENCH_BIN" report "$RUN_DIR"/[0-9]*.json --markdown "$RUN_DIR/table.md" --tsv "$RUN_DIR/summary.tsv" >/dev/null
    local out="$OUT_DIR/isolation-$STAMP.md"
    report >"$out"
    cat "$out"
    log "measured in $(($(date +%s) - t0)) s; written to ${out#"$ROOT"/} (JSON in ${RUN_DIR#"$ROOT"/})"
    if [[ "$UPDATE_DOCS" == 1 ]]; then update_docs "$out"; fi
    if [[ "$STRICT" == 1 ]] && grep -q '| FAIL |' "$out"; then exit 1; fi
}

main "$@"
