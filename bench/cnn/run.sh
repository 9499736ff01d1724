#!/usr/bin/env bash
# The digits CNN (models/digits) over RAC against onnxruntime in process on the same
# core: calls/s and p50 for one image and for a batch of 64, for each of the node's
# two engines. Goal: the node's calls/s at least 80 % of onnxruntime's. Method and
# figures: docs/benchmarks.md ("The digits CNN over RAC").
#
#   onnxruntime (Python)  bench/cnn/ort_inproc.py: one thread, sequential, in process
#                         (the floor the goal is measured against)
#   tract, onnxruntime    crates/onnx/examples/inproc.rs: each engine of the node in
#                         process, no network (a slot's session, as the node runs it)
#   RAC ENGINE, 1         netaccel-bench rac://…/ID (the model's id), one connection, 1
#                         call in flight: latency, and one closed-loop client's calls/s
#   RAC ENGINE, P         the same with INFLIGHT calls in flight: what the node's one
#                         core sustains (the comparison with the floor's calls/s)
#   RAC echo, 1 / P       the built-in echo with the same request size: the node's own
#                         cost of a RAC call with no model (the transport floor; echo
#                         answers as many bytes as it gets, the model 40 per image)
#
# The repository the node serves is made in the run's folder: the committed digits
# model twice, as `digits` (tract) and `digits_ort` (backend = "onnxruntime", the
# library of the onnxruntime wheel, or ORT_LIB).
#
# Everything that computes (onnxruntime, tract, the node with one network thread and
# its slot workers) is pinned to SERVER_CPU; netaccel-bench to CLIENT_CPU. The node
# runs with its defaults but for its slot workers' scheduling class: the class of the
# in-process runs they are compared with. Under PRIO=rt that is slot_worker_policy =
# "inherit" (SCHED_FIFO, as the node and the in-process runs): a SCHED_OTHER worker
# waited on SERVER_CPU's run queue behind the shared machine's other processes for
# 60–190 µs a batch, which the in-process runs, real-time, never did, and the network
# thread preempted it at every packet. Otherwise "normal" (the default SCHED_IDLE
# worker would get only what the other processes leave). One image (26 k multiply-
# adds) runs inline on the network thread, a batch of 64 on the slot's worker. The
# payload is netaccel-bench's (lower-case letters read as float32: finite
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
#   ORT_LIB [the onnxruntime wheel's capi/libonnxruntime.so*]
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH_NAME=cnn
HOST=127.0.0.1
# shellcheck source=bench/common/lib.sh
source "$ROOT/bench/common/lib.sh"
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
ORT_LIB=${ORT_LIB:-$(python3 -c 'import glob, os, onnxruntime; print(sorted(glob.glob(os.path.join(os.path.dirname(onnxruntime.__file__), "capi", "libonnxruntime.so*")))[0])')} ||
    die "no libonnxruntime.so in the onnxruntime wheel: set ORT_LIB"
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

REPO=$RUN_DIR/models
mkdir -p "$REPO/digits/1" "$REPO/digits_ort/1"
cp "$ROOT/models/digits/config.toml" "$REPO/digits/"
cp "$MODEL" "$REPO/digits/1/"
cp "$MODEL" "$REPO/digits_ort/1/"
{ echo 'backend = "onnxruntime"'; cat "$ROOT/models/digits/config.toml"; } >"$REPO/digits_ort/config.toml"
pick_ports HTTP_PORT RAC_PORT
WORKER_POLICY=normal
[[ "$PRIO" == rt ]] && WORKER_POLICY=inherit
printf 'slot_worker_policy = "%s"\nslot_worker_nice = 0\nmodels_dir = "%s"\nonnxruntime_library = "%s"\n' \
    "$WORKER_POLICY" "$REPO" "$ORT_LIB" >"$RUN_DIR/node.toml"
taskset -c "$SERVER_CPU" "${PRIO_CMD[@]}" "$NODE_BIN" --config "$RUN_DIR/node.toml" \
    --http "$HOST:$HTTP_PORT" --rac "$HOST:$RAC_PORT" --io-threads 1 --log-level warn \
    >"$RUN_DIR/node.log" 2>&1 &
node_pid=$!
server_up netaccel-node "$node_pid" "$HTTP_PORT" "$RUN_DIR/node.log" || exit 1
# netaccel-bench names a RAC accelerator that is not a built-in by its id.
model_id() {
    curl -s "http://$HOST:$HTTP_PORT/v1/accelerators" |
        python3 -c 'import json, sys; print(next(a["id"] for a in json.load(sys.stdin) if a["name"] == sys.argv[1]))' "$1" ||
        die "the node does not list the model $1 (see $RUN_DIR/node.log)"
}
TRACT_ID=$(model_id digits) || exit 1
ORT_ID=$(model_id digits_ort) || exit 1
declare -A TARGET=([tract]=$TRACT_ID [onnxruntime]=$ORT_ID [echo]=echo)

