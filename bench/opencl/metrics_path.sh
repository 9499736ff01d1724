#!/usr/bin/env bash
# The cost of the remote OpenCL service's metric updates per task, with
# prometheus-client handles (before) and in the shared metrics page (now); see
# bench/opencl/metrics_path/src/main.rs and docs/opencl.md, "Isolation".
#
#   bench/opencl/metrics_path.sh [ROUNDS] [TASKS]
set -euo pipefail
cd "$(dirname "$0")/metrics_path"
target="${CARGO_TARGET_DIR:-../../../target}/metrics-path-bench"
CARGO_TARGET_DIR="$target" cargo build --release -q
"$target/release/metrics-path-bench" "$@"
