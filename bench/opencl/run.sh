#!/usr/bin/env bash
# Remote OpenCL overhead: native PoCL vs the netaccel ICD through a local node service,
# with the shared-memory path (same host) and with the network path forced.
#
#   bench/opencl/run.sh [ITERATIONS]
#
# Needs gcc, ocl-icd-opencl-dev, opencl-headers and pocl-opencl-icd. Prints one line per
# run of overhead.c (median/p90/p99 in microseconds, or MiB/s for the 256 MiB writes).
set -euo pipefail
cd "$(dirname "$0")/../.."
iters="${1:-2000}"
target="${CARGO_TARGET_DIR:-target}"
cargo build --release -q -p ocl-remote -p ocl-icd
work="$(mktemp -d)"
trap 'kill "$svc" 2>/dev/null || true; rm -rf "$work"' EXIT
gcc -O2 -Wall -o "$work/overhead" bench/opencl/overhead.c -lOpenCL
mkdir -p "$work/local" "$work/remote"
for icd in /etc/OpenCL/vendors/*.icd; do
    [ "$(basename "$icd")" = netaccel.icd ] || cp "$icd" "$work/local/"
done
realpath "$target/release/libnetaccel_opencl.so" > "$work/remote/netaccel.icd"
port=$((20000 + RANDOM % 20000))
"$target/release/netaccel-ocl-service" --listen "127.0.0.1:$port" > "$work/service.log" 2>&1 &
svc=$!
sleep 1
export NETACCEL_OPENCL_NODES="127.0.0.1:$port"
run() { # label, vendors dir, extra env, mode, iterations
    printf '%-22s ' "$1"
    env OCL_ICD_VENDORS="$work/$2" $3 "$work/overhead" "$4" "$5"
}
for mode in small large; do
    run "native" local "" "$mode" "$iters"
    run "remote shared-memory" remote "" "$mode" "$iters"
    run "remote network" remote "NETACCEL_OPENCL_SHM=0" "$mode" "$iters"
done
run "native" local "" bw 5
run "remote shared-memory" remote "" bw 5
run "remote network" remote "NETACCEL_OPENCL_SHM=0" bw 3
