#!/usr/bin/env bash
# The Go client's bench program (main.go; clients/go through a replace directive).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command -v go >/dev/null || { echo "go is not installed" >&2; exit 3; }
if [[ ${1:-} == --build ]]; then
  cd "$here" && exec go build -o "$here/.build/bench" .
fi
exec "$here/.build/bench" "$@"
