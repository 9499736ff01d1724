#!/usr/bin/env bash
# What authentication costs a call (issue 31): the p50 and the node's CPU per call of an
# authenticated call against an anonymous one, side by side on one node, over HTTP
# keep-alive and RAC. Goal: at most 1 µs added. The token is checked once per
# connection (argon2, milliseconds); what each call then pays is what this measures.
#
# Usage: bench/auth/run.sh
#
# One node, pinned to SERVER_CPU with one network thread, serves both kinds of caller:
# tenant `team-a` with a hashed token (`token_hash`, made by `netaccel-node hash-token`)
# and no policy, and anonymous callers (the default `anonymous = "connection"`). The
# clients run pinned to CLIENT_CPU, one connection, one call in flight, 64 B
# `to_uppercase` calls:
#   - HTTP: wrk -t1 -c1 POSTing 64 B, with `Authorization: Bearer <token>` (every
#     request carries it; the connection checked it once) or without;
#   - RAC: netaccel-bench, `--tenant team-a:TOKEN` (hello once per connection) or not.
# The node's CPU per call is utime+stime of /proc/PID/stat (all its threads) over the
# run, divided by the calls completed. Each round runs both kinds back to back,
# alternating which goes first; figures are medians over ROUNDS rounds. SCHED_IDLE
# busy loops keep both CPUs awake (KEEP_AWAKE=0 turns them off).
#
# Environment (defaults in brackets):
#   DURATION [5] (HTTP, s)  CALLS [100000] (RAC)  WARMUP [1]  ROUNDS [5]
#   SERVER_CPU [0]  CLIENT_CPU [1]  PRIO [auto]: rt (chrt -f 50, needs root), nice, none
#   NODE_BIN [target/release/netaccel-node]  BENCH_BIN [target/release/netaccel-bench]
#   (built with cargo if missing)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
BENCH_NAME=auth
HOST=127.0.0.1
# shellcheck source=bench/common/lib.sh
source "$ROOT/bench/common/lib.sh"

DURATION=${DURATION:-5}
CALLS=${CALLS:-100000}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-5}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
PRIO=${PRIO:-auto}
NODE_BIN=${NODE_BIN:-$ROOT/target/release/netaccel-node}
BENCH_BIN=${BENCH_BIN:-$ROOT/target/release/netaccel-bench}
choose_prio
pick_ports NODE_PORT NODE_RAC_PORT
for tool in wrk curl python3; do
    command -v "$tool" >/dev/null || die "$tool is needed"
done
build_release_bins

work=$(mktemp -d)
node_pid=
AWAKE_PIDS=()
cleanup() {
    awake_stop
    [[ -n "$node_pid" ]] && kill "$node_pid" 2>/dev/null && wait "$node_pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT

token=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
hash=$(printf '%s\n' "$token" | "$NODE_BIN" hash-token)
cat >"$work/node.toml" <<EOF
log_level = "warn"
[[tenants]]
name = "team-a"
token_hash = "$hash"
EOF
taskset -c "$SERVER_CPU" "${PRIO_CMD[@]}" "$NODE_BIN" --config "$work/node.toml" \
    --http "$HOST:$NODE_PORT" --rac "$HOST:$NODE_RAC_PORT" --grpc off --io-threads 1 \
    >"$work/node.log" 2>&1 &
node_pid=$!
server_up netaccel-node "$node_pid" "$NODE_RAC_PORT" "$work/node.log" || exit 1
url="http://$HOST:$NODE_PORT/v1/fn/to_uppercase"
[[ $(curl -fsS -H "Authorization: Bearer $token" --data-binary abc "$url") == ABC ]] ||
    die "an authenticated to_uppercase does not answer ABC"
[[ $(curl -sS -o /dev/null -w '%{http_code}' -H "Authorization: Bearer x$token" --data-binary abc "$url") == 401 ]] ||
    die "a wrong token is not refused"

CLK_TCK=$(getconf CLK_TCK)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$node_pid/stat"; }
per_call() { awk -v d="$1" -v hz="$CLK_TCK" -v n="$2" 'BEGIN { printf "%.2f", d / hz * 1e6 / n }'; }

http_run() { # auth|anon -> "p50_us node_cpu_us_per_call"
    local header=() t0 t1
    [[ $1 == auth ]] && header=(-H "Authorization: Bearer $token")
    t0=$(cpu_ticks)
    taskset -c "$CLIENT_CPU" "${PRIO_CMD[@]}" wrk -t1 -c1 -d"${DURATION}s" "${header[@]}" \
        -s "$ROOT/bench/common/wrk/post64.lua" "$url" >"$work/wrk.out"
    t1=$(cpu_ticks)
    awk '/^BENCH/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
         END { if (v["errors_status"] + v["errors_read"] + v["errors_connect"] > 0) exit 1
               print v["p50_us"], v["requests"] }' "$work/wrk.out" | {
        read -r p50 n
        echo "$p50 $(per_call $((t1 - t0)) "$n")"
    }
}

