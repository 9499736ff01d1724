#!/usr/bin/env bash
# What running remote clients' kernels in isolated runtime processes costs
# (docs/opencl.md, "Isolation"): the service in each mode (none = the runtime in the
# service's process, session = one runtime process per client connection, shared = one
# for all), measured with
#
#   - setup.c: a new program's session set-up (connect, context + queue, build, first
#     64-byte task), SESSIONS programs one after the other (each one session), and the
#     same with PAUSE_MS between programs, so that the node has refilled its spare
#     runtime processes (session mode) before the next one comes;
#   - overhead.c small: the 64-byte write + kernel + read + finish round trip, on the
#     shared-memory path and the network path forced (NETACCEL_OPENCL_SHM=0);
#   - the resident memory of one idle runtime process (session mode's price per spare).
#
#   bench/opencl/isolation.sh [SESSIONS] [ITERATIONS]
#
# Modes run interleaved, ROUNDS times (default 3). CPUs are kept awake as in run.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
sessions="${1:-20}"
iters="${2:-2000}"
rounds="${ROUNDS:-3}"
pause_ms="${PAUSE_MS:-1500}"
BENCH_NAME=opencl/isolation.sh
# shellcheck source=bench/opencl/common.sh
source bench/opencl/common.sh
target="${CARGO_TARGET_DIR:-target}"
cargo build --release -q -p ocl-remote -p ocl-icd || die "cargo build failed"
work="$(mktemp -d)"
svc=""
trap 'awake_stop; [ -z "$svc" ] || kill "$svc" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/local" "$work/remote"
for icd in /etc/OpenCL/vendors/*.icd; do
    [ "$(basename "$icd")" = netaccel.icd ] || cp "$icd" "$work/local/"
done
realpath "$target/release/libnetaccel_opencl.so" > "$work/remote/netaccel.icd"
gcc -O2 -Wall -I bench/common/c -o "$work/setup" bench/opencl/setup.c -lOpenCL
gcc -O2 -Wall -I bench/common/c -o "$work/overhead" bench/opencl/overhead.c -lOpenCL
awake_start "0-$(($(nproc) - 1))"

start() { # isolation mode
    SERVICE_PORT=""
    pick_ports SERVICE_PORT
    "$target/release/netaccel-ocl-service" --listen "$HOST:$SERVICE_PORT" --isolation "$1" \
        > "$work/service-$1.log" 2>&1 &
    svc=$!
    server_up netaccel-ocl-service "$svc" "$SERVICE_PORT" "$work/service-$1.log" ||
        die "the service ($1) did not start"
    export NETACCEL_OPENCL_NODES="$HOST:$SERVICE_PORT"
}
stop() { kill "$svc"; wait "$svc" 2>/dev/null || true; svc=""; }
median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }
sessions_of() { # label vendors pause_s: SESSIONS programs, the median of each figure
    for _ in $(seq "$sessions"); do
        OCL_ICD_VENDORS="$work/$2" "$work/setup"
        [ "$3" = 0 ] || sleep "$3"
    done > "$work/s.txt"
    printf '%-26s' "$1"
    for f in connect context build first total; do
        printf ' %s %s' "$f" "$(awk -v f="$f" '{ for (i = 1; i < NF; i++) if ($i == f) print $(i + 1) }' "$work/s.txt" | median)"
    done
    echo
}
pause_s=$(awk -v ms="$pause_ms" 'BEGIN { print ms / 1000 }')
for round in $(seq "$rounds"); do
    echo "== round $round (setup: median of $sessions sessions, µs; small: median/p90/p99 µs)"
    sessions_of "native" local "$pause_s"
    for mode in none session shared; do
        start "$mode"
        sessions_of "$mode back-to-back" remote 0
        sessions_of "$mode paced ${pause_ms}ms" remote "$pause_s"
        printf '%-26s ' "$mode small shm"
        OCL_ICD_VENDORS="$work/remote" "$work/overhead" small "$iters"
        printf '%-26s ' "$mode small tcp"
        OCL_ICD_VENDORS="$work/remote" NETACCEL_OPENCL_SHM=0 "$work/overhead" small "$iters"
        echo "$mode RSS KiB: service $(awk '/VmRSS/ { print $2 }' "/proc/$svc/status"), runtime processes:" \
            "$(for p in $(pgrep -P "$svc"); do awk '/VmRSS/ { printf "%s ", $2 }' "/proc/$p/status"; done)"
        stop
    done
done
