#!/usr/bin/env bash
# Data-path faults for nodes under load (docs/faults.md): real nodes in network
# namespaces, a real registry, client threads calling over HTTP and RAC through their
# bindings, every answer checked against its call's tag; one fault at a time, each
# SECONDS long (default 10; ./test.sh runs 3). Writes faults.tsv and faults.md (the
# table) to FAULTS_OUT (default bench/out/faults-DATE) and exits non-zero when a call
# was answered wrong or never answered.
#
#   bench/faults/run.sh [SECONDS]
#
# FAULTS_KINDS (comma-separated, docs/faults.md) runs some kinds only. Needs root and
# network namespaces (nftables); without them it skips, and with CI set that is a
# failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${1:-10}
out=${FAULTS_OUT:-bench/out/faults-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
out=$(cd "$out" && pwd)

# The node the test starts is the one beside the registry's test executable; the
# executable itself is taken from the workspace's test build, as ./test.sh's other
# steps do (`cargo test -p netaccel-registry` would resolve features for that one
# package and build a second copy of much of the tree).
cargo build -q -p netaccel-node -p netaccel-registry
test_bin=$(cargo test --workspace --no-run --message-format=json 2>/dev/null |
  bench/tools/test_executables.py crates/registry faults)

(cd crates/registry && FAULTS_SECONDS="$seconds" FAULTS_OUT="$out" \
  "$test_bin" --ignored --exact data_path_faults_answer_every_call_once_and_never_wrong --nocapture)
echo "==> results in $out"
