#!/usr/bin/env bash
# The 1,000-node day of docs/simulation.md ("Cluster scale"): bench/sim/cluster-day.toml,
# one run per placement policy, each in a thread of its own. Builds the simulator in
# release, writes cluster-day.{json,csv,svg} and cluster-day-utilisation.svg into OUT
# (docs/img/sim by default; the JSON stays out of the docs), prints each policy's line
# and, on stderr, the wall time of each run and the ratio of simulated to wall time.
#
#   bench/sim/cluster.sh                     # about 10 minutes on 2 busy cores
#   OUT=sim-out bench/sim/cluster.sh bench/sim/cluster-day.toml
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-docs/img/sim}
scenario=${1:-bench/sim/cluster-day.toml}

cargo build --release -q -p netaccel-sim
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
mkdir -p "$OUT"
timer=()
if [[ -x /usr/bin/time ]]; then timer=(/usr/bin/time -f 'process: wall %e s, user %U s, sys %S s, max RSS %M kB'); fi
"${timer[@]}" "$target_dir/release/netaccel-sim" run "$scenario" --out "$OUT"
if [[ "$OUT" == docs/img/sim ]]; then rm -f "$OUT/$(basename "${scenario%.toml}").json"; fi
