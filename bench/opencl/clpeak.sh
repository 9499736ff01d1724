#!/usr/bin/env bash
# clpeak on native PoCL and through the netaccel ICD (local node service), side by side.
#
#   bench/opencl/clpeak.sh [CLPEAK OPTIONS]   (default: bandwidth and latency tests)
#
# Needs clpeak, pocl-opencl-icd and ocl-icd-libopencl1. On a small VM the default set
# takes a few minutes per platform.
set -euo pipefail
cd "$(dirname "$0")/../.."
target="${CARGO_TARGET_DIR:-target}"
opts=("$@")
[ ${#opts[@]} -gt 0 ] || opts=(--global-bandwidth --transfer-bandwidth --kernel-latency)
cargo build --release -q -p ocl-remote -p ocl-icd
work="$(mktemp -d)"
trap 'kill "$svc" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$work/local" "$work/remote"
for icd in /etc/OpenCL/vendors/*.icd; do
    [ "$(basename "$icd")" = netaccel.icd ] || cp "$icd" "$work/local/"
done
realpath "$target/release/libnetaccel_opencl.so" > "$work/remote/netaccel.icd"
port=$((20000 + RANDOM % 20000))
"$target/release/netaccel-ocl-service" --listen "127.0.0.1:$port" > "$work/service.log" 2>&1 &
svc=$!
sleep 1
OCL_ICD_VENDORS="$work/local" clpeak "${opts[@]}" > "$work/native.txt"
OCL_ICD_VENDORS="$work/remote" NETACCEL_OPENCL_NODES="127.0.0.1:$port" clpeak "${opts[@]}" > "$work/remote.txt"
paste "$work/native.txt" "$work/remote.txt" | awk -F'\t' '{ printf "%-50s | %s\n", $1, $2 }'
