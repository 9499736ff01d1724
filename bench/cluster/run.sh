#!/usr/bin/env bash
# BlastFunction's sharing experiment: five functions on three devices through the
# registry (shared) against three dedicated devices (one function each), open-loop load
# at a low, a medium and a high rate.
#
# Acceptance criterion: at medium load the shared deployment processes at least
# RATIO_MIN (1.5) times the requests of the dedicated one, with at most DROP_MAX_PCT
# (1 %) of its requests dropped. BlastFunction reports up to 2.35x.
#
# The set-up, and why (docs/cluster.md, "The sharing experiment", says it at length):
#
#   devices    three nodes on loopback (distinct free ports), one slot each: three
#              devices, like BlastFunction's three boards. Each call holds its slot
#              DEVICE_US µs on the device's own clock (the node's simulated_exec_us:
#              the CPU kernel computes the answer, the slot's worker sleeps; workers
#              real-time like the node, slot_worker_policy = "inherit"), because this host's two cores cannot stand in for
#              three independent devices: CPU kernels would make the slots compete for
#              the same cores, and the experiment would measure the CPU.
#   functions  sobel-a, sobel-b (sobel, 128x128), mm-a, mm-b (matmul, n = 32) and
#              topk-a (topk, 4096 values): BlastFunction's Sobel and MM, and Top-K in
#              place of its CNN. Each function offers the same share of a slot's
#              capacity, so no function is favoured by the choice of the three.
#   dedicated  one function per device, exclusively (BlastFunction's native run, and
#              what a device plugin that hands out whole devices gives): sobel-a, mm-a
#              and topk-a get a device each (pinned with the query's `node`); sobel-b
#              and mm-b find none, so none of their requests is processed: they are
#              counted as sent and dropped, as requests to a function that cannot be
#              deployed are.
#   shared     the five functions created at the registry with no placement hint: it
#              puts the two sobel functions on one device, the two matmul functions on
#              another and topk-a on the third (allocation, steps 3-5).
#   rates      a slot's capacity is measured first (closed loop, every slot at once);
#              each function then offers LOW, MEDIUM or HIGH times that capacity, Poisson
#              arrivals: a shared device with two functions runs at twice that.
#   counting   processed = answered OK; dropped = sent - processed (refused BUSY when a
#              slot's queue of 64 calls is full, errors, timeouts); utilisation = a
#              slot's busy seconds (its node's /metrics) over the measured window. Each
#              function has CONNS connections with INFLIGHT calls each (HTTP answers a
#              connection's calls one at a time): 64 outstanding calls per function, so
#              an overloaded slot's own queue bound refuses the excess, as a device
#              manager's queue does, instead of the load generator holding it back.
#
# Core split: the registry and the three nodes on NODE_CPU, the load generators (one
# netaccel-bench per function) on CLIENT_CPU; a SCHED_IDLE busy loop keeps both from
# halting (KEEP_AWAKE=1, see lib.sh). The run stops by itself (about 3 minutes with the
# defaults, under a minute with QUICK=1) and stops everything it started.
#
# Writes bench/out/cluster-DATE.md (with the JSON reports beside it) and, with
# UPDATE_DOCS=1 (the default unless QUICK=1), the generated block of the "Sharing
# devices through the registry" section of docs/benchmarks.md.
#
# Usage: bench/cluster/run.sh            QUICK=1 bench/cluster/run.sh (smoke: medium only, 6 s)
#
# Environment (defaults in brackets):
#   DURATION [30] s measured per run  WARMUP [2] s  CAPACITY_S [4] s
#   LEVELS ["low medium high"]  LOW [0.1]  MEDIUM [0.35]  HIGH [0.6] (of a slot's capacity,
#   per function)  DEVICE_US [5000]  CONNS [64] and INFLIGHT [1] per function
#   NODE_CPU [0]  CLIENT_CPU [1]  PRIO [auto]: rt (chrt -f 50, root), nice, none
#   NODE_BIN REGISTRY_BIN BENCH_BIN [target/release/…] (built with cargo when missing)
#   REGISTRY_PORT NODE{1,2,3}_HTTP NODE{1,2,3}_RAC [free ports, chosen at start]
#   RATIO_MIN [1.5]  DROP_MAX_PCT [1]  KEEP_AWAKE [1]
#   OUT_DIR [bench/out]  UPDATE_DOCS [1; 0 with QUICK=1]  STRICT [0]: exit 1 if the
#   criterion fails
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH_NAME=cluster.sh
# shellcheck source=bench/common/lib.sh
source "$ROOT/bench/common/lib.sh"

