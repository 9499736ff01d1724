#!/usr/bin/env bash
# Many connections to one node, most idle, some busy (issue 15): memory per idle
# connection, the latency and calls/s of the busy ones against the same load over 64
# connections, accept rate, and refusals at the configured bound. Loopback only; stops
# by itself.
#
#   bench/connections/run.sh                 18,000 connections (13,000 idle + 5,000 active)
#   ACTIVE=0 CONNS=2000 BOUND=1500 bench/connections/run.sh   refusals at the bound, idle only
#
# What it does: starts netaccel-node (release; built when missing) on free ports with
# `connections_max = BOUND` and a long idle timeout, then
# 1. opens CONNS - ACTIVE connections (alternately HTTP and RAC) from PROCS client
#    processes (bench/connections/connections.py, each from its own loopback source address
#    127.0.0.x), keeps them idle and reads the node's RSS: RSS per idle connection;
# 2. with those held open, runs ROUNDS rounds of the active load, each round both
#    ways in alternating order: ACTIVE connections (half HTTP `GET /health`, half RAC
#    echo of SIZE bytes, one netaccel-bench process per protocol, open loop at RATE
#    calls/s in all, constant spacing, THREADS load threads each) and the same RATE over
#    64 connections (32 + 32); beside each, a probe: one more RAC connection from its
#    own process at PROBE_RATE calls/s, whose calls the load's clients cannot delay.
#    Reported: per protocol (and the probe) the median over rounds of p50, p99 and
#    calls/s, the node's own split (RAC answers carry their queue and execution time;
#    the rest is network + protocol at both ends), the CPU time of each client and of
#    the node, and the ratios ACTIVE/64 (goals: p99 <= 2x, calls/s >= 80 %);
# 3. drives ACTIVE_PER_PROC of the idle connections per process with CALLS sequential
#    calls and checks every other one is still open.
# The client (netaccel-bench, crates/bench) is compiled: Python clients cannot keep
# thousands of connections busy at a useful rate on two cores.
#
# Environment:
#   CONNS [18000]  ACTIVE [5000]  BOUND [19000]  PROCS [8]  ACTIVE_PER_PROC [8]
#   CALLS [20]  RATE [10000] (calls/s, both protocols together)  SIZE [64]
#   ROUNDS [3]  DURATION [5] (s per measurement)  WARMUP [3] (s before it: the
#   connections are opened then, and latency of an open loop counts from the
#   intended send time, so a shorter warm-up charges the connects to the calls)
#   IO_THREADS [1]  THREADS [1] (load threads per netaccel-bench process)
#   PROBE_RATE [1000] (calls/s)  TIMEOUT [180 + the active rounds] (seconds, whole client run)
#   NODE_BIN [target/release/netaccel-node]  BENCH_BIN [target/release/netaccel-bench]
#   HTTP_PORT, RAC_PORT [free ports]
#
# The per-process open-file cap applies to the node: CONNS above what its hard limit
# allows are refused by the kernel (EMFILE at accept), not by the node's bound.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH_NAME=connections.sh
HOST=127.0.0.1
# shellcheck source=bench/common/lib.sh
source "$ROOT/bench/common/lib.sh"

CONNS=${CONNS:-18000}
ACTIVE=${ACTIVE:-5000}
BOUND=${BOUND:-19000}
PROCS=${PROCS:-8}
ACTIVE_PER_PROC=${ACTIVE_PER_PROC:-8}
CALLS=${CALLS:-20}
RATE=${RATE:-10000}
SIZE=${SIZE:-64}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
WARMUP=${WARMUP:-3}
IO_THREADS=${IO_THREADS:-1}
THREADS=${THREADS:-1}
PROBE_RATE=${PROBE_RATE:-1000}
TIMEOUT=${TIMEOUT:-$((180 + ROUNDS * 2 * (DURATION + WARMUP + 3)))}
NODE_BIN=${NODE_BIN:-$ROOT/target/release/netaccel-node}
BENCH_BIN=${BENCH_BIN:-$ROOT/target/release/netaccel-bench}
HTTP_PORT=${HTTP_PORT:-}
RAC_PORT=${RAC_PORT:-}
((ACTIVE < CONNS)) || die "ACTIVE ($ACTIVE) must be below CONNS ($CONNS)"
((ACTIVE == 0 || ACTIVE >= 64)) || die "ACTIVE must be 0 or at least 64"

build_release_bins
pick_ports HTTP_PORT RAC_PORT
RUN_DIR=$(mktemp -d)
NODE_PID=
cleanup() {
    if [[ -n "$NODE_PID" ]]; then kill "$NODE_PID" 2>/dev/null || true; wait "$NODE_PID" 2>/dev/null || true; fi
    rm -rf "$RUN_DIR"
}
trap cleanup EXIT

