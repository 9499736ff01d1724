#!/usr/bin/env bash
# The digits CNN (models/digits) over RAC against onnxruntime in process on the same
# core: calls/s and p50 for one image and for a batch of 64. Goal: the node's calls/s
# at least 80 % of onnxruntime's. Method and figures: docs/benchmarks.md ("The digits
# CNN over RAC").
#
#   onnxruntime   bench/cnn/ort_inproc.py: one thread, sequential, in process (floor)
#   tract         crates/onnx/examples/inproc.rs: the node's engine in process, no
#                 network (a slot's session, as the node runs it)
#   RAC, 1        netaccel-bench rac://…/ID (the model's id), one connection, 1 call in flight:
#                 latency, and calls/s of one closed-loop client
#   RAC, P        the same with INFLIGHT calls in flight: what the node's one core
#                 sustains (the comparison with the in-process floor's calls/s)
#
# Everything that computes (onnxruntime, tract, the node with one network thread and
# its slot workers) is pinned to SERVER_CPU; netaccel-bench to CLIENT_CPU. The node
# runs with its defaults but for slot_worker_policy = "normal" (the default SCHED_IDLE
# worker would get only what the shared machine's other processes leave): one image
# (26 k multiply-adds) runs inline on the network thread, a batch of 64 on the slot's
# worker. The payload is netaccel-bench's (lower-case letters read as float32: finite
# values, the same bytes for every engine). Each figure is the median over ROUNDS
# rounds; the node's own split (queue, execution, the rest) comes from netaccel-bench.
#
# Usage: bench/cnn/run.sh
#
# Environment (defaults in brackets):
#   CALLS [20000]  ROUNDS [3]  INFLIGHT [4]  WARMUP [0.5] s
#   SERVER_CPU [0]  CLIENT_CPU [1]  PRIO [auto]: rt (chrt -f 50, root), nice, none
#   KEEP_AWAKE [1]  OUT_DIR [bench/out]  UPDATE_DOCS [1]
#   NODE_BIN BENCH_BIN [target/release/…]  (built when missing)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH_NAME=cnn
HOST=127.0.0.1
# shellcheck source=bench/lib.sh
source "$ROOT/bench/lib.sh"
CALLS=${CALLS:-20000}
ROUNDS=${ROUNDS:-3}
INFLIGHT=${INFLIGHT:-4}
WARMUP=${WARMUP:-0.5}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
PRIO=${PRIO:-auto}
OUT_DIR=${OUT_DIR:-$ROOT/bench/out}
UPDATE_DOCS=${UPDATE_DOCS:-1}
NODE_BIN=${NODE_BIN:-$ROOT/target/release/netaccel-node}
BENCH_BIN=${BENCH_BIN:-$ROOT/target/release/netaccel-bench}
MODEL=$ROOT/models/digits/1/model.onnx
choose_prio
build_release_bins
python3 -c "import onnxruntime, numpy" 2>/dev/null || die "onnxruntime and numpy are needed (pip install onnxruntime)"
log "building the tract in-process runner (release)"
(cd "$ROOT" && cargo build --release -q -p netaccel-onnx --example inproc) || die "cargo build --example inproc failed"
INPROC=$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')/release/examples/inproc

STAMP=$(date +%Y%m%d-%H%M%S)
RUN_DIR="$OUT_DIR/cnn-$STAMP"
mkdir -p "$RUN_DIR"
node_pid=
cleanup() {
    [[ -n "$node_pid" ]] && kill "$node_pid" 2>/dev/null && wait "$node_pid" 2>/dev/null
    awake_stop
}
trap cleanup EXIT

pick_ports HTTP_PORT RAC_PORT
printf 'slot_worker_policy = "normal"\nslot_worker_nice = 0\nmodels_dir = "%s"\n' "$ROOT/models" >"$RUN_DIR/node.toml"
taskset -c "$SERVER_CPU" "${PRIO_CMD[@]}" "$NODE_BIN" --config "$RUN_DIR/node.toml" \
    --http "$HOST:$HTTP_PORT" --rac "$HOST:$RAC_PORT" --io-threads 1 --log-level warn \
    >"$RUN_DIR/node.log" 2>&1 &
node_pid=$!
server_up netaccel-node "$node_pid" "$HTTP_PORT" "$RUN_DIR/node.log" || exit 1
# netaccel-bench names a RAC accelerator that is not a built-in by its id.
DIGITS_ID=$(curl -s "http://$HOST:$HTTP_PORT/v1/accelerators" |
    python3 -c 'import json, sys; print(next(a["id"] for a in json.load(sys.stdin) if a["name"] == "digits"))') ||
    die "the node does not list the digits model (see $RUN_DIR/node.log)"