QUICK=${QUICK:-0}
if [[ $QUICK == 1 ]]; then
    DURATION=${DURATION:-6}
    WARMUP=${WARMUP:-1}
    CAPACITY_S=${CAPACITY_S:-2}
    LEVELS=${LEVELS:-medium}
    UPDATE_DOCS=${UPDATE_DOCS:-0}
fi
DURATION=${DURATION:-30}
WARMUP=${WARMUP:-2}
CAPACITY_S=${CAPACITY_S:-4}
LEVELS=${LEVELS:-"low medium high"}
LOW=${LOW:-0.1}
MEDIUM=${MEDIUM:-0.35}
HIGH=${HIGH:-0.6}
DEVICE_US=${DEVICE_US:-5000}
CONNS=${CONNS:-64}
INFLIGHT=${INFLIGHT:-1}
NODE_CPU=${NODE_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
PRIO=${PRIO:-auto}
NODE_BIN=${NODE_BIN:-$ROOT/target/release/netaccel-node}
REGISTRY_BIN=${REGISTRY_BIN:-$ROOT/target/release/netaccel-registry}
BENCH_BIN=${BENCH_BIN:-$ROOT/target/release/netaccel-bench}
RATIO_MIN=${RATIO_MIN:-1.5}
DROP_MAX_PCT=${DROP_MAX_PCT:-1}
OUT_DIR=${OUT_DIR:-$ROOT/bench/out}
UPDATE_DOCS=${UPDATE_DOCS:-1}
STRICT=${STRICT:-0}
HOST=127.0.0.1
pick_ports REGISTRY_PORT NODE1_HTTP NODE1_RAC NODE2_HTTP NODE2_RAC NODE3_HTTP NODE3_RAC
STAMP=$(date +%Y%m%d-%H%M%S)
RUN_DIR="$OUT_DIR/cluster-$STAMP"
REGISTRY="http://$HOST:$REGISTRY_PORT"

# The functions: name, accelerator, query string, payload bytes. The dedicated
# deployment gives a device to the first of each accelerator, in this order.
FUNCTIONS=(
    "sobel-a sobel width=128&height=128 16384"
    "mm-a matmul n=32 8192"
    "topk-a topk k=16 16384"
    "sobel-b sobel width=128&height=128 16384"
    "mm-b matmul n=32 8192"
)
DEDICATED=("sobel-a node-1" "mm-a node-2" "topk-a node-3")

declare -a PIDS=()
declare -a PRIO_CMD=()
declare -A CAPACITY=()

# stop_all: the nodes first (they deregister from the registry as they drain), then
# the registry, each waited for.
stop_all() {
    local i p
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        p=${PIDS[i]}
        kill "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    PIDS=()
}
trap 'awake_stop; stop_all' EXIT
trap 'exit 130' INT TERM

reg() { timeout 120 python3 "$HERE/registry.py" "$REGISTRY" "$@"; }

build() {
    build_release_bins
    if [[ ! -x "$REGISTRY_BIN" ]]; then
        log "netaccel-registry missing: cargo build --release -p netaccel-registry"
        (cd "$ROOT" && cargo build --release -p netaccel-registry >&2) || die "cargo build -p netaccel-registry failed"
    fi
}

start_cluster() {
    local i http rac conf
    taskset -c "$NODE_CPU" "${PRIO_CMD[@]}" "$REGISTRY_BIN" --listen "$HOST:$REGISTRY_PORT" --log-level warn \
        >>"$RUN_DIR/registry.log" 2>&1 &
    PIDS+=($!)
    server_up netaccel-registry "${PIDS[-1]}" "$REGISTRY_PORT" "$RUN_DIR/registry.log" || die "the registry did not come up"
    for i in 1 2 3; do
        http=NODE${i}_HTTP rac=NODE${i}_RAC conf="$RUN_DIR/node-$i.toml"
        # One slot, loaded with echo (a blank device): the registry loads what the
        # functions need. The slot's worker sleeps through the simulated device time.
        cat >"$conf" <<EOF
http = "$HOST:${!http}"
rac = "$HOST:${!rac}"
io_threads = 1
log_level = "warn"
registry = "$REGISTRY"
name = "node-$i"
simulated_exec_us = $DEVICE_US
slot_worker_policy = "inherit"
[[slots]]
accelerator = "echo"
EOF
        taskset -c "$NODE_CPU" "${PRIO_CMD[@]}" "$NODE_BIN" --config "$conf" >>"$RUN_DIR/node-$i.log" 2>&1 &
        PIDS+=($!)
        server_up "node-$i" "${PIDS[-1]}" "${!http}" "$RUN_DIR/node-$i.log" || die "node-$i did not come up"
    done
    reg wait-nodes 3 30 || die "the three nodes did not register"
}

# node_http NODE: HOST:PORT of that node's HTTP front end.
node_http() { local v="NODE${1#node-}_HTTP"; echo "$HOST:${!v}"; }

# busy_all: "node-i busy_seconds" for each node (its one slot).
busy_all() {
    local i
    for i in 1 2 3; do
        printf 'node-%s %s\n' "$i" "$(curl -sf "http://$(node_http "node-$i")/metrics" |
            awk '/^netaccel_slot_busy_seconds_total/ { s += $NF } END { printf "%.6f", s }')"
    done
}