cat >"$RUN_DIR/node.toml" <<TOML
connections_max = $BOUND
idle_timeout_ms = $(((TIMEOUT + 60) * 1000))
[[slots]]
accelerator = "echo"
TOML
"$NODE_BIN" --config "$RUN_DIR/node.toml" --http "$HOST:$HTTP_PORT" --rac "$HOST:$RAC_PORT" \
    --io-threads "$IO_THREADS" --log-level warn >"$RUN_DIR/node.log" 2>&1 &
NODE_PID=$!
server_up netaccel-node "$NODE_PID" "$RAC_PORT" "$RUN_DIR/node.log" || die "the node did not come up"
server_up netaccel-node "$NODE_PID" "$HTTP_PORT" "$RUN_DIR/node.log" || die "the node did not come up"

# node_cpu: the node's CPU time so far (utime + stime), in seconds.
node_cpu() {
    awk -v hz="$(getconf CLK_TCK)" '{ sub(/.*\) /, ""); print ($12 + $13) / hz }' "/proc/$NODE_PID/stat"
}

IDLE=$((CONNS - ACTIVE))
log "opening $IDLE idle connections (bound $BOUND) from $PROCS processes"
timeout "$((TIMEOUT + 30))" python3 "$HERE/connections.py" --host "$HOST" \
    --http-port "$HTTP_PORT" --rac-port "$RAC_PORT" --node-pid "$NODE_PID" \
    --conns "$IDLE" --procs "$PROCS" --active-per-worker "$ACTIVE_PER_PROC" \
    --calls "$CALLS" --timeout "$TIMEOUT" \
    --ready-file "$RUN_DIR/ready.json" --hold-until "$RUN_DIR/done" >"$RUN_DIR/result.json" &
CLIENT_PID=$!
deadline=$((SECONDS + TIMEOUT))
until [[ -e "$RUN_DIR/ready.json" ]]; do
    kill -0 "$CLIENT_PID" 2>/dev/null || die "the connection client ended early"
    ((SECONDS < deadline)) || die "the idle connections were not open in time"
    sleep 0.2
done
log "idle: $(cat "$RUN_DIR/ready.json")"

# One measurement: the RATE over CONNS_NOW connections, half HTTP half RAC, at once.
active_load() {
    local conns_now=$1 label=$2 half=$(($1 / 2)) rate_half
    rate_half=$(awk -v r="$RATE" 'BEGIN { print r / 2 }')
    # Each client's CPU time (user, system) goes to LABEL.PROTO.cpu.
    local TIMEFORMAT="%U %S"
    { time "$BENCH_BIN" run "http://$HOST:$HTTP_PORT/health" -c "$half" -t "$THREADS" \
        -r "$rate_half" -d "$DURATION" -w "$WARMUP" --quiet --label "http $label" \
        --json "$RUN_DIR/$label.http.json" >/dev/null 2>&1; } 2>"$RUN_DIR/$label.http.cpu" &
    local hp=$!
    { time "$BENCH_BIN" run "rac://$HOST:$RAC_PORT/echo" -s "$SIZE" -c "$half" -t "$THREADS" \
        -r "$rate_half" -d "$DURATION" -w "$WARMUP" --quiet --label "rac $label" \
        --json "$RUN_DIR/$label.rac.json" >/dev/null 2>&1; } 2>"$RUN_DIR/$label.rac.cpu" &
    local rp=$!
    # The probe: one more RAC connection from its own process, PROBE_RATE calls/s. The
    # load's clients cannot delay its calls, so what it sees is the node (and the host).
    { time "$BENCH_BIN" run "rac://$HOST:$RAC_PORT/echo" -s "$SIZE" -c 1 -t 1 -r "$PROBE_RATE" \
        -d "$DURATION" -w "$WARMUP" --quiet --label "probe $label" \
        --json "$RUN_DIR/$label.probe.json" >/dev/null 2>&1; } 2>"$RUN_DIR/$label.probe.cpu" &
    local pp=$!
    # The node's CPU time over the measured window (after the warm-up, in which the
    # connections are opened), to the end of the run.
    local cpu0 cpu1
    sleep "$WARMUP"
    cpu0=$(node_cpu)
    wait "$hp" || die "netaccel-bench (HTTP, $conns_now connections) failed"
    wait "$rp" || die "netaccel-bench (RAC, $conns_now connections) failed"
    wait "$pp" || die "netaccel-bench (probe, beside $conns_now connections) failed"
    cpu1=$(node_cpu)
    awk -v a="$cpu0" -v b="$cpu1" 'BEGIN { print b - a }' >"$RUN_DIR/$label.node.cpu"
}
if ((ACTIVE > 0)); then
    # Node and clients share the host's CPUs unpinned: say how busy the host was.
    log "load average before the active rounds: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) CPUs)"
    for round in $(seq 1 "$ROUNDS"); do
        if ((round % 2)); then order="64 $ACTIVE"; else order="$ACTIVE 64"; fi
        for n in $order; do
            log "round $round: $RATE calls/s over $n connections"
            active_load "$n" "r$round-c$n"
        done
    done
