#!/usr/bin/env bash
# The simulator against a real node (issue 34, point 3): one scenario run on a release
# netaccel-node on this machine and in netaccel-sim, side by side.
#
# Scenario: three slots (echo, minmax, logit), each a simulated device of DEVICE_US µs
# per call (the node's `simulated_exec_us`: the worker holds the slot that long, from
# when the device is free, whatever the host does meanwhile); two tenants (a, b) call
# each accelerator, each with its own payload size (STREAMS: accelerator:tenant:bytes);
# every stream is one netaccel-bench open loop with Poisson arrivals, at its share of
# LOADS (30, 60, 90 % of each slot's capacity, 1 / DEVICE_US).
#
# 1. Calibration, in each round: the streams at CAL_LOAD % (light); each stream's p50
#    less the device
#    time, fitted to 2 × latency + bytes × 8 / bandwidth, gives the simulator's link
#    (`[network]`); the spread of the time outside the node's queue and device
#    (p90 and p99 against p50 of the reports' network_protocol) gives a lognormal
#    jitter; the median over rounds of each. The only figures the simulator takes
#    from the measurement.
# 2. For each round and load: the six streams together for DURATION s (after 1 s of
#    warm-up); their latencies merged by CDF (all calls together), calls/s summed.
# 3. The simulator runs the same scenario in the same window (1 s of warm-up, then
#    DURATION s) SIM_WINDOWS times with other seeds, and takes the median of each
#    window's figures — a window's p99 at 90 % load is well below the steady
#    state's, and spread (41–59 ms where 200 s give 57 ms) — twice:
#    with the link alone (a constant latency each way: "link"), and with the link's
#    median as a lognormal jitter on each answer instead ("link + jitter").
# Every measured figure is the median over ROUNDS rounds. Prints the table with the
# ratios simulated ÷ measured (goal: p50 and p99 within 15 %, calls/s within 5 %),
# and writes it to bench/out/sim-validate-DATE.md with the reports and scenarios, and
# the chart of latency against load to CHART (docs/img/sim/validate.svg).
#
# Cores: the node (network thread and slot workers) on NODE_CPUS, every load
# generator on CLIENT_CPU; as root both under SCHED_FIFO (chrt -f 50): the node's
# workers sleep through the device time (`slot_worker_policy = "inherit"`), so a
# real-time node does not starve anything, and other work on a shared machine does not
# delay the answers.
#
# Usage: bench/sim/validate.sh
#        ANALYZE=bench/out/sim-validate-DATE bench/sim/validate.sh   # simulator side again
#
# Environment (defaults in brackets):
#   DEVICE_US [2000]  LOADS ["30 60 90"]  CAL_LOAD [5]  DURATION [15] s  ROUNDS [3]
#   SIM_WINDOWS [31]  STREAMS ["echo:a:64 echo:b:4096 minmax:a:1024 minmax:b:16384
#   logit:a:256 logit:b:65536"]  NODE_CPUS [0]  CLIENT_CPU [1]  OUT_DIR [bench/out]
#   NODE_BIN, BENCH_BIN, SIM_BIN [target/release/…]  HTTP_PORT RAC_PORT [free ports]
#   CHART [docs/img/sim/validate.svg]
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH_NAME=sim/validate.sh
# shellcheck source=bench/common/lib.sh
source "$ROOT/bench/common/lib.sh"