# One JSON line per measurement: {"what","batch","round","calls_per_s","p50_us",…}.
results="$RUN_DIR/results.jsonl"
rac() { # BATCH INFLIGHT ROUND
    local size=$(($1 * 256)) file="$RUN_DIR/rac-b$1-p$2-r$3.json"
    timeout 600 "${PRIO_CMD[@]}" taskset -c "$CLIENT_CPU" "$BENCH_BIN" run "rac://$HOST:$RAC_PORT/$DIGITS_ID" \
        --size "$size" --conns 1 --inflight "$2" --calls "$CALLS" --warmup "$WARMUP" \
        --label "RAC b$1 p$2" --note "node on CPU $SERVER_CPU" --json "$file" --quiet >/dev/null 2>>"$RUN_DIR/bench.log" ||
        die "netaccel-bench failed (see $RUN_DIR/bench.log)"
    python3 - "$file" "$1" "$2" "$3" >>"$results" <<'PY'
import json, sys
path, batch, inflight, rnd = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
doc = json.load(open(path))
s = doc["scenarios"][0] if "scenarios" in doc else doc
us = lambda summary, key: summary[key] / 1000 if summary else None
assert s["ok"] >= s["sent"] * 0.999, f"errors: {s['errors']}"
print(json.dumps({
    "what": f"RAC, {inflight} in flight", "batch": batch, "round": rnd,
    "calls_per_s": s["calls_per_s"], "p50_us": us(s["latency"], "p50_ns"),
    "exec_p50_us": us(s.get("server_exec"), "p50_ns"),
    "queue_p50_us": us(s.get("server_queue"), "p50_ns"),
}))
PY
}
inproc() { # ENGINE BATCH ROUND
    local line
    if [[ $1 == onnxruntime ]]; then
        line=$(taskset -c "$SERVER_CPU" "${PRIO_CMD[@]}" python3 "$HERE/ort_inproc.py" "$MODEL" "$2" "$CALLS")
    else
        line=$(taskset -c "$SERVER_CPU" "${PRIO_CMD[@]}" "$INPROC" "$ROOT/models" digits "$2" "$CALLS")
    fi
    python3 -c 'import json, sys; d = json.loads(sys.argv[1]); d["what"] = sys.argv[2] + " in process"; d["round"] = int(sys.argv[3]); print(json.dumps(d))' \
        "$line" "$1" "$3" >>"$results"
}

t0=$(date +%s)
for ((r = 1; r <= ROUNDS; r++)); do
    for batch in 1 64; do
        log "round $r/$ROUNDS, batch $batch"
        awake_start "$SERVER_CPU,$CLIENT_CPU"
        inproc onnxruntime "$batch" "$r"
        inproc tract "$batch" "$r"
        rac "$batch" 1 "$r"
        awake_stop
        # Pipelined: the node's slot worker must not share its CPU with a busy loop.
        rac "$batch" "$INFLIGHT" "$r"
    done
done

report() {
    python3 - "$results" "$INFLIGHT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
inflight = sys.argv[2]
order = ["onnxruntime in process", "tract in process", "RAC, 1 in flight", f"RAC, {inflight} in flight"]
print("| batch | what | calls/s | images/s | p50 µs | node exec p50 µs | vs onnxruntime calls/s |")
print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
for batch in (1, 64):
    med = {}
    for what in order:
        sel = [r for r in rows if r["batch"] == batch and r["what"] == what]
        if not sel:
            continue
        m = lambda k: statistics.median(r[k] for r in sel) if all(r.get(k) is not None for r in sel) else None
        med[what] = (m("calls_per_s"), m("p50_us"), m("exec_p50_us"))
    floor = med["onnxruntime in process"][0]
    for what, (cps, p50, ex) in med.items():
        ex_s = f"{ex:.1f}" if ex is not None else "–"
        print(f"| {batch} | {what} | {cps:,.0f} | {cps * batch:,.0f} | {p50:.1f} | {ex_s} | {cps / floor * 100:.0f} % |")
PY
}
table="$RUN_DIR/table.md"
report >"$table"
{
    echo "bench/cnn/run.sh, $(date -u +%Y-%m-%d), $ROUNDS rounds of $CALLS calls (medians), PRIO=$PRIO;"
    echo "onnxruntime, tract and the node (1 network thread) on CPU $SERVER_CPU, netaccel-bench on CPU $CLIENT_CPU."
    echo
    cat "$table"
} >"$OUT_DIR/cnn-$STAMP.md"
cat "$OUT_DIR/cnn-$STAMP.md"
log "measured in $(($(date +%s) - t0)) s; written to ${OUT_DIR#"$ROOT"/}/cnn-$STAMP.md (raw in ${RUN_DIR#"$ROOT"/})"
if [[ "$UPDATE_DOCS" == 1 ]]; then replace_docs_block cnn "$OUT_DIR/cnn-$STAMP.md" || true; fi