fi
((ACTIVE == 0)) || log "load average after the active rounds: $(cut -d' ' -f1-3 /proc/loadavg)"
touch "$RUN_DIR/done"
wait "$CLIENT_PID" || die "the connection client failed"
cat "$RUN_DIR/result.json"
metric=$(curl -s "http://$HOST:$HTTP_PORT/metrics" | grep '^netaccel_connections_refused_total' || true)
log "node metrics: ${metric:-no netaccel_connections_refused_total}"
python3 - "$RUN_DIR" "$ACTIVE" "$ROUNDS" "$RATE" "$DURATION" <<'PY'
import glob, json, os, statistics, sys
run_dir, active, rounds, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
duration = float(sys.argv[5])
def cpu(path):
    with open(path) as f:
        return sum(float(x) for x in f.read().split()[-2:])
if active:
    # Per protocol and connection count, the medians over rounds of: the latency, the
    # node's own split (RAC answers carry the queue and execution time; the rest is
    # network + protocol, both ends), and the CPU seconds the client and the node used.
    print(f"| {rate} calls/s, open loop | connections | p50 µs | p99 µs | calls/s | errors "
          "| node queue p50 / p99 µs | network+protocol p50 / p99 µs | client CPU s "
          "| node CPU s (measured window) |")
    print("|---|---:|---:|---:|---:|---:|---|---|---:|---:|")
    med = {}
    for proto in ("http", "rac", "probe"):
        for n in (64, active):
            rows = []
            for f in sorted(glob.glob(os.path.join(run_dir, f"r*-c{n}.{proto}.json"))):
                sc = json.load(open(f))["scenarios"][0]
                q = sc.get("server_queue") or {}
                net = sc.get("network_protocol") or {}
                stem = f[: -len(f".{proto}.json")]
                rows.append((sc["latency"]["p50_ns"], sc["latency"]["p99_ns"], sc["calls_per_s"],
                             sum(sc["errors"].values()), q.get("p50_ns", 0), q.get("p99_ns", 0),
                             net.get("p50_ns", 0), net.get("p99_ns", 0),
                             cpu(f"{stem}.{proto}.cpu"), cpu(f"{stem}.node.cpu")))
            m = [statistics.median(col) for col in zip(*rows)]
            med[proto, n] = m
            split = (f"{m[4]/1000:.1f} / {m[5]/1000:.1f} | {m[6]/1000:.1f} / {m[7]/1000:.1f}"
                     if m[4] or m[6] else "– | –")
            print(f"| {proto} | {n} | {m[0]/1000:.1f} | {m[1]/1000:.1f} | {m[2]:,.0f} "
                  f"| {sum(r[3] for r in rows)} | {split} | {m[8]:.2f} | {m[9]:.2f} |")
    node_us = {n: 1e6 * med["rac", n][9] / (sum(med[p, n][2] for p in ("http", "rac", "probe"))
                                           * duration) for n in (64, active)}
    print(f"node CPU per call over the measured window: {node_us[64]:.1f} µs at 64 connections, "
          f"{node_us[active]:.1f} µs at {active}")
    for proto in ("http", "rac", "probe"):
        big, small = med[proto, active], med[proto, 64]
        print(f"{proto}: {active} vs 64 connections (medians of {rounds} rounds): "
              f"p50 {big[0]/small[0]:.2f}x, p99 {big[1]/small[1]:.2f}x (goal <= 2x), "
              f"calls/s {100*big[2]/small[2]:.0f} % (goal >= 80 %)")
r = json.load(open(os.path.join(run_dir, "result.json")))
print("| connections | accepted | refused (503 / BUSY / closed) | accept rate | RSS idle / before | per idle connection | active ok / failed |")
print("|---:|---:|---|---:|---|---:|---|")
print(f"| {r['opened']} | {r['accepted']} | {r['refused_http_503']} / {r['refused_rac_busy']} / {r['refused_closed']} "
      f"| {r['accept_rate']}/s | {r['rss_idle_kib']/1024:.1f} / {r['rss_before_kib']/1024:.1f} MiB "
      f"| {r['rss_per_idle_conn_bytes']/1024:.2f} KiB | {r['active_ok']} / {r['active_failed']} |")
PY
