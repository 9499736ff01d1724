#!/usr/bin/env bash
# netaccel vs NVIDIA Triton Inference Server on the Open Inference Protocol v2: 64 B
# to_uppercase over v2 HTTP (binary tensors) and gRPC, 1 and 16 connections, p50/p99
# and calls/s, the same closed-loop client (v2-load, crates/triton-bench) for both
# servers. Goal: netaccel's p50 at most 1/3 of Triton's and its calls/s at least 3x,
# on both transports. Method and figures: docs/benchmarks.md ("netaccel vs Triton").
#
# Usage: bench/triton/run.sh
#
# Triton runs from PyPI's nvidia-pytriton (tritonserver and its Python backend, the
# model a numpy function: bench/triton/serve_triton.py) in a venv made with Debian's
# python3 (python3-venv): the backend's stub is built against that Python, and another
# interpreter's standard library does not match it. The venv is made once and kept
# (VENV). Both servers run pinned to SERVER_CPU (netaccel with one network thread),
# the client to CLIENT_CPU, both up for the whole run. Each round measures every
# (transport, connections) pair on both servers, in alternating order, for DURATION s
# after WARMUP s; the figures are medians over ROUNDS rounds. The script stops by
# itself (and stops the servers) after about ROUNDS x 8 x (WARMUP + DURATION) s plus
# Triton's start.
#
# Environment (defaults in brackets):
#   DURATION [5]  WARMUP [1]  ROUNDS [3]  SERVER_CPU [0]  CLIENT_CPU [1]
#   CONNS_LIST ["1 16"]  TRANSPORTS ["http grpc"]  SIZE [64]
#   PYTRITON_VERSION [0.7.0]  VENV [$HOME/.cache/netaccel/triton/venv-$PYTRITON_VERSION]
#   NODE_BIN [target/release/netaccel-node]  LOAD_BIN [target/release/v2-load]
#   (both built with cargo if missing)
#   UPDATE_DOCS [0]: 1 writes the table into docs/benchmarks.md (between the
#   <!-- triton:begin --> and <!-- triton:end --> markers)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH_NAME=triton
HOST=127.0.0.1
# shellcheck source=bench/common/lib.sh
source "$ROOT/bench/common/lib.sh"

DURATION=${DURATION:-5}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-3}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
CONNS_LIST=${CONNS_LIST:-1 16}
TRANSPORTS=${TRANSPORTS:-http grpc}
SIZE=${SIZE:-64}
UPDATE_DOCS=${UPDATE_DOCS:-0}
PYTRITON_VERSION=${PYTRITON_VERSION:-0.7.0}
VENV=${VENV:-$HOME/.cache/netaccel/triton/venv-$PYTRITON_VERSION}
NODE_BIN=${NODE_BIN:-$ROOT/target/release/netaccel-node}
LOAD_BIN=${LOAD_BIN:-$ROOT/target/release/v2-load}
# Triton loading its model: the Python backend starts a stub process per instance.
TRITON_START_S=180

pick_ports NODE_HTTP NODE_RAC NODE_GRPC TRITON_HTTP TRITON_GRPC TRITON_METRICS

if [[ ! -x "$VENV/bin/python" ]] || ! "$VENV/bin/python" -c "import pytriton" 2>/dev/null; then
    if ! /usr/bin/python3 -c "import ensurepip" 2>/dev/null; then
        die "Debian's python3 with venv is needed: apt-get install python3-venv"
    fi
    log "making $VENV with nvidia-pytriton==$PYTRITON_VERSION (once; about 400 MB)"
    /usr/bin/python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "nvidia-pytriton==$PYTRITON_VERSION" || die "pip install nvidia-pytriton failed"
fi
for pair in "netaccel-node:$NODE_BIN" "netaccel-triton-bench:$LOAD_BIN"; do
    if [[ ! -x "${pair#*:}" ]]; then
        log "building ${pair%%:*} (release)"
        (cd "$ROOT" && cargo build --release -q -p "${pair%%:*}") || die "cargo build -p ${pair%%:*} failed"
    fi
done

