#!/usr/bin/env bash
# What request heads sent one byte per write (slowloris) cost a node (issue 15): its
# CPU time per head byte, and another client's latency beside them. Loopback only;
# stops by itself.
#
#   bench/slowloris/run.sh                          both phases
#   PHASES=steady CONNS=10000 bench/slowloris/run.sh
#   NODE_BIN=/some/other/netaccel-node bench/slowloris/run.sh   (e.g. an older release)
#
# Starts netaccel-node (release; built when missing) with one network thread, one echo
# slot, a header timeout longer than the run and room for the connections, then runs
# bench/slowloris/slowloris.py:
# 1. whole: WHOLE_CONNS connections each send a whole head of HEAD_MIN..HEAD_MAX bytes
#    one byte per write (round-robin, TCP_NODELAY: each byte its own segment),
#    WHOLE_RATE bytes/s in all, then a body, and must get it echoed: node CPU time
#    (/proc/PID/stat utime + stime) per head byte;
# 2. steady: CONNS connections each hold the start of a head (HEAD_MIN..HEAD_MAX bytes,
#    sent at connect) and, in ROUNDS pairs of DURATION-second rounds, alternately stay
#    quiet or get one more byte per write, RATE bytes/s over all of them, while another
#    process makes sequential echo calls (1,000 a second): its p50 and p99 per round, the median of the
#    p99 ratios (goal: <= 2x), and the node CPU the bytes added.
#
# Environment:
#   PHASES ["whole steady"]  WHOLE_CONNS [64]  WHOLE_RATE [50000] (bytes/s)
#   CONNS [10000]  HEAD_MIN [4096]
#   HEAD_MAX [8192]  RATE [20000] (bytes/s)  DURATION [3] (s per round)  ROUNDS [3]
#   IO_THREADS [1]  TIMEOUT [300] (seconds per phase)
#   NODE_BIN [target/release/netaccel-node]  HTTP_PORT, RAC_PORT [free ports]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck disable=SC2034 # read by lib.sh
BENCH_NAME=slowloris.sh
HOST=127.0.0.1
# shellcheck source=bench/common/lib.sh
source "$ROOT/bench/common/lib.sh"

PHASES=${PHASES:-"whole steady"}
WHOLE_CONNS=${WHOLE_CONNS:-64}
WHOLE_RATE=${WHOLE_RATE:-50000}
CONNS=${CONNS:-10000}
HEAD_MIN=${HEAD_MIN:-4096}
HEAD_MAX=${HEAD_MAX:-8192}
RATE=${RATE:-20000}
DURATION=${DURATION:-3}
ROUNDS=${ROUNDS:-3}
IO_THREADS=${IO_THREADS:-1}
TIMEOUT=${TIMEOUT:-300}
NODE_BIN=${NODE_BIN:-$ROOT/target/release/netaccel-node}
HTTP_PORT=${HTTP_PORT:-}
RAC_PORT=${RAC_PORT:-}

if [[ ! -x "$NODE_BIN" ]]; then
    log "netaccel-node missing: cargo build --release -p netaccel-node"
    (cd "$ROOT" && cargo build --release -p netaccel-node >&2) || die "cargo build failed"
fi
RUN_DIR=$(mktemp -d)
NODE_PID=
cleanup() {
    if [[ -n "$NODE_PID" ]]; then kill "$NODE_PID" 2>/dev/null || true; wait "$NODE_PID" 2>/dev/null || true; fi
    rm -rf "$RUN_DIR"
}
trap cleanup EXIT

pick_ports HTTP_PORT RAC_PORT
cat >"$RUN_DIR/node.toml" <<TOML
connections_max = $((CONNS + WHOLE_CONNS + 100))
head_bytes_max = $((HEAD_MAX > 16384 ? HEAD_MAX : 16384))
header_timeout_ms = $(((TIMEOUT + 60) * 1000))
[[slots]]
accelerator = "echo"
TOML
"$NODE_BIN" --config "$RUN_DIR/node.toml" --http "$HOST:$HTTP_PORT" --rac "$HOST:$RAC_PORT" \
    --io-threads "$IO_THREADS" --log-level warn >"$RUN_DIR/node.log" 2>&1 &
NODE_PID=$!
server_up netaccel-node "$NODE_PID" "$HTTP_PORT" "$RUN_DIR/node.log" || die "the node did not come up"
log "load average: $(cut -d' ' -f1-3 /proc/loadavg)"

client() {
    timeout "$((TIMEOUT + 30))" python3 "$HERE/slowloris.py" "$@" --host "$HOST" \
        --http-port "$HTTP_PORT" --node-pid "$NODE_PID" --head-min "$HEAD_MIN" \
        --head-max "$HEAD_MAX" --timeout "$TIMEOUT"
}
for phase in $PHASES; do
    case $phase in
        whole)
            log "whole: $WHOLE_CONNS heads of $HEAD_MIN..$HEAD_MAX bytes, one byte per write"
            client whole --conns "$WHOLE_CONNS" --rate "$WHOLE_RATE"
            ;;
        steady)
            log "steady: $CONNS heads, $RATE bytes/s, $ROUNDS x 2 rounds of ${DURATION} s"
            client steady --conns "$CONNS" --rate "$RATE" --seconds "$DURATION" --rounds "$ROUNDS"
            ;;
        *) die "unknown phase $phase" ;;
    esac
done
log "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
