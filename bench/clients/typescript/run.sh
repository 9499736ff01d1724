#!/usr/bin/env bash
# The TypeScript client's bench (bench.js): `run.sh --build` builds the client (exit 3
# when Node.js or npm is missing); `run.sh --node HOST:PORT [--seconds S]` prints one
# JSON line (64 B echo, 1 connection: sync p50/p99, calls/s with 32 in flight).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
pkg=$(cd "$here/../../../clients/typescript" && pwd)
command -v node >/dev/null && command -v npm >/dev/null || { echo "node and npm are not installed" >&2; exit 3; }
if [[ ${1:-} == --build ]]; then
  cd "$pkg"
  [[ -d node_modules ]] || npm ci --no-audit --no-fund --silent
  exec npm run --silent build
fi
exec node "$here/bench.js" "$@"
