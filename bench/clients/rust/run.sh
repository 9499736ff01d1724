#!/usr/bin/env bash
# The Rust client's bench program (crates/client/examples/rac_bench.rs), the baseline.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
profile=${PROFILE:-release}
flag=$([[ $profile == release ]] && echo --release || true)
if [[ ${1:-} == --build ]]; then
  cd "$root" && exec cargo build -q $flag -p netaccel-client --example rac_bench
fi
target=$(cd "$root" && cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
exec "$target/$profile/examples/rac_bench" "$@"
