#!/usr/bin/env bash
# Before/after: the node of an older commit and the node of the working tree through the
# same floor comparisons (bench/rac: RAC echo against the C TCP echo; bench/http: HTTP
# against the C epoll responder and nginx), alternating builds, so that a latency or CPU
# change shows before it lands.
#
# Each pass runs every experiment in EXPERIMENTS once per build, in the order
# base, tree (then tree, base on the next pass, so that a drift of the machine does not
# favour one build); each experiment's own rounds, CPU pinning and keep-awake loop apply
# (see its run.sh). Each run's summary table (the experiment's own: the node's figures
# beside the floor's and their gap) is printed as it ends, and summary.md puts them side
# by side, grouped by experiment and build. Last, the gaps: each experiment's criteria
# (the node's gap to its floor, decided by the experiment on the median of its per-round
# gaps; a ratio where the criterion is one) for each build as the median over passes,
# and the median over passes of the per-pass difference, tree minus base: the change
# the working tree makes, with the machine's drift between passes taken out.
#
# Usage: bench/regress/run.sh [BASE]        BASE: a commit (default: HEAD~1)
#
# Environment (defaults in brackets):
#   PASSES [2]  EXPERIMENTS ["rac http"]  ROUNDS [3]  CALLS [20000] (rac)
#   BASE_BIN  a base build to use instead of building BASE
#   TREE_BIN  a working-tree build to use instead of building it (release)
#   OUT_DIR [bench/out]
# Builds (release): BASE in a temporary worktree with its own target folder, cached
# under bench/out/regress-build/BASE_SHA; the working tree into target/release.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
cd "$ROOT"

BASE=${1:-HEAD~1}
PASSES=${PASSES:-2}
EXPERIMENTS=${EXPERIMENTS:-"rac http"}
OUT_DIR=${OUT_DIR:-$ROOT/bench/out}
export ROUNDS=${ROUNDS:-3} CALLS=${CALLS:-20000} UPDATE_DOCS=0

base_sha=$(git rev-parse --verify "$BASE^{commit}")
stamp=$(date -u +%Y%m%dT%H%M%SZ)
run_dir="$OUT_DIR/regress-$stamp"
mkdir -p "$run_dir"

# The base build: a detached worktree of BASE, built once and kept by its commit.
base_bin=${BASE_BIN:-}
if [[ -z "$base_bin" ]]; then
  build="$OUT_DIR/regress-build/$base_sha"
  base_bin="$build/target/release/netaccel-node"
  if [[ ! -x "$base_bin" ]]; then
    echo "==> building the node of $BASE (${base_sha:0:12})"
    rm -rf "$build/src"
    mkdir -p "$build"
    git worktree add --detach -q "$build/src" "$base_sha"
    trap 'git worktree remove --force "$build/src" 2>/dev/null || true' EXIT
    (cd "$build/src" && CARGO_TARGET_DIR="$build/target" cargo build --release -q -p netaccel-node)
  fi
fi
tree_bin=${TREE_BIN:-}
if [[ -z "$tree_bin" ]]; then
  echo "==> building the node of the working tree"
  cargo build --release -q -p netaccel-node -p netaccel-bench
  tree_bin="$ROOT/target/release/netaccel-node"
fi

# run PASS BUILD BIN EXPERIMENT: one run of an experiment with one build's node.
run() {
  local log="$run_dir/$4-$2-pass$1.txt"
  echo "==> pass $1, $4, $2 build"
  NODE_BIN="$3" OUT_DIR="$run_dir/out" "bench/$4/run.sh" > "$log" 2>&1 || {
    echo "bench/$4/run.sh failed with the $2 build: see $log" >&2
    return 1
  }
  first_table "$log"
}

# first_table FILE: the experiment's summary, the first table it prints.
first_table() { awk '/^\|/ { p = 1 } p && !/^\|/ { exit } p' "$1"; }

for pass in $(seq "$PASSES"); do
  for experiment in $EXPERIMENTS; do
    if ((pass % 2)); then order="base tree"; else order="tree base"; fi
    for build in $order; do
      if [[ $build == base ]]; then bin=$base_bin; else bin=$tree_bin; fi
      run "$pass" "$build" "$bin" "$experiment"
    done
  done
done

# The side-by-side table: each experiment's summary rows, per build, every pass.
{
  echo "# Before/after: ${base_sha:0:12} (base) against the working tree ($(git rev-parse --short HEAD)$(git diff --quiet || echo ', with changes'))"
  echo
  echo "Machine: $(nproc) CPUs, $(uname -r); ROUNDS=$ROUNDS, PASSES=$PASSES, CALLS=$CALLS."
  for experiment in $EXPERIMENTS; do
    echo
    echo "## $experiment"
    for build in base tree; do
      for pass in $(seq "$PASSES"); do
        echo
        echo "### $build build, pass $pass"
        echo
        first_table "$run_dir/$experiment-$build-pass$pass.txt"
      done
    done
  done
} > "$run_dir/summary.md"
python3 "$HERE/gaps.py" "$run_dir" "$PASSES" $EXPERIMENTS | tee "$run_dir/gaps.md"
echo "==> side by side: $run_dir/summary.md; the gaps: $run_dir/gaps.md"
