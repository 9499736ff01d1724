#!/usr/bin/env bash
# TLS against plain on one node (issue 14): handshake latency, full and resumed; the p50
# of a 64 B to_uppercase call on one keep-alive connection; calls/s at 1 and 16
# connections, HTTPS against plain HTTP. Goal: TLS calls/s at least 80 % of plain's
# with session resumption on. Method and figures: docs/benchmarks.md ("TLS").
#
# Usage: bench/tls/run.sh
#
# The node runs pinned to SERVER_CPU with one network thread, its HTTP and HTTPS
# listeners side by side; the clients run pinned to CLIENT_CPU:
#   - handshakes: a Python ssl client (OpenSSL) opens HANDSHAKES connections one after
#     the other, timing connect + handshake (client side, so the client's share of the
#     crypto is in the figure), each followed by one GET /health (which also carries
#     the TLS 1.3 ticket). "full": no session offered; "resumed": the previous
#     connection's session offered, and the resumption checked (session_reused) and
#     counted by the node (netaccel_tls_handshakes_total{kind="resumed"}). "tcp": the
#     same loop without TLS, the floor. Beside, the node's CPU per connection (accept,
#     handshake, the GET, close), which the client's own cost does not blur.
#   - calls: wrk -t1 (Debian's wrk speaks TLS through OpenSSL), POST 64 B to
#     /v1/fn/to_uppercase, -c1 and -c16, plain and TLS alternating each round. The
#     node's CPU per call (utime+stime of /proc/PID/stat, all its threads, before and
#     after the run, over the calls wrk completed) is reported beside, and so is wrk's
#     own CPU per call: at 16 connections both cores are full, and wrk's TLS work
#     (OpenSSL) on its one core limits calls/s as much as the node's does.
# Each figure is the median over ROUNDS rounds.
#
# Environment (defaults in brackets):
#   DURATION [5]  WARMUP [1]  ROUNDS [3]  HANDSHAKES [400]  SERVER_CPU [0]  CLIENT_CPU [1]
#   NODE_PORT NODE_HTTPS_PORT NODE_RAC_PORT [free ports, chosen at start]
#   NODE_BIN [target/release/netaccel-node]  (built with cargo if missing)
#   PRIO [auto]: rt (chrt -f 50, needs root), nice, none; auto = rt as root
#   STRICT [0]: exit 1 if TLS calls/s fall below 80 % of plain's at either count
#   NODE_CPU_QUOTA [none]: a percentage of one core (e.g. 50) the node may use, set with
#     a CPU cgroup (v2 cpu.max, else v1 cpu.cfs_quota_us; needs root). With 2 cores the
#     load generator's own TLS work otherwise limits calls/s as much as the node's does
#     (wrk: 10-12 us of CPU per TLS call against the node's 8-10); a node held to half a
#     core is the bottleneck alone, so TLS vs plain calls/s then compares the node's
#     capacity. The node then runs without SCHED_FIFO (real-time tasks escape the quota).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH_NAME=tls
HOST=127.0.0.1
# shellcheck source=bench/common/lib.sh
source "$ROOT/bench/common/lib.sh"

DURATION=${DURATION:-5}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-3}
HANDSHAKES=${HANDSHAKES:-400}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
PRIO=${PRIO:-auto}
STRICT=${STRICT:-0}
NODE_BIN=${NODE_BIN:-$ROOT/target/release/netaccel-node}
NODE_CPU_QUOTA=${NODE_CPU_QUOTA:-}
choose_prio
NODE_PRIO_CMD=("${PRIO_CMD[@]}")
[[ -n "$NODE_CPU_QUOTA" ]] && NODE_PRIO_CMD=()
pick_ports NODE_PORT NODE_HTTPS_PORT NODE_RAC_PORT
for tool in wrk openssl python3 curl; do
    command -v "$tool" >/dev/null || die "$tool is needed"
done
if [[ ! -x "$NODE_BIN" ]]; then
    log "building $NODE_BIN"
    (cd "$ROOT" && cargo build --release -q -p netaccel-node)
fi

