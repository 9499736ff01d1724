#!/usr/bin/env bash
# clpeak on native PoCL and through the netaccel ICD (local node service), side by side.
#
#   bench/opencl/clpeak.sh [CLPEAK OPTIONS]   (default: bandwidth and latency tests)
#
# Needs clpeak, pocl-opencl-icd and ocl-icd-libopencl1. On a small VM the default set
# takes a few minutes per platform.
set -euo pipefail
cd "$(dirname "$0")/../.."
opts=("$@")
[ ${#opts[@]} -gt 0 ] || opts=(--global-bandwidth --transfer-bandwidth --kernel-latency)
# shellcheck source=bench/opencl/common.sh
source bench/opencl/common.sh
start_remote_service
OCL_ICD_VENDORS="$work/local" clpeak "${opts[@]}" > "$work/native.txt"
OCL_ICD_VENDORS="$work/remote" clpeak "${opts[@]}" > "$work/remote.txt"
paste "$work/native.txt" "$work/remote.txt" | awk -F'\t' '{ printf "%-50s | %s\n", $1, $2 }'
