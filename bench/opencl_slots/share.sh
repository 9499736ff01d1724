#!/usr/bin/env bash
# One OpenCL device shared by slot calls and a remote OpenCL program
# (docs/opencl-slots.md, "One device, two users").
#
#   slot calls   POST /v1/fn/sobel?width=512&height=512 (256 KiB in and out) to a node
#                whose OpenCL device (ocl0) has one sobel slot; netaccel-bench, one
#                connection, one call in flight (closed loop)
#   remote       bench/opencl_slots/remote.c through netaccel's ICD on the same node
#                and device (`opencl = ADDR`, isolation "none": the runtime in the
#                node's process, whose device queue the slots share): a kernel over
#                65536 integers and a blocking 64-byte read per task, closed loop
#
# Each alone, then both at once, ROUNDS times; prints the median rates and what each
# keeps of its rate alone when shared. Before the device's time was shared fairly (one
# FIFO of calls and tasks), the remote program took most of the device and slot calls
# fell to a fraction of their rate alone; opencl_slots_load.rs checks that each keeps at
# least 0.3.
#
# Usage: bench/opencl_slots/share.sh
#
# Environment (defaults in brackets):
#   DURATION [3]  WARMUP [1]  ROUNDS [3]  PLATFORM ["Portable Computing Language"]
#   NODE_BIN BENCH_BIN ICD_LIB [target/release/…, built when missing]: another node
#     binary (one built from an older commit) measures that commit
#   OUT_DIR [bench/out]  KEEP_WORK [0]: keep the node log
# Needs gcc, ocl-icd-opencl-dev, opencl-headers and an OpenCL platform (test.sh
# installs pocl-opencl-icd).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH_NAME=opencl_slots/share.sh
# shellcheck source=bench/common/lib.sh
source "$ROOT/bench/common/lib.sh"

DURATION=${DURATION:-3}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-3}
PLATFORM=${PLATFORM:-Portable Computing Language}
NODE_BIN=${NODE_BIN:-$ROOT/target/release/netaccel-node}
BENCH_BIN=${BENCH_BIN:-$ROOT/target/release/netaccel-bench}
ICD_LIB=${ICD_LIB:-$ROOT/target/release/libnetaccel_opencl.so}
OUT_DIR=${OUT_DIR:-$ROOT/bench/out}
HOST=127.0.0.1

build_release_bins
if [[ ! -f $ICD_LIB ]]; then
    log "the ICD is missing: cargo build --release -p ocl-icd"
    (cd "$ROOT" && cargo build --release -p ocl-icd >&2) || die "cargo build -p ocl-icd failed"
fi
mkdir -p "$OUT_DIR"
WORK=$(mktemp -d)
NODE_PID=
cleanup() {
    [[ -n $NODE_PID ]] && kill "$NODE_PID" 2>/dev/null && wait "$NODE_PID" 2>/dev/null
    if [[ ${KEEP_WORK:-0} == 1 ]]; then log "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

gcc -O2 -Wall -I "$HERE/../common/c" -o "$WORK/remote" "$HERE/remote.c" -lOpenCL || die "cannot build remote.c (gcc, OpenCL headers)"
mkdir -p "$WORK/vendors"
realpath "$ICD_LIB" >"$WORK/vendors/netaccel.icd"

pick_ports NODE_PORT RAC_PORT OCL_PORT
cat >"$WORK/node.toml" <<TOML
http = "$HOST:$NODE_PORT"
rac = "$HOST:$RAC_PORT"
log_level = "warn"
opencl = "$HOST:$OCL_PORT"
opencl_isolation = "none"
opencl_program_dir = "$WORK/programs"
[[devices]]
name = "ocl0"
backend = "opencl"
platform = "$PLATFORM"
slots = ["sobel"]
TOML
"$NODE_BIN" --config "$WORK/node.toml" 2>"$WORK/node.log" &
NODE_PID=$!
# The first start compiles the built-ins' program.
for _ in $(seq 1 300); do
    (exec 3<>"/dev/tcp/$HOST/$NODE_PORT") 2>/dev/null && break
    kill -0 "$NODE_PID" 2>/dev/null || { tail "$WORK/node.log" >&2; die "the node did not start"; }
    sleep 0.1
done
server_up netaccel-node "$NODE_PID" "$NODE_PORT" "$WORK/node.log"

# slot_run: calls/s of one netaccel-bench run.
slot_run() {
    local json=$WORK/slot.json
    "$BENCH_BIN" run "http://$HOST:$NODE_PORT/v1/fn/sobel?width=512&height=512" \
        -s 262144 -c 1 -d "$DURATION" -w "$WARMUP" --quiet --json "$json" >/dev/null
    awk '/"calls_per_s"/ { gsub(/[,]/, ""); print $2; exit }' "$json"
}
# remote_run: tasks/s of one remote.c run.
remote_run() {
    NETACCEL_OPENCL_NODES="$HOST:$OCL_PORT" OCL_ICD_VENDORS="$WORK/vendors" \
        "$WORK/remote" "$WARMUP" "$DURATION"
}

declare -A RATE
for ((round = 1; round <= ROUNDS; round++)); do
    log "round $round/$ROUNDS"
    RATE[slot_alone]+="$(slot_run) "
    RATE[remote_alone]+="$(remote_run) "
    remote_run >"$WORK/remote.out" &
    remote_pid=$!
    RATE[slot_shared]+="$(slot_run) "
    wait "$remote_pid" || die "the remote program failed"
    RATE[remote_shared]+="$(cat "$WORK/remote.out") "
done
med() { tr ' ' '\n' | { grep -v '^$' || true; } | median; }
for k in "${!RATE[@]}"; do RATE[$k]=$(echo "${RATE[$k]}" | med); done

table=$WORK/table.md
{
    echo "One OpenCL device (PoCL), slot calls and a remote OpenCL program"
    echo "(\`bench/opencl_slots/share.sh\`, $(date -u +%Y-%m-%d), node $(basename "$NODE_BIN") $("$NODE_BIN" --version 2>/dev/null | head -1),"
    echo "median of $ROUNDS rounds of ${DURATION} s; $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg) at the end):"
    echo
    echo "| user | alone /s | shared /s | shared / alone |"
    echo "| --- | ---: | ---: | ---: |"
    awk -v a="${RATE[slot_alone]}" -v s="${RATE[slot_shared]}" \
        'BEGIN { printf "| slot calls (sobel 512x512, HTTP) | %.0f | %.0f | %.2f |\n", a, s, s / a }'
    awk -v a="${RATE[remote_alone]}" -v s="${RATE[remote_shared]}" \
        'BEGIN { printf "| remote tasks (65536-item kernel + 64 B read) | %.0f | %.0f | %.2f |\n", a, s, s / a }'
} >"$table"
cat "$table"
cp "$table" "$OUT_DIR/opencl_slots_share-$(date -u +%Y%m%d-%H%M%S).md"