# One JSON line per measurement: {"what","batch","round","calls_per_s","p50_us",…}.
results="$RUN_DIR/results.jsonl"
rac() { # ENGINE BATCH INFLIGHT ROUND
    local what=$1
    shift
    local size=$(($1 * 256)) file="$RUN_DIR/rac-$what-b$1-p$2-r$3.json"
    timeout 600 "${PRIO_CMD[@]}" taskset -c "$CLIENT_CPU" "$BENCH_BIN" run "rac://$HOST:$RAC_PORT/${TARGET[$what]}" \
        --size "$size" --conns 1 --inflight "$2" --calls "$CALLS" --warmup "$WARMUP" \
        --label "RAC $what b$1 p$2" --note "node on CPU $SERVER_CPU" --json "$file" --quiet >/dev/null 2>>"$RUN_DIR/bench.log" ||
        die "netaccel-bench failed (see $RUN_DIR/bench.log)"
    python3 - "$file" "$1" "$2" "$3" "$what" >>"$results" <<'PY'
import json, sys
path, batch, inflight, rnd, what = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
doc = json.load(open(path))
s = doc["scenarios"][0] if "scenarios" in doc else doc
us = lambda summary, key: summary[key] / 1000 if summary else None
assert s["ok"] >= s["sent"] * 0.999, f"errors: {s['errors']}"
print(json.dumps({
    "what": f"RAC {what}, {inflight} in flight", "batch": batch, "round": rnd,
    "calls_per_s": s["calls_per_s"], "p50_us": us(s["latency"], "p50_ns"),
    "exec_p50_us": us(s.get("server_exec"), "p50_ns"),
    "queue_p50_us": us(s.get("server_queue"), "p50_ns"),
}))
PY
}
inproc() { # ENGINE BATCH ROUND
    local line
    case $1 in
    python) line=$(taskset -c "$SERVER_CPU" "${PRIO_CMD[@]}" python3 "$HERE/ort_inproc.py" "$MODEL" "$2" "$CALLS") ;;
    tract) line=$(taskset -c "$SERVER_CPU" "${PRIO_CMD[@]}" "$INPROC" "$REPO" digits "$2" "$CALLS") ;;
    onnxruntime) line=$(taskset -c "$SERVER_CPU" "${PRIO_CMD[@]}" "$INPROC" "$REPO" digits_ort "$2" "$CALLS" "$ORT_LIB") ;;
    esac
    python3 -c 'import json, sys; d = json.loads(sys.argv[1]); d["what"] = sys.argv[2] + " in process"; d["round"] = int(sys.argv[3]); print(json.dumps(d))' \
        "$line" "$1" "$3" >>"$results"
}

t0=$(date +%s)
for ((r = 1; r <= ROUNDS; r++)); do
    for batch in 1 64; do
        log "round $r/$ROUNDS, batch $batch"
        awake_start "$SERVER_CPU,$CLIENT_CPU"
        for engine in python tract onnxruntime; do inproc "$engine" "$batch" "$r"; done
        for engine in tract onnxruntime echo; do rac "$engine" "$batch" 1 "$r"; done
        awake_stop
        # Pipelined: the node's slot worker must not share its CPU with a busy loop.
        for engine in tract onnxruntime echo; do rac "$engine" "$batch" "$INFLIGHT" "$r"; done
    done
done

report() {
    python3 - "$results" "$INFLIGHT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
inflight = sys.argv[2]
order = ["python in process", "tract in process", "onnxruntime in process"] + [
    f"RAC {e}, {p} in flight" for p in ("1", inflight) for e in ("tract", "onnxruntime", "echo")]
label = {"python in process": "onnxruntime in process (Python, the floor)",
         "tract in process": "tract in process (Rust)", "onnxruntime in process": "onnxruntime in process (Rust, ort)"}
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
    floor = med["python in process"][0]
    for what, (cps, p50, ex) in med.items():
        ex_s = f"{ex:.1f}" if ex is not None else "–"
        print(f"| {batch} | {label.get(what, what)} | {cps:,.0f} | {cps * batch:,.0f} | {p50:.1f} | {ex_s} | {cps / floor * 100:.0f} % |")
PY
}
table="$RUN_DIR/table.md"
report >"$table"
{
    echo "bench/cnn/run.sh, $(date -u +%Y-%m-%d), $ROUNDS rounds of $CALLS calls (medians), PRIO=$PRIO;"
    echo "onnxruntime, tract and the node (1 network thread, slot workers $WORKER_POLICY) on CPU $SERVER_CPU, netaccel-bench on CPU $CLIENT_CPU; load average $(cut -d' ' -f1-3 /proc/loadavg)."
    echo "Echo's row: the same request size, answered with as many bytes (the model answers 40 B an image)."
    echo
    cat "$table"
} >"$OUT_DIR/cnn-$STAMP.md"
cat "$OUT_DIR/cnn-$STAMP.md"
log "measured in $(($(date +%s) - t0)) s; written to ${OUT_DIR#"$ROOT"/}/cnn-$STAMP.md (raw in ${RUN_DIR#"$ROOT"/})"
if [[ "$UPDATE_DOCS" == 1 ]]; then replace_docs_block cnn "$OUT_DIR/cnn-$STAMP.md" || true; fi
