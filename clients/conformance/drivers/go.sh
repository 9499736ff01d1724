#!/usr/bin/env bash
# The Go client's conformance driver (clients/go/cmd/conformance), built by `go build`
# (standard library only: nothing is downloaded).
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
command -v go >/dev/null || { echo "go is not installed" >&2; exit 3; }
bin="$root/clients/go/.build/conformance"
if [[ ${1:-} == --build ]]; then
  cd "$root/clients/go" && exec go build -o "$bin" ./cmd/conformance
fi
exec "$bin" "$@"
