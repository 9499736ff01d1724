#!/usr/bin/env bash
# The RAC clients side by side (issue 35): 64-byte echo on one connection against one
# node, for each client's bench program bench/clients/<language>/run.sh (discovered:
# adding a language is adding a folder): synchronous calls (one at a time: calls/s and
# p50), and calls/s with INFLIGHT calls in flight, each against the Rust client's in
# the same run. With ROUNDS > 1 the clients take turns, round after round (noise on a
# shared machine then falls on every client alike), and the report gives medians: of
# each figure, and of the per-round ratios to Rust.
#
# Goal: C and Go within 10 % of Rust's calls/s and within 5 µs of its p50; Java and
# TypeScript within 2x.
#
# Usage: bench/clients/run.sh
# Environment: SECONDS_PER [2] seconds per measurement; ROUNDS [1]; INFLIGHT [32];
#   SIZE [64]; PROFILE [release] (the node's and the programs' build); NODE_BIN
#   [target/$PROFILE/netaccel-node]; TARGET_DIR [unset] (another checkout's cargo target
#   directory: its node and its Rust and C programs are measured, and no Rust is built;
#   unset, this checkout's are built); NODE_CPU [0] and CLIENT_CPU [1] (taskset; empty:
#   no pinning); REQUIRE_ALL [unset] (1: a client that cannot be built fails the run
#   instead of being left out); OUT_DIR [bench/out]. Writes OUT_DIR/clients-DATE.md and
#   the raw lines beside it (clients-DATE.jsonl).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
seconds=${SECONDS_PER:-2}
rounds=${ROUNDS:-1}
inflight=${INFLIGHT:-32}
size=${SIZE:-64}
export PROFILE=${PROFILE:-release}
node_cpu=${NODE_CPU-0}
client_cpu=${CLIENT_CPU-1}
out_dir=${OUT_DIR:-$root/bench/out}
target=${TARGET_DIR:-$(cd "$root" && cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')}
node_bin=${NODE_BIN:-$target/$PROFILE/netaccel-node}
if [[ ! -x $node_bin && -z ${TARGET_DIR:-} ]]; then
  (cd "$root" && cargo build -q $([[ $PROFILE == release ]] && echo --release) -p netaccel-node)
fi
pin() { local cpu=$1; shift; if [[ -n $cpu ]]; then taskset -c "$cpu" "$@"; else "$@"; fi; }

work=$(mktemp -d)
trap 'kill "$node_pid" 2>/dev/null || true; rm -rf "$work"' EXIT
node_cmd=("$node_bin" --http 127.0.0.1:0 --rac 127.0.0.1:0 --grpc off --io-threads 1 --log-level info)
[[ -z $node_cpu ]] || node_cmd=(taskset -c "$node_cpu" "${node_cmd[@]}")
# exec: $! is the node itself, so that the trap's kill reaches it.
(exec "${node_cmd[@]}" >/dev/null 2>"$work/node.log") &
node_pid=$!
for _ in $(seq 300); do
  rac=$(grep -o 'rac=[0-9.]*:[0-9]*' "$work/node.log" | head -1 | cut -d= -f2 || true)
  [[ -n $rac ]] && break
  sleep 0.1
done
[[ -n $rac ]] || { echo "the node did not start:" >&2; cat "$work/node.log" >&2; exit 1; }

programs=("$here/rust/run.sh")
for p in "$here"/*/run.sh; do [[ $p == "$here/rust/run.sh" ]] || programs+=("$p"); done
built=()
: > "$work/lines"
for p in "${programs[@]}"; do
  lang=$(basename "$(dirname "$p")")
  if "$p" --build >"$work/build.log" 2>&1; then
    built+=("$p")
    continue
  fi
  echo "==> $lang: not built, left out: $(tail -3 "$work/build.log")" >&2
  [[ -z ${REQUIRE_ALL:-} ]] || exit 1
  echo "{\"client\": \"$lang\", \"not_built\": true}" >> "$work/lines"
done
for round in $(seq "$rounds"); do
  for p in "${built[@]}"; do
    lang=$(basename "$(dirname "$p")")
    echo "==> round $round of $rounds: $lang" >&2
    line=$(pin "$client_cpu" "$p" --node "$rac" --seconds "$seconds" --size "$size" --inflight "$inflight" | tail -1)
    python3 -c 'import json, sys; l = json.loads(sys.argv[1]); l["round"] = int(sys.argv[2]); print(json.dumps(l))' \
      "$line" "$round" >> "$work/lines"
  done
done

mkdir -p "$out_dir"
stem="$out_dir/clients-$(date -u +%Y%m%d-%H%M%S)"
cp "$work/lines" "$stem.jsonl"
python3 "$here/report.py" "$work/lines" "$seconds" "$inflight" "$size" "$rounds" > "$stem.md"
cat "$stem.md"
echo "(written to $stem.md)"