work=$(mktemp -d)
node_pid=
cgroup=
cleanup() {
    [[ -n "$node_pid" ]] && kill "$node_pid" 2>/dev/null && wait "$node_pid" 2>/dev/null
    [[ -n "$cgroup" ]] && rmdir "$cgroup" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

# A CA and a P-256 server certificate for localhost, made for this run only.
(
    cd "$work"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout ca.key -out ca.pem -days 1 -subj "/CN=bench CA"
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
        -keyout server.key -out server.csr -subj "/CN=localhost"
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
        -out server.pem -days 1 -extfile server.ext
) >/dev/null 2>&1 || die "openssl could not make the test certificates"

taskset -c "$SERVER_CPU" "${NODE_PRIO_CMD[@]}" "$NODE_BIN" --http "$HOST:$NODE_PORT" \
    --rac "$HOST:$NODE_RAC_PORT" --https "$HOST:$NODE_HTTPS_PORT" \
    --tls-cert "$work/server.pem" --tls-key "$work/server.key" \
    --io-threads 1 --log-level warn >"$work/node.log" 2>&1 &
node_pid=$!
server_up netaccel-node "$node_pid" "$NODE_HTTPS_PORT" "$work/node.log" || exit 1
if [[ -n "$NODE_CPU_QUOTA" ]]; then
    period=100000
    quota=$((period * NODE_CPU_QUOTA / 100))
    if grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
        cgroup=/sys/fs/cgroup/netaccel-bench-tls-$$
        mkdir "$cgroup" && echo "$quota $period" >"$cgroup/cpu.max"
    elif [[ -d /sys/fs/cgroup/cpu ]]; then
        cgroup=/sys/fs/cgroup/cpu/netaccel-bench-tls-$$
        mkdir "$cgroup" && echo "$period" >"$cgroup/cpu.cfs_period_us" && echo "$quota" >"$cgroup/cpu.cfs_quota_us"
    else
        die "NODE_CPU_QUOTA needs a CPU cgroup (v2 with the cpu controller, or v1's cpu hierarchy)"
    fi
    # The whole process: every thread, the network thread and the slots' workers.
    echo "$node_pid" >"$cgroup/cgroup.procs"
    log "node held to $NODE_CPU_QUOTA % of one core ($cgroup)"
fi

plain="http://$HOST:$NODE_PORT/v1/fn/to_uppercase"
tls="https://$HOST:$NODE_HTTPS_PORT/v1/fn/to_uppercase"
[[ $(curl -fsS --data-binary abc "$plain") == ABC ]] || die "plain to_uppercase does not answer ABC"
[[ $(curl -fsS --cacert "$work/ca.pem" --data-binary abc "https://localhost:$NODE_HTTPS_PORT/v1/fn/to_uppercase") == ABC ]] ||
    die "HTTPS to_uppercase does not answer ABC"

cat >"$work/handshakes.py" <<'EOF'
"""connect (+ handshake) latency, client side: `tcp`, `full` or `resumed`."""
import socket, ssl, statistics, sys, time

host, port, ca, mode, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
ctx = ssl.create_default_context(cafile=ca)
session, times, reused = None, [], 0
for _ in range(n):
    t0 = time.perf_counter_ns()
    s = socket.create_connection((host, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if mode != "tcp":
        s = ctx.wrap_socket(s, server_hostname="localhost",
                            session=session if mode == "resumed" else None)
    times.append((time.perf_counter_ns() - t0) / 1000)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    while s.recv(4096):
        pass
    if mode != "tcp":
        reused += s.session_reused
        session = s.session
    s.close()
times.sort()
print(f"{statistics.median(times):.1f} {times[int(len(times) * 0.99) - 1]:.1f} {reused}")
EOF

CLK_TCK=$(getconf CLK_TCK)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$node_pid/stat"; }

handshakes() { # mode port -> "p50 p99 reused node_cpu_us_per_connection"
    local t0 t1 out
    t0=$(cpu_ticks)
    out=$(taskset -c "$CLIENT_CPU" "${PRIO_CMD[@]}" python3 "$work/handshakes.py" "$HOST" "$2" \
        "$work/ca.pem" "$1" "$HANDSHAKES")
    t1=$(cpu_ticks)
    echo "$out $(awk -v d=$((t1 - t0)) -v hz="$CLK_TCK" -v n="$HANDSHAKES" 'BEGIN { printf "%.1f", d / hz * 1e6 / n }')"
}

calls() { # url conns -> "p50 p99 rps node_cpu_us_per_call client_cpu_us_per_call"
    local t0 t1 client
    t0=$(cpu_ticks)
    # wrk's own CPU time (utime+stime, in clock ticks) read from /proc as it ends: on
    # loopback the client's share matters as much as the node's when both cores are full.
    taskset -c "$CLIENT_CPU" "${PRIO_CMD[@]}" wrk -t1 -c"$2" -d"${DURATION}s" \
        -s "$ROOT/bench/common/wrk/post64.lua" "$1" >"$work/wrk.out" &
    local wrk_pid=$! last=0 now
    while now=$(awk '{ print $14 + $15 }' "/proc/$wrk_pid/stat" 2>/dev/null); do
        last=$now
        sleep 0.05
    done
    wait "$wrk_pid"
    client=$last
    t1=$(cpu_ticks)
    awk -v d=$((t1 - t0)) -v c="$client" -v hz="$CLK_TCK" '
        /^BENCH/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
        END { if (v["errors_status"] + v["errors_read"] + v["errors_connect"] > 0) exit 1
              printf "%s %s %s %.2f %.2f\n", v["p50_us"], v["p99_us"], v["rps"], d / hz * 1e6 / v["requests"],
                  c / hz * 1e6 / v["requests"] }' \
        "$work/wrk.out"
}

log "node pinned to cpu $SERVER_CPU (1 network thread${NODE_CPU_QUOTA:+, at most $NODE_CPU_QUOTA % of it}), clients to cpu $CLIENT_CPU, priority $PRIO${NODE_CPU_QUOTA:+ (clients only)}; $ROUNDS rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)"
DURATION=$WARMUP calls "$plain" 16 >/dev/null
DURATION=$WARMUP calls "$tls" 16 >/dev/null
for ((r = 0; r < ROUNDS; r++)); do
    for mode in tcp full resumed; do
        port=$NODE_HTTPS_PORT
        [[ $mode == tcp ]] && port=$NODE_PORT
        out=$(handshakes "$mode" "$port")
        echo "$out" >>"$work/hs-$mode"
        log "round $((r + 1)) handshake $mode: p50 p99 (us) resumed node-CPU-us/connection = $out"
    done
    for conns in 1 16; do
        if ((r % 2)); then order=(tls plain); else order=(plain tls); fi
        for which in "${order[@]}"; do
            url=$plain
            [[ $which == tls ]] && url=$tls
            out=$(calls "$url" "$conns") || die "wrk reported errors for $which -c$conns"
            echo "$out" >>"$work/calls-$which-$conns"
            log "round $((r + 1)) $which -c$conns: p50 p99 (us) calls/s node-CPU-us/call client-CPU-us/call = $out"
        done
    done
done
resumed=$(curl -fsS "http://$HOST:$NODE_PORT/metrics" |
    awk '/^netaccel_tls_handshakes_total\{kind="resumed"\}/ { print $2 }')

col() { awk -v c="$2" '{ print $c }' "$work/$1" | median; }
echo
printf '%-44s %9s %9s %22s\n' "connect + handshake, 1 client, $HANDSHAKES in a row" "p50 us" "p99 us" "node CPU us/connection"
for mode in tcp full resumed; do
    printf '%-44s %9s %9s %22s\n' "$mode" "$(col "hs-$mode" 1)" "$(col "hs-$mode" 2)" "$(col "hs-$mode" 4)"
done
echo "resumed handshakes the client saw per run: $(col hs-resumed 3) of $HANDSHAKES; the node counted $resumed in all"
echo
printf '%-30s %9s %9s %10s %9s %14s %16s\n' "64 B to_uppercase, keep-alive" "p50 us" "p99 us" "calls/s" "vs plain" "node CPU us/call" "client CPU us/call"
status=0
for conns in 1 16; do
    base=$(col "calls-plain-$conns" 3)
    for which in plain tls; do
        rps=$(col "calls-$which-$conns" 3)
        ratio=$(awk -v a="$rps" -v b="$base" 'BEGIN { printf "%.0f %%", 100 * a / b }')
        printf '%-30s %9s %9s %10.0f %9s %14s %16s\n' "$which, $conns conn" "$(col "calls-$which-$conns" 1)" \
            "$(col "calls-$which-$conns" 2)" "$rps" "$ratio" "$(col "calls-$which-$conns" 4)" "$(col "calls-$which-$conns" 5)"
        if [[ $which == tls ]] && awk -v a="$rps" -v b="$base" 'BEGIN { exit !(a < 0.8 * b) }'; then
            log "TLS at $conns connections is below 80 % of plain"
            status=1
        fi
    done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ "$STRICT" == 1 ]]; then exit "$status"; fi
