#!/usr/bin/env bash
# The C client's bench program (bench.c), compiled by gcc -O2 against libnetaccel.so.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
profile=${PROFILE:-release}
target=$(cd "$root" && cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
bin="$target/$profile/netaccel-c-bench"
if [[ ${1:-} == --build ]]; then
  (cd "$root" && cargo build -q $([[ $profile == release ]] && echo --release) -p netaccel-client-c)
  exec gcc -std=c11 -O2 -Wall -Werror -I "$root/crates/client-c/include" "$here/bench.c" \
    -L "$target/$profile" -Wl,-rpath,"$target/$profile" -lnetaccel -o "$bin"
fi
exec "$bin" "$@"
