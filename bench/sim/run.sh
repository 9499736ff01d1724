#!/usr/bin/env bash
# netaccel-sim's speed: simulated calls per second of wall time on one core, and the
# ratio of simulated to wall time, for single-node scenarios (issue 34 asks for at
# least 10^6 calls/s). Builds the simulator in release, runs each scenario ROUNDS
# times pinned to one core (taskset, when there), and prints the median of each.
#
#   bench/sim/run.sh                         # speed.toml and md1.toml, 3 rounds
#   ROUNDS=5 CORE=1 bench/sim/run.sh crates/sim/scenarios/speed.toml
#
# The experiments of docs/simulation.md: bench/sim/run.sh --experiments (writes
# docs/img/sim/*.svg and *.csv).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-3}
CORE=${CORE:-0}

cargo build --release -q -p netaccel-sim
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
sim="$target_dir/release/netaccel-sim"
pin=()
if command -v taskset >/dev/null; then pin=(taskset -c "$CORE"); fi

if [[ "${1:-}" == "--experiments" ]]; then
  out=docs/img/sim
  mkdir -p "$out"
  for e in crates/sim/scenarios/*.experiment.toml; do
    "${pin[@]}" "$sim" experiment "$e" --out "$out" >/dev/null
    rm -f "$out/$(basename "${e%.toml}").json"
    echo "$e -> $out/$(basename "${e%.toml}").svg"
  done
  exit 0
fi

scenarios=("$@")
if ((${#scenarios[@]} == 0)); then
  scenarios=(crates/sim/scenarios/speed.toml crates/sim/scenarios/md1.toml)
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf '%-40s %14s %14s %12s\n' scenario "calls/s" "sim s/wall s" "wall s"
for s in "${scenarios[@]}"; do
  rates=() ratios=() walls=()
  for _ in $(seq "$ROUNDS"); do
    line=$("${pin[@]}" "$sim" run "$s" --out "$out" --no-calls 2>&1 >/dev/null | grep '^wall ')
    # wall W s: R calls/s, X simulated s per wall s
    read -r _ wall _ rate _ ratio _ <<<"$(echo "$line" | tr -d ':,')"
    rates+=("$rate") ratios+=("$ratio") walls+=("$wall")
  done
  median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
  printf '%-40s %14s %14s %12s\n' "$s" "$(median "${rates[@]}")" "$(median "${ratios[@]}")" "$(median "${walls[@]}")"
done