rac_run() { # auth|anon -> "p50_us node_cpu_us_per_call"
    local tenant=() t0 t1
    [[ $1 == auth ]] && tenant=(--tenant "team-a:$token")
    t0=$(cpu_ticks)
    taskset -c "$CLIENT_CPU" "${PRIO_CMD[@]}" "$BENCH_BIN" run "rac://$HOST:$NODE_RAC_PORT/to_uppercase" \
        --size 64 --conns 1 --inflight 1 --calls "$CALLS" --warmup 0 "${tenant[@]}" \
        --json "$work/rac.json" --quiet >/dev/null 2>>"$work/bench.log" || die "netaccel-bench failed (see $work/bench.log)"
    t1=$(cpu_ticks)
    "$BENCH_BIN" report "$work/rac.json" --tsv "$work/rac.tsv" >/dev/null
    awk -F'\t' 'NR == 1 { printf "%.2f\n", $2 / 1000 }' "$work/rac.tsv" | {
        read -r p50
        echo "$p50 $(per_call $((t1 - t0)) "$CALLS")"
    }
}

awake_start "$SERVER_CPU,$CLIENT_CPU"
log "node pinned to cpu $SERVER_CPU (1 network thread), clients to cpu $CLIENT_CPU, priority $PRIO; $ROUNDS rounds; load average $(cut -d' ' -f1-3 /proc/loadavg)"
DURATION=$WARMUP http_run auth >/dev/null
DURATION=$WARMUP http_run anon >/dev/null
for ((r = 0; r < ROUNDS; r++)); do
    if ((r % 2)); then order=(auth anon); else order=(anon auth); fi
    for proto in http rac; do
        for kind in "${order[@]}"; do
            out=$("${proto}_run" "$kind") || die "$proto $kind: errors"
            echo "$out" >>"$work/$proto-$kind"
            log "round $((r + 1)) $proto $kind: p50 us, node CPU us/call = $out"
        done
    done
done
awake_stop

col() { awk -v c="$2" '{ print $c }' "$work/$1" | median; }
echo
printf '%-34s %9s %18s\n' "64 B to_uppercase, 1 conn, 1 in flight" "p50 us" "node CPU us/call"
for proto in http rac; do
    for kind in anon auth; do
        printf '%-34s %9s %18s\n' "$proto $kind" "$(col "$proto-$kind" 1)" "$(col "$proto-$kind" 2)"
    done
    printf '%-34s %9s %18s\n' "$proto added by authentication" \
        "$(awk -v a="$(col "$proto-auth" 1)" -v b="$(col "$proto-anon" 1)" 'BEGIN { printf "%+.2f", a - b }')" \
        "$(awk -v a="$(col "$proto-auth" 2)" -v b="$(col "$proto-anon" 2)" 'BEGIN { printf "%+.2f", a - b }')"
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
