#!/usr/bin/env bash
# OpenCL slots against a minimal C host program on the same OpenCL device (PoCL).
#
#   node HTTP   POST /v1/fn/NAME to a node whose OpenCL device (ocl0) hosts the
#               built-ins as OpenCL kernels; netaccel-bench, 1 connection, 1 call in
#               flight (closed loop)
#   C host      bench/opencl_slots/host.c: the same kernel source (the node's
#               builtins.cl) with the same work sizes, driven in-process: write +
#               kernel + blocking read + finish per call, closed loop
#
# Scenarios: to_uppercase of 64 B and sobel of 256x256 (latency: the node's added p50
# is node p50 - host p50; goal <= 15 us), and sobel of 1920x1080 (throughput: node
# calls/s over host calls/s, the node with CONNS connections so that receiving the
# next image overlaps the kernel; goal >= 0.9). For scale, the same payload to echo
# on a CPU slot of the same node gives the HTTP round trip alone (the "HTTP floor"),
# and the last column is what remains of the added p50 beyond it. Each figure is the
# median of ROUNDS rounds.
# The node is pinned to SERVER_CPU (with PoCL's threads), netaccel-bench to
# CLIENT_CPU; the C host runs on SERVER_CPU too. Writes bench/out/opencl_slots-DATE.md
# and (UPDATE_DOCS=1) the generated block of docs/benchmarks.md.
#
# Usage: bench/opencl_slots/run.sh
#
# Environment (defaults in brackets):
#   DURATION [3]  WARMUP [1]  ROUNDS [3]  ITER [3000]: C host calls per small run
#   CONNS [2]: node connections for the 1920x1080 throughput run
#   SERVER_CPU [0]  CLIENT_CPU [1]  PLATFORM ["Portable Computing Language"]
#   NODE_BIN BENCH_BIN [target/release/…, built when missing]
#   OUT_DIR [bench/out]  UPDATE_DOCS [1]  KEEP_AWAKE [1]  KEEP_WORK [0]: keep the node log and reports
# Needs gcc, ocl-icd-opencl-dev, opencl-headers and an OpenCL platform (test.sh
# installs pocl-opencl-icd).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH_NAME=opencl_slots.sh
# shellcheck source=bench/common/lib.sh
source "$ROOT/bench/common/lib.sh"

DURATION=${DURATION:-3}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-3}
ITER=${ITER:-3000}
CONNS=${CONNS:-2}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
PLATFORM=${PLATFORM:-Portable Computing Language}
NODE_BIN=${NODE_BIN:-$ROOT/target/release/netaccel-node}
BENCH_BIN=${BENCH_BIN:-$ROOT/target/release/netaccel-bench}
OUT_DIR=${OUT_DIR:-$ROOT/bench/out}
UPDATE_DOCS=${UPDATE_DOCS:-1}
HOST=127.0.0.1
export PLATFORM

