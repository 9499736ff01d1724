#!/usr/bin/env bash
# The Rust client's bench program (crates/client/examples/rac_bench.rs), the baseline.
# TARGET_DIR (run.sh's): take the program from that build, build nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
profile=${PROFILE:-release}
flag=$([[ $profile == release ]] && echo --release || true)
if [[ ${1:-} == --build ]]; then
  if [[ -n ${TARGET_DIR:-} ]]; then
    exec test -x "$TARGET_DIR/$profile/examples/rac_bench"
  fi
  cd "$root" && exec cargo build -q $flag -p netaccel-client --example rac_bench
fi
target=${TARGET_DIR:-$(cd "$root" && cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')}
exec "$target/$profile/examples/rac_bench" "$@"