function_spec() { local f; for f in "${FUNCTIONS[@]}"; do [[ ${f%% *} == "$1" ]] && { echo "$f"; return; }; done; die "no function $1"; }

# load LABEL FUNCTION HTTP RATE: one netaccel-bench in the background (its pid in PIDS_LOAD).
declare -a PIDS_LOAD=()
load() {
    local label=$1 fn=$2 http=$3 rate=$4 accel query size seed
    read -r _ accel query size <<<"$(function_spec "$fn")"
    seed=$((${#PIDS_LOAD[@]} + 1))
    if [[ $rate == closed ]]; then
        set -- --inflight 2
    else
        set -- --rate "$rate" --arrivals poisson --seed "$seed" --conns "$CONNS" --inflight "$INFLIGHT"
    fi
    timeout $((DURATION + WARMUP + 60)) "${PRIO_CMD[@]}" taskset -c "$CLIENT_CPU" "$BENCH_BIN" run \
        "http://$http/v1/fn/$accel?$query" --size "$size" "$@" \
        --duration "${LOAD_S:-$DURATION}" --warmup "$WARMUP" --timeout 5 --label "$label" \
        --note "registry and 3 nodes on CPU $NODE_CPU" --json "$RUN_DIR/$label.json" --quiet \
        >/dev/null 2>>"$RUN_DIR/bench.log" &
    PIDS_LOAD+=($!)
}
wait_load() {
    local p failed=0
    for p in "${PIDS_LOAD[@]}"; do wait "$p" || failed=1; done
    PIDS_LOAD=()
    ((failed == 0)) || die "a load generator failed (see ${RUN_DIR#"$ROOT"/}/bench.log)"
}

# capacity: each slot's calls/s in closed loop, the three at once (dedicated layout).
measure_capacity() {
    local pair fn node accel
    log "capacity: closed loop, $CAPACITY_S s, the three slots at once"
    for pair in "${DEDICATED[@]}"; do
        read -r fn node <<<"$pair"
        read -r _ _ _ http <<<"$(reg create "$fn" "$(function_spec "$fn" | cut -d' ' -f2)" "$node")"
        LOAD_S=$CAPACITY_S load "capacity-$fn" "$fn" "$http" closed
    done
    wait_load
    for pair in "${DEDICATED[@]}"; do
        read -r fn node <<<"$pair"
        reg delete "$fn"
        accel=$(function_spec "$fn" | cut -d' ' -f2)
        CAPACITY[$accel]=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["scenarios"][0]["calls_per_s"])' \
            "$RUN_DIR/capacity-$fn.json")
        log "capacity of a $accel slot: ${CAPACITY[$accel]} calls/s"
        printf 'capacity\t%s\t%s\n' "$accel" "${CAPACITY[$accel]}" >>"$RUN_DIR/runs.tsv"
    done
}

# run LEVEL FRACTION DEPLOYMENT: deploy, load every function, record, undeploy.
run() {
    local level=$1 fraction=$2 deployment=$3 spec fn accel node http slot rate t0 t1 pair placed
    reg settle 30 || die "the slots did not become idle"
    local -a deployed=()
    for spec in "${FUNCTIONS[@]}"; do
        read -r fn accel _ <<<"$spec"
        node=""
        if [[ $deployment == dedicated ]]; then
            for pair in "${DEDICATED[@]}"; do [[ ${pair%% *} == "$fn" ]] && node=${pair#* }; done
            [[ -n $node ]] || {
                rate=$(awk -v c="${CAPACITY[$accel]}" -v f="$fraction" 'BEGIN { printf "%.1f", c * f }')
                printf 'run\t%s\t%s\t%s\t%s\t-\t-\t%s\t-\n' "$level" "$deployment" "$fn" "$accel" "$rate" >>"$RUN_DIR/runs.tsv"
                continue
            }
        fi
        read -r placed _ slot http <<<"$(reg create "$fn" "$accel" ${node:+"$node"})"
        deployed+=("$fn $accel $placed $slot $http")
    done
    reg slots >"$RUN_DIR/slots-$level-$deployment.txt"
    log "$level, $deployment: $(awk '{ printf "%s%s:%s=%s", (NR > 1 ? "; " : ""), $1, $3, $4 "(" $5 ")" }' "$RUN_DIR/slots-$level-$deployment.txt")"
    for spec in "${deployed[@]}"; do
        read -r fn accel placed slot http <<<"$spec"
        rate=$(awk -v c="${CAPACITY[$accel]}" -v f="$fraction" 'BEGIN { printf "%.1f", c * f }')
        printf 'run\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$level" "$deployment" "$fn" "$accel" "$placed" "$slot" "$rate" \
            "$level-$deployment-$fn.json" >>"$RUN_DIR/runs.tsv"
        load "$level-$deployment-$fn" "$fn" "$http" "$rate"
    done
    # The slots' busy time over the measured window: from the end of the warm-up to
    # the end of the window (the generators' own clocks start together with these).
    sleep "$WARMUP"
    t0=$(date +%s.%N)
    busy_all >"$RUN_DIR/busy0-$level-$deployment.txt"
    sleep "$DURATION"
    t1=$(date +%s.%N)
    busy_all >"$RUN_DIR/busy1-$level-$deployment.txt"
    wait_load
    join "$RUN_DIR/busy0-$level-$deployment.txt" "$RUN_DIR/busy1-$level-$deployment.txt" |
        awk -v l="$level" -v d="$deployment" -v w="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
            '{ printf "busy\t%s\t%s\t%s\t%.4f\n", l, d, $1, ($3 - $2) / w }' >>"$RUN_DIR/runs.tsv"
    for spec in "${deployed[@]}"; do reg delete "${spec%% *}"; done
}

main() {
    (($(nproc) >= 2)) || log "warning: fewer than 2 CPUs; the nodes and the load generators share a core"
    command -v taskset >/dev/null || die "taskset (util-linux) is needed"
    command -v curl >/dev/null || die "curl is needed"
    build
    choose_prio
    mkdir -p "$RUN_DIR"
    LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
    local t0 level fraction
    t0=$(date +%s)
    awake_start "$NODE_CPU,$CLIENT_CPU"
    start_cluster
    measure_capacity
    for level in $LEVELS; do
        case $level in
            low) fraction=$LOW ;;
            medium) fraction=$MEDIUM ;;
            high) fraction=$HIGH ;;
            *) die "LEVELS: $level is not low, medium or high" ;;
        esac
        printf 'level\t%s\t%s\n' "$level" "$fraction" >>"$RUN_DIR/runs.tsv"
        run "$level" "$fraction" dedicated
        run "$level" "$fraction" shared
    done
    awake_stop
    stop_all
    local out="$OUT_DIR/cluster-$STAMP.md"
    python3 "$HERE/report.py" "$RUN_DIR" \
        --command "$([[ $QUICK == 1 ]] && echo 'QUICK=1 ')bench/cluster/run.sh" \
        --machine "$(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')), a virtual machine shared with other work; load average at start $LOAD_START, at end $(cut -d' ' -f1-3 /proc/loadavg)" \
        --cores "registry and the three nodes (io_threads = 1 each) on CPU $NODE_CPU, one netaccel-bench per function on CPU $CLIENT_CPU; loopback; scheduling: ${PRIO_CMD[*]:-default}; SCHED_IDLE busy loops on both CPUs: $([[ ${KEEP_AWAKE:-1} == 1 ]] && echo yes || echo no)" \
        --commit "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet HEAD -- crates 2>/dev/null || echo ', crates/ modified')" \
        --settings "DURATION=$DURATION s measured after WARMUP=$WARMUP s, DEVICE_US=$DEVICE_US, CONNS=$CONNS × INFLIGHT=$INFLIGHT per function, LOW/MEDIUM/HIGH = $LOW/$MEDIUM/$HIGH of a slot's capacity per function" \
        --duration "$DURATION" --ratio-min "$RATIO_MIN" --drop-max-pct "$DROP_MAX_PCT" >"$out"
    cat "$out"
    log "measured in $(($(date +%s) - t0)) s; written to ${out#"$ROOT"/} (JSON in ${RUN_DIR#"$ROOT"/})"
    if [[ $UPDATE_DOCS == 1 ]]; then
        replace_docs_block cluster.sh "$out" && log "updated docs/benchmarks.md"
    fi
    if [[ $STRICT == 1 ]] && grep -q '| FAIL |' "$out"; then exit 1; fi
}

main "$@"
