#!/usr/bin/env bash
# The C client's bench program (bench.c), compiled by gcc -O2 against libnetaccel.so
# (into .build/). TARGET_DIR (run.sh's): link against that build's library, build no
# Rust.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
profile=${PROFILE:-release}
target=${TARGET_DIR:-$(cd "$root" && cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')}
bin="$here/.build/bench"
if [[ ${1:-} == --build ]]; then
  if [[ -z ${TARGET_DIR:-} ]]; then
    (cd "$root" && cargo build -q $([[ $profile == release ]] && echo --release) -p netaccel-client-c)
  fi
  mkdir -p "$here/.build"
  exec gcc -std=c11 -O2 -Wall -Werror -I "$root/crates/client-c/include" "$here/bench.c" \
    -L "$target/$profile" -Wl,-rpath,"$target/$profile" -lnetaccel -o "$bin"
fi
exec "$bin" "$@"
