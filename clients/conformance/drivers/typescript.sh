#!/usr/bin/env bash
# The TypeScript client's conformance driver (clients/typescript/conformance/driver.ts);
# needs Node.js 18+ and npm (the package's dev dependencies come from npm).
set -euo pipefail
pkg=$(cd "$(dirname "$0")/../../typescript" && pwd)
command -v node >/dev/null && command -v npm >/dev/null || { echo "node and npm are not installed" >&2; exit 3; }
if [[ ${1:-} == --build ]]; then
  cd "$pkg"
  [[ -d node_modules ]] || npm ci --no-audit --no-fund --silent
  exec npm run --silent build
fi
exec node "$pkg/dist/conformance/driver.js" "$@"
