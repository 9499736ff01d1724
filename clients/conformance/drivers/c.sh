#!/usr/bin/env bash
# The C client's conformance driver (crates/client-c/conformance/driver.c), compiled by
# gcc against netaccel.h and libnetaccel.so; the case comes on stdin (flatten.py).
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
here="$root/clients/conformance"
for tool in cargo gcc; do
  command -v "$tool" >/dev/null || { echo "$tool is not installed" >&2; exit 3; }
done
target=$(cd "$root" && cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
driver="$target/debug/netaccel-c-conformance"
if [[ ${1:-} == --build ]]; then
  (cd "$root" && cargo build -q -p netaccel-client-c)
  exec gcc -std=c11 -Wall -Wextra -Werror -O1 -I "$root/crates/client-c/include" \
    "$root/crates/client-c/conformance/driver.c" -L "$target/debug" -Wl,-rpath,"$target/debug" -lnetaccel -o "$driver"
fi
cases=""; name=""; args=()
while (($#)); do
  case $1 in
    --cases) cases=$2; shift 2 ;;
    --case) name=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
  esac
done
python3 "$here/flatten.py" "${cases:-$here/cases.json}" "$name" | exec "$driver" "${args[@]}"
