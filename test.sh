#!/usr/bin/env bash
# Runs the whole netaccel test suite: formatting, lints, unit and property tests,
# black-box tests that start the real node and drive it with curl and Rust clients,
# fuzz-corpus regression tests, the Python client's tests, and the check that
# netaccel-bench agrees with wrk (one connection, short).
#
# Installs what it needs: Debian packages via apt-get (when run as root and missing),
# crates via cargo, Python test tools via pip.
set -euo pipefail
cd "$(dirname "$0")"

debian_packages=(curl make gcc wrk pkg-config ocl-icd-opencl-dev ocl-icd-libopencl1 opencl-headers pocl-opencl-icd clinfo prometheus)

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

# Python test tools from PyPI: pytest for the client's tests; pyopencl (with numpy)
# for the check that an unmodified pyopencl program runs against a remote device.
for module in pytest pyopencl; do
  if ! python3 -c "import $module" >/dev/null 2>&1; then
    echo "==> installing $module"
    python3 -m pip install -q "$module"
  fi
done

echo "==> cargo fmt --check"
cargo fmt --all -- --check

echo "==> cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

echo "==> cargo test (workspace)"
cargo test --workspace

echo "==> Python client tests (against a live node)"
cargo build -q -p netaccel-node
node_dir=$(mktemp -d)
read -r http_port rac_port < <(python3 -c 'import socket
ports = []
for _ in range(2):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); ports.append(s.getsockname()[1]); s.close()
print(*ports)')
printf 'http = "127.0.0.1:%s"\nrac = "127.0.0.1:%s"\nlog_level = "warn"\n' "$http_port" "$rac_port" > "$node_dir/node.toml"
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
"$target_dir/debug/netaccel-node" --config "$node_dir/node.toml" &
node_pid=$!
trap 'kill "$node_pid" 2>/dev/null; rm -rf "$node_dir"' EXIT
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$http_port/health" >/dev/null && break
  sleep 0.1
done
NETACCEL_RAC_ADDR="127.0.0.1:$rac_port" python3 -m pytest -q clients/python

# The documentation's promises, against nodes it starts on free ports: every recipe of
# docs/accelerators.md, extending.md and security.md prints what the page says; the
# monitoring files and the metrics reference match what a live node exports
# (promtool, and a real Prometheus scraping the node).
echo "==> documentation tests (recipes, monitoring, metrics reference)"
python3 -m pytest -q docs/tests

# netaccel-bench and wrk against the same C HTTP responder, 1 connection, 7 rounds of
# 2 s (wrk counts its start-up in its rate, which weighs on 1 s runs): the medians of
# the per-round ratios of calls/s and p50 within 10% of 1. At 16 connections the p50s
# differ by about 10% on this 2-core machine; that comparison is in
# bench/wrk_agreement.sh and docs/benchmarks.md, not in this gate. On a shared machine
# a burst of noise can move several rounds of one tool (+24 % in two of seven rounds
# here), so a failed check is run once more; a real disagreement fails both.
echo "==> netaccel-bench agrees with wrk (1 connection)"
cargo build --release -q -p netaccel-bench
wrk_check() { BENCH_BIN="$target_dir/release/netaccel-bench" CONNS_LIST=1 ROUNDS=7 DURATION=2 bench/wrk_agreement.sh; }
wrk_check || { echo "==> wrk agreement failed once; measuring again"; wrk_check; }

echo "==> all tests passed"
