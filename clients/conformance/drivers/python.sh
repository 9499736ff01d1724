#!/usr/bin/env bash
# The Python client's conformance driver (clients/python); needs only python3.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
command -v python3 >/dev/null || { echo "python3 is not installed" >&2; exit 3; }
[[ ${1:-} == --build ]] && exit 0
exec python3 "$here/python/driver.py" "$@"
