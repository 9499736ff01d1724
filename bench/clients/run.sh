#!/usr/bin/env bash
# The RAC clients side by side (issue 35): 64-byte echo on one connection against one
# node, for each client's bench program bench/clients/<language>/run.sh (discovered:
# adding a language is adding a folder): the p50 of synchronous calls, and calls/s
# with INFLIGHT calls in flight, each against the Rust client's in the same run.
#
# Goal: C and Go within 10 % of Rust's calls/s and within 5 µs of its p50; Java and
# TypeScript within 2x.
#
# Usage: bench/clients/run.sh
# Environment: SECONDS_PER [2] seconds per measurement; INFLIGHT [32]; SIZE [64];
#   PROFILE [release] (the node's and the programs' build); NODE_BIN
#   [target/$PROFILE/netaccel-node]; NODE_CPU [0] and CLIENT_CPU [1] (taskset; empty:
#   no pinning); OUT_DIR [bench/out]. Writes OUT_DIR/clients-DATE.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
seconds=${SECONDS_PER:-2}
inflight=${INFLIGHT:-32}
size=${SIZE:-64}
export PROFILE=${PROFILE:-release}
node_cpu=${NODE_CPU-0}
client_cpu=${CLIENT_CPU-1}
out_dir=${OUT_DIR:-$root/bench/out}
target=$(cd "$root" && cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
node_bin=${NODE_BIN:-$target/$PROFILE/netaccel-node}
if [[ ! -x $node_bin ]]; then
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
: > "$work/lines"
for p in "${programs[@]}"; do
  lang=$(basename "$(dirname "$p")")
  if ! "$p" --build >"$work/build.log" 2>&1; then
    echo "==> $lang: not built, skipped: $(tail -3 "$work/build.log")" >&2
    continue
  fi
  pin "$client_cpu" "$p" --node "$rac" --seconds "$seconds" --size "$size" --inflight "$inflight" | tail -1 >> "$work/lines"
done

mkdir -p "$out_dir"
report="$out_dir/clients-$(date -u +%Y%m%d-%H%M%S).md"
python3 - "$work/lines" "$seconds" "$inflight" "$size" > "$report" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
seconds, inflight, size = sys.argv[2:5]
base = next((l for l in lines if l["client"] == "rust"), None)
print(f"RAC clients, {size} B echo, 1 connection, {seconds} s per measurement, {inflight} in flight\n")
print("| client | sync p50 (µs) | vs Rust | pipelined calls/s | vs Rust | allocs/call |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for l in lines:
    dp = l["sync_p50_us"] - base["sync_p50_us"] if base else 0
    r = l["pipelined_calls_per_s"] / base["pipelined_calls_per_s"] if base else 1
    allocs = l.get("allocs_per_call")
    print(f"| {l['client']} | {l['sync_p50_us']:.1f} | {dp:+.1f} µs | {l['pipelined_calls_per_s']:,.0f} | {r:.2f}x | "
          f"{'' if allocs is None else f'{allocs:.1f}'} |")
PY
cat "$report"
echo "(written to $report)"