DEVICE_US=${DEVICE_US:-2000}
LOADS=${LOADS:-"30 60 90"}
CAL_LOAD=${CAL_LOAD:-5}
DURATION=${DURATION:-15}
ROUNDS=${ROUNDS:-3}
SIM_WINDOWS=${SIM_WINDOWS:-31}
STREAMS=${STREAMS:-"echo:a:64 echo:b:4096 minmax:a:1024 minmax:b:16384 logit:a:256 logit:b:65536"}
NODE_CPUS=${NODE_CPUS:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
OUT_DIR=${OUT_DIR:-$ROOT/bench/out}
CHART=${CHART:-$ROOT/docs/img/sim/validate.svg}
NODE_BIN=${NODE_BIN:-$ROOT/target/release/netaccel-node}
BENCH_BIN=${BENCH_BIN:-$ROOT/target/release/netaccel-bench}
SIM_BIN=${SIM_BIN:-$ROOT/target/release/netaccel-sim}
HTTP_PORT=${HTTP_PORT:-}
RAC_PORT=${RAC_PORT:-}
HOST=127.0.0.1
pick_ports HTTP_PORT RAC_PORT
STAMP=$(date +%Y%m%d-%H%M%S)
RUN_DIR="$OUT_DIR/sim-validate-$STAMP"
PY="$HERE/validate.py"
read -r -a STREAM_LIST <<<"$STREAMS"

NODE_PID=""
declare -a PRIO=()
stop_pid() { [[ -z "$1" ]] || { kill "$1" 2>/dev/null; wait "$1" 2>/dev/null; } || true; }
cleanup() { stop_pid "$NODE_PID"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

build() {
    build_release_bins
    if [[ ! -x "$SIM_BIN" ]]; then
        (cd "$ROOT" && cargo build --release -p netaccel-sim >&2) || die "cargo build -p netaccel-sim failed"
    fi
}

# The node: one slot per accelerator of STREAMS, the simulated device, the two tenants.
# The in-flight bounds are raised past what the queues can hold, so that every refusal
# is the dispatch core's (which the simulator runs), not the front end's.
start_node() {
    local conf="$RUN_DIR/node.toml" a t seen=" "
    {
        echo "http = \"$HOST:$HTTP_PORT\""
        echo "rac = \"$HOST:$RAC_PORT\""
        echo "grpc = \"off\""
        echo "io_threads = 1"
        echo "log_level = \"warn\""
        echo "simulated_exec_us = $DEVICE_US"
        echo "slot_worker_policy = \"inherit\""
        echo "rac_in_flight_max = 1024"
        echo "tenant_in_flight_max = 1024"
        for s in "${STREAM_LIST[@]}"; do
            a=${s%%:*}
            [[ $seen == *" $a "* ]] && continue
            seen+="$a "
            printf '[[slots]]\naccelerator = "%s"\n' "$a"
        done
        seen=" "
        for s in "${STREAM_LIST[@]}"; do
            t=${s#*:}; t=${t%%:*}
            [[ $seen == *" $t "* ]] && continue
            seen+="$t "
            printf '[[tenants]]\nname = "%s"\ntoken = "%s-token"\n' "$t" "$t"
        done
    } >"$conf"
    taskset -c "$NODE_CPUS" "${PRIO[@]}" "$NODE_BIN" --config "$conf" >>"$RUN_DIR/node.log" 2>&1 &
    NODE_PID=$!
    server_up netaccel-node "$NODE_PID" "$RAC_PORT" "$RUN_DIR/node.log" || die "the node did not come up"
}

# measure LOAD TAG: every stream at its share of LOAD % for DURATION s, together;
# reports in RUN_DIR/TAG-*.json.
measure() {
    local load=$1 tag=$2 pids=() i=0 a t b rate
    for s in "${STREAM_LIST[@]}"; do
        IFS=: read -r a t b <<<"$s"
        # Each slot's capacity is 1e6 / DEVICE_US calls/s, shared by its streams.
        rate=$(awk -v l="$load" -v d="$DEVICE_US" -v n="$(printf '%s\n' "${STREAM_LIST[@]}" | grep -c "^$a:")" \
            'BEGIN { printf "%.3f", l / 100 * 1e6 / d / n }')
        i=$((i + 1))
        timeout $((DURATION + 60)) "${PRIO[@]}" taskset -c "$CLIENT_CPU" "$BENCH_BIN" run "rac://$HOST:$RAC_PORT/$a" \
            --size "$b" --conns 1 --inflight 256 --rate "$rate" --arrivals poisson --seed "$((i * 7919 + ${tag//[^0-9]/}))" \
            --duration "$DURATION" --warmup 1 --tenant "$t:$t-token" --label "$tag $s" --timeout 30 \
            --json "$RUN_DIR/$tag-$i.json" --quiet >/dev/null 2>>"$RUN_DIR/bench.log" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || die "a load generator failed ($tag, see ${RUN_DIR#"$ROOT"/}/bench.log)"; done
}

# simulate LOAD LATENCY GBPS JITTER SIGMA: the simulator's p50 µs, p99 µs and calls/s
# at LOAD %.
simulate() {
    local sc="$RUN_DIR/sim/validate-$1.toml"
    python3 "$PY" scenario "$DEVICE_US" "$(awk -v l="$1" 'BEGIN { print l / 100 }')" "$2" "$3" "$4" "$5" "$((DURATION + 1))" "${STREAM_LIST[@]}" >"$sc"
    python3 "$PY" windows "$SIM_BIN" "$sc" 1 "$DURATION" "$SIM_WINDOWS" "$RUN_DIR/sim"
}

# rows FILE LATENCY GBPS JITTER SIGMA: per load, the measured medians and the
# simulator's figures.
rows() {
    local l m f
    : >"$1"
    for l in $LOADS; do
        m=""
        for f in 2 3 4; do
            m+="$(awk -F'\t' -v l="$l" -v f="$f" '$1 == l { print $f }' "$RUN_DIR/measured.tsv" | median)"$'\t'
        done
        printf '%s\t%s%s\n' "$l" "$m" "$(simulate "$l" "$2" "$3" "$4" "$5")" >>"$1"
    done
}

main() {
    command -v taskset >/dev/null || die "taskset (util-linux) is needed"
    command -v python3 >/dev/null || die "python3 is needed"
    build
    if [[ $(id -u) -eq 0 ]] && command -v chrt >/dev/null; then PRIO=(chrt -f 50); fi
    [[ -n ${ANALYZE:-} ]] && RUN_DIR=$ANALYZE
    mkdir -p "$RUN_DIR/sim"
    local load_start t0 r l lat gbps jitter sigma
    load_start=$(cut -d' ' -f1-3 /proc/loadavg)
    t0=$(date +%s)
    if [[ -z ${ANALYZE:-} ]]; then
        start_node
        : >"$RUN_DIR/measured.tsv"
        for ((r = 1; r <= ROUNDS; r++)); do
            log "round $r: calibrating the link at $CAL_LOAD % load"
            measure "$CAL_LOAD" "cal$r"
            for l in $LOADS; do
                log "round $r: $l % load"
                measure "$l" "l${l}r$r"
                printf '%s\t%s\n' "$l" "$(python3 "$PY" merged "$RUN_DIR/l${l}r$r"-*.json)" >>"$RUN_DIR/measured.tsv"
            done
        done
        stop_pid "$NODE_PID"
        NODE_PID=""
    fi
    : >"$RUN_DIR/calibration.tsv"
    for ((r = 1; r <= ROUNDS; r++)); do
        python3 "$PY" calibrate "$DEVICE_US" "$RUN_DIR/cal$r"-*.json >>"$RUN_DIR/calibration.tsv"
    done
    read -r lat gbps jitter sigma <<<"$(for f in 1 2 3 4; do cut -f"$f" "$RUN_DIR/calibration.tsv" | median; done | paste -sd' ')"
    log "link: $lat µs each way, ${gbps} Gbit/s (0: no bandwidth term); jitter: median $jitter µs, sigma $sigma"
    rows "$RUN_DIR/rows-link.tsv" "$lat" "$gbps" 0 0
    rows "$RUN_DIR/rows.tsv" 0 "$gbps" "$jitter" "$sigma"
    local out="$OUT_DIR/sim-validate-$STAMP.md" rev
    rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')
    {
        echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC'), \`bench/sim/validate.sh\` (DEVICE_US=$DEVICE_US, DURATION=$DURATION s, ROUNDS=$ROUNDS, medians over rounds; simulator: median of $SIM_WINDOWS windows of the same length), commit $rev."
        echo
        echo "- machine: $(nproc) cores, load average at start $load_start, at end $(cut -d' ' -f1-3 /proc/loadavg); node on CPU $NODE_CPUS, load generators on CPU $CLIENT_CPU, scheduling ${PRIO[*]:-default}"
        echo "- streams (accelerator:tenant:bytes): $STREAMS; from the $CAL_LOAD % runs (median of rounds; per round latency, Gbit/s, jitter, sigma: $(tr '\t\n' ' ;' <"$RUN_DIR/calibration.tsv")): link $lat µs each way, $gbps Gbit/s; jitter lognormal, median $jitter µs, sigma $sigma"
        echo "- per round (load, p50 µs, p99 µs, calls/s, errors): $(tr '\t\n' ' ;' <"$RUN_DIR/measured.tsv")"
        echo
        echo "Simulator with the link alone (a constant latency each way):"
        python3 "$PY" table "$RUN_DIR/rows-link.tsv"
        echo
        echo "Simulator with the link and the jitter:"
        python3 "$PY" table "$RUN_DIR/rows.tsv"
    } >"$out"
    python3 "$PY" chart "$RUN_DIR/rows.tsv" "$RUN_DIR/rows-link.tsv" "$CHART"
    cat "$out"
    log "measured in $(($(date +%s) - t0)) s; written to ${out#"$ROOT"/}"
}

main "$@"