build_release_bins
mkdir -p "$OUT_DIR"
WORK=$(mktemp -d)
NODE_PID=
AWAKE_PIDS=()
cleanup() {
    [[ -n $NODE_PID ]] && kill "$NODE_PID" 2>/dev/null && wait "$NODE_PID" 2>/dev/null
    awake_stop
    if [[ ${KEEP_WORK:-0} == 1 ]]; then log "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

SOURCE=$ROOT/crates/node/src/device/opencl/builtins.cl
gcc -O2 -Wall -I "$HERE/../common/c" -o "$WORK/host" "$HERE/host.c" -lOpenCL || die "cannot build the C host (gcc, OpenCL headers)"

pick_ports NODE_PORT RAC_PORT
cat >"$WORK/node.toml" <<TOML
http = "$HOST:$NODE_PORT"
rac = "$HOST:$RAC_PORT"
log_level = "warn"
# The CPU echo slot's worker shares SERVER_CPU with the SCHED_IDLE keep-awake loop
# (see awake_start in lib.sh); at the default class it would get half of it.
slot_worker_policy = "normal"
opencl_program_dir = "$WORK/programs"
[[devices]]
name = "ocl0"
backend = "opencl"
platform = "$PLATFORM"
slots = ["to_uppercase", "sobel"]
[[devices]]
name = "cpu0"
backend = "cpu"
slots = ["echo"]
TOML
awake_start "$SERVER_CPU,$CLIENT_CPU"
taskset -c "$SERVER_CPU" "$NODE_BIN" --config "$WORK/node.toml" 2>"$WORK/node.log" &
NODE_PID=$!
# The first start compiles the built-ins' program.
for _ in $(seq 1 300); do
    (exec 3<>"/dev/tcp/$HOST/$NODE_PORT") 2>/dev/null && break
    kill -0 "$NODE_PID" 2>/dev/null || { tail "$WORK/node.log" >&2; die "the node did not start"; }
    sleep 0.1
done
server_up netaccel-node "$NODE_PID" "$NODE_PORT" "$WORK/node.log"

# node NAME QUERY SIZE [CONNS]: "p50_us calls_per_s" of one netaccel-bench run.
node_run() {
    local json=$WORK/node-$1-$3.json
    taskset -c "$CLIENT_CPU" "$BENCH_BIN" run "http://$HOST:$NODE_PORT/v1/fn/$1?$2" \
        -s "$3" -c "${4:-1}" -d "$DURATION" -w "$WARMUP" --quiet --json "$json" >/dev/null
    awk '/"calls_per_s"/ && !r { gsub(/[,]/, ""); r = $2 } /"p50_ns"/ && !p { gsub(/[,]/, ""); p = $2 / 1000 }
         END { print p, r }' "$json"
}
# host ARGS...: "p50_us calls_per_s" of the C host program.
host_run() {
    taskset -c "$SERVER_CPU" "$WORK/host" "$SOURCE" "$@" | awk '{ print $1, $4 }'
}

declare -A P50 RATE
for ((round = 1; round <= ROUNDS; round++)); do
    log "round $round/$ROUNDS"
    read -r p r < <(node_run echo "" 64); P50[floor_up]+="$p "
    read -r p r < <(node_run echo "" 65536); P50[floor_s256]+="$p "
    read -r p r < <(node_run to_uppercase "" 64); P50[node_up]+="$p "; RATE[node_up]+="$r "
    read -r p r < <(host_run upper 64 "$ITER"); P50[host_up]+="$p "; RATE[host_up]+="$r "
    read -r p r < <(node_run sobel "width=256&height=256" 65536); P50[node_s256]+="$p "; RATE[node_s256]+="$r "
    read -r p r < <(host_run sobel 256 256 "$((ITER / 3))"); P50[host_s256]+="$p "; RATE[host_s256]+="$r "
    read -r p r < <(node_run echo "" 2073600); P50[floor_s1080]+="$p "
    read -r p r < <(node_run sobel "width=1920&height=1080" 2073600); P50[node_s1080]+="$p "
    read -r _ r < <(node_run sobel "width=1920&height=1080" 2073600 "$CONNS"); RATE[node_s1080]+="$r "
    read -r p r < <(host_run sobel 1920 1080 "$((ITER / 15))"); P50[host_s1080]+="$p "; RATE[host_s1080]+="$r "
done
med() { tr ' ' '\n' | { grep -v '^$' || true; } | median; }
for k in "${!P50[@]}"; do
    P50[$k]=$(echo "${P50[$k]}" | med)
    RATE[$k]=$(echo "${RATE[$k]:-}" | med)
done

table=$WORK/table.md
{
    echo "OpenCL slot vs a minimal C host program, same PoCL device and kernel"
    echo "(\`bench/opencl_slots/run.sh\`, $(date -u +%Y-%m-%d), node on CPU $SERVER_CPU, client on CPU $CLIENT_CPU,"
    echo "median of $ROUNDS rounds; $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')):"
    echo
    echo "| call | node HTTP p50 µs | C host p50 µs | node's added p50 µs | HTTP floor p50 µs (CPU echo, same size) | added beyond the floor µs | node calls/s | C host calls/s | node / host |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    for row in "up:to_uppercase 64 B" "s256:sobel 256x256" "s1080:sobel 1920x1080"; do
        k=${row%%:*} name=${row#*:}
        awk -v n="$name" -v np="${P50[node_$k]}" -v hp="${P50[host_$k]}" -v fp="${P50[floor_$k]}" -v nr="${RATE[node_$k]}" -v hr="${RATE[host_$k]}" \
            'BEGIN { printf "| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f | %.0f | %.2f |\n", n, np, hp, np - hp, fp, np - hp - fp, nr, hr, nr / hr }'
    done
    echo
    echo "Calls/s: closed loop, 1 connection (to_uppercase, 256x256), $CONNS connections (1920x1080); C host: one loop."
    echo
    echo "Goals: added p50 ≤ 15 µs (64 B to_uppercase, 256x256 sobel); sobel 1920x1080 node / host ≥ 0.90."
} >"$table"
cat "$table"
cp "$table" "$OUT_DIR/opencl_slots-$(date -u +%Y%m%d-%H%M%S).md"
if [[ $UPDATE_DOCS == 1 ]]; then
    replace_docs_block opencl_slots.sh "$table" && log "docs/benchmarks.md updated"
fi
