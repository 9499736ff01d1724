#!/usr/bin/env bash
# The Rust client's conformance driver (crates/client/examples/conformance.rs).
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
command -v cargo >/dev/null || { echo "cargo is not installed" >&2; exit 3; }
if [[ ${1:-} == --build ]]; then
  cd "$root" && exec cargo build -q -p netaccel-client --example conformance
fi
target=$(cd "$root" && cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
exec "$target/debug/examples/conformance" "$@"