work=$(mktemp -d)
node_pid=
triton_pid=
cleanup() {
    [[ -n "$node_pid" ]] && kill "$node_pid" 2>/dev/null && wait "$node_pid" 2>/dev/null
    # Triton is a process group (the Python front, tritonserver, the backend's stub).
    if [[ -n "$triton_pid" ]]; then
        kill -TERM -- "-$triton_pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 -- "-$triton_pid" 2>/dev/null || break; sleep 0.2; done
        kill -KILL -- "-$triton_pid" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

taskset -c "$SERVER_CPU" "$NODE_BIN" --http "$HOST:$NODE_HTTP" --rac "$HOST:$NODE_RAC" \
    --grpc "$HOST:$NODE_GRPC" --io-threads 1 --log-level warn >"$work/node.log" 2>&1 &
node_pid=$!
server_up netaccel-node "$node_pid" "$NODE_GRPC" "$work/node.log" || exit 1

setsid taskset -c "$SERVER_CPU" "$VENV/bin/python" "$HERE/serve_triton.py" \
    "$TRITON_HTTP" "$TRITON_GRPC" "$TRITON_METRICS" >"$work/triton.log" 2>&1 &
triton_pid=$!
log "waiting for Triton to load to_uppercase (at most $TRITON_START_S s)"
for ((i = 0; i < TRITON_START_S * 5; i++)); do
    kill -0 "$triton_pid" 2>/dev/null || { tail -n 20 "$work/triton.log" >&2; die "Triton exited at start-up"; }
    curl -fs "http://$HOST:$TRITON_HTTP/v2/models/to_uppercase/ready" >/dev/null && break
    sleep 0.2
done
curl -fs "http://$HOST:$TRITON_HTTP/v2/models/to_uppercase/ready" >/dev/null ||
    { tail -n 20 "$work/triton.log" >&2; die "Triton did not load to_uppercase in $TRITON_START_S s"; }

addr() { # server transport
    case "$1:$2" in
        netaccel:http) echo "$HOST:$NODE_HTTP" ;; netaccel:grpc) echo "$HOST:$NODE_GRPC" ;;
        triton:http) echo "$HOST:$TRITON_HTTP" ;; triton:grpc) echo "$HOST:$TRITON_GRPC" ;;
    esac
}
measure() { # server transport conns duration warmup -> one JSON line
    taskset -c "$CLIENT_CPU" "$LOAD_BIN" --transport "$2" --addr "$(addr "$1" "$2")" \
        --size "$SIZE" --connections "$3" --duration "$4" --warmup "$5"
}

log "servers pinned to cpu $SERVER_CPU, v2-load to cpu $CLIENT_CPU; $ROUNDS rounds of ${WARMUP} + ${DURATION} s per case"
# Every case answers (and is checked by the client) before anything is timed.
for server in netaccel triton; do
    for transport in $TRANSPORTS; do
        measure "$server" "$transport" 1 0.5 0 >/dev/null || die "$server over $transport does not answer"
    done
done
results="$work/results.jsonl"
for ((r = 0; r < ROUNDS; r++)); do
    if ((r % 2)); then order=(triton netaccel); else order=(netaccel triton); fi
    for transport in $TRANSPORTS; do
        for conns in $CONNS_LIST; do
            for server in "${order[@]}"; do
                # A case that fails (an error answer, a closed connection) is recorded
                # as failed and the run goes on: the table says how often it happened.
                if line=$(measure "$server" "$transport" "$conns" "$DURATION" "$WARMUP" 2>"$work/err"); then
                    echo "{\"server\":\"$server\",\"round\":$r,${line#\{}" >>"$results"
                    log "round $((r + 1)) $server $transport c=$conns: $line"
                else
                    echo "{\"server\":\"$server\",\"round\":$r,\"transport\":\"$transport\",\"connections\":$conns,\"failed\":true}" >>"$results"
                    log "round $((r + 1)) $server $transport c=$conns FAILED: $(cat "$work/err")"
                fi
            done
        done
    done
done

table="$work/table.md"
python3 - "$results" "$SIZE" >"$table" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
size = sys.argv[2]
def runs(server, transport, conns):
    return [r for r in rows if (r["server"], r["transport"], r["connections"]) == (server, transport, conns)]
def med(server, transport, conns, key):
    ok = [r[key] for r in runs(server, transport, conns) if not r.get("failed")]
    return statistics.median(ok) if ok else float("nan")
failures = []
cases = sorted({(r["transport"], r["connections"]) for r in rows}, key=lambda c: (c[0] != "http", c[1]))
print(f"| {size} B to_uppercase | conns | netaccel p50 / p99 µs | Triton p50 / p99 µs | p50 netaccel/Triton | netaccel calls/s | Triton calls/s | calls/s netaccel/Triton |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
met = True
for transport, conns in cases:
    n = {k: med("netaccel", transport, conns, k) for k in ("p50_us", "p99_us", "calls_per_s")}
    t = {k: med("triton", transport, conns, k) for k in ("p50_us", "p99_us", "calls_per_s")}
    p50_ratio = n["p50_us"] / t["p50_us"]
    rate_ratio = n["calls_per_s"] / t["calls_per_s"]
    met &= p50_ratio <= 1 / 3 and rate_ratio >= 3
    name = "v2 HTTP, binary tensors" if transport == "http" else "gRPC, raw tensors"
    for server in ("netaccel", "triton"):
        failed = sum(1 for r in runs(server, transport, conns) if r.get("failed"))
        if failed:
            failures.append(f"{server} {name}, {conns} conns: {failed} of {len(runs(server, transport, conns))} rounds failed")
    print(f"| {name} | {conns} | {n['p50_us']:.1f} / {n['p99_us']:.1f} | {t['p50_us']:.1f} / {t['p99_us']:.1f} "
          f"| {p50_ratio:.2f} | {n['calls_per_s']:,.0f} | {t['calls_per_s']:,.0f} | {rate_ratio:.1f}x |")
print()
for f in failures:
    print(f"- {f} (not in the medians)")
if failures:
    print()
print(f"Goal (p50 ≤ 1/3 of Triton's, calls/s ≥ 3x, every row): {'met' if met else 'NOT met'}.")
EOF
cat "$table"
if [[ "$UPDATE_DOCS" == 1 ]]; then
    replace_docs_block triton "$table" && log "docs/benchmarks.md updated"
fi
