#!/usr/bin/env bash
# The Python client's bench program (bench.py).
set -euo pipefail
[[ ${1:-} == --build ]] && exit 0
exec python3 "$(dirname "$0")/bench.py" "$@"
