#!/usr/bin/env bash
# A Jepsen-style test of the registry's replicas (docs/jepsen.md): MINUTES of random
# operations by 10 clients against 3 replicas on a 3-member etcd while a nemesis
# injects faults, the history checked by porcupine; then the same with the planted
# bug (cargo feature jepsen-plant-follower-acks-writes), which must be caught.
#
#   bench/jepsen/run.sh MINUTES [PLANTED_SECONDS]
#
# Writes bench/out/jepsen-DATE/{real,planted}/ (history.jsonl, verdict.json,
# linearizability.html, the processes' logs). Exits non-zero when the real registry's
# history is not valid or the planted bug is not caught. Network partitions and netem
# need root (network namespaces); without them those faults are left out, and with
# CI set that is a failure. JEPSEN_FAULTS (comma-separated kinds, docs/jepsen.md) limits
# the nemesis to those kinds; default: every kind this machine can inject.
set -euo pipefail
cd "$(dirname "$0")/../.."
minutes=${1:?usage: bench/jepsen/run.sh MINUTES [PLANTED_SECONDS]}
planted_seconds=${2:-30}
out=${JEPSEN_OUT:-bench/out/jepsen-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT

netns=auto
[[ -z "${CI:-}" ]] || netns=on

# The planted build first, copied aside from the hashed file cargo names (building
# with another feature set replaces target/debug/netaccel-registry), then the real one.
executable() { python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "netaccel-registry" and m.get("executable"):
        print(m["executable"])'; }
planted=$(cargo build -q -p netaccel-registry --features jepsen-plant-follower-acks-writes \
  --message-format=json | executable)
cp "$planted" "$bin/registry-planted"
real=$(cargo build -q -p netaccel-registry --message-format=json | executable)
cp "$real" "$bin/registry"
(cd bench/jepsen && go build -o "$bin/jepsen" .)

echo "==> the real registry: $minutes minute(s) of faults"
"$bin/jepsen" run -registry "$bin/registry" -duration "${minutes}m" -netns "$netns" -out "$out/real" \
  ${JEPSEN_FAULTS:+-faults "$JEPSEN_FAULTS"}
echo "==> the planted bug (a follower answers writes itself): it must be caught"
"$bin/jepsen" run -registry "$bin/registry-planted" -duration "${planted_seconds}s" -netns "$netns" \
  -out "$out/planted" -expect-invalid
echo "==> results in $out"
