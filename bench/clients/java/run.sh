#!/usr/bin/env bash
# The Java client's bench (Bench.java): `run.sh --build` builds the client's jar (exit 3
# when a JDK or Maven is missing); `run.sh --node HOST:PORT [--seconds S]` prints one
# JSON line (64 B echo, 1 connection: sync p50/p99, calls/s with 32 in flight, bytes
# allocated per call).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
pkg=$(cd "$here/../../../clients/java" && pwd)
command -v javac >/dev/null && command -v mvn >/dev/null || { echo "a JDK and Maven are not installed" >&2; exit 3; }
if [[ ${1:-} == --build ]]; then
  cd "$pkg" && exec mvn -q -B -DskipTests package
fi
exec java -cp "$pkg/target/netaccel-client-0.1.0.jar" "$here/Bench.java" "$@"
