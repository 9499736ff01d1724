#!/usr/bin/env bash
# Runs the whole netaccel test suite: formatting, lints, unit and property tests,
# black-box tests that start the real node and drive it with curl and Rust clients,
# fuzz-corpus regression tests, and the Python client's tests.
#
# Installs what it needs: Debian packages via apt-get (when run as root and missing),
# crates via cargo, Python test tools via pip.
set -euo pipefail
cd "$(dirname "$0")"

debian_packages=(curl pkg-config ocl-icd-opencl-dev ocl-icd-libopencl1 opencl-headers pocl-opencl-icd clinfo)

missing=()
for p in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    echo "==> installing Debian packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "missing Debian packages: ${missing[*]} (run as root to install them)" >&2
    exit 1
  fi
fi

if ! python3 -m pytest --version >/dev/null 2>&1; then
  echo "==> installing pytest"
  python3 -m pip install -q pytest
fi

echo "==> cargo fmt --check"
cargo fmt --all -- --check

echo "==> cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

echo "==> cargo test (workspace)"
cargo test --workspace

echo "==> Python client tests"
python3 -m pytest -q clients/python

echo "==> all tests passed"
