#!/usr/bin/env bash
# RTL accelerators under Verilator: how fast the simulation runs and what the designs
# would take on an FPGA.
#
# 1. In-process harness (crates/rtl/examples/rtl_bench.rs), on one CPU: simulated
#    cycles per second, calls per second of one model for 64 B … 32 KiB calls, and the
#    cycles per call with the latency they stand for at 250 MHz (topk's per-KiB figure
#    beside OffRAC's 1.6 µs).
# 2. Through a node (optional, RTL_BENCH_NODE=1): the node with one RTL device serving
#    echo and topk, netaccel-bench over HTTP, 64 B and 4 KiB, one connection; the
#    node's reported exec time is the modelled one.
# 3. Resources (optional, RTL_BENCH_SYNTH=1, minutes): yosys synth_xilinx for
#    UltraScale+ of each built-in, via `netaccel rtl synth`.
#
# Results go to bench/out/rtl-*.txt. Knobs: SECONDS (per point, default 2), CPU (the
# core the harness runs on, default 1).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=bench/out
mkdir -p "$out"
stamp=$(date -u +%Y%m%dT%H%M%SZ)
seconds=${SECONDS_PER_POINT:-2}
cpu=${CPU:-1}

command -v verilator >/dev/null || { echo "verilator is not installed" >&2; exit 1; }
cargo build --release -q -p netaccel-rtl --example rtl_bench
target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')

echo "==> harness, one model at a time on CPU $cpu, $seconds s per point"
{
  echo "# rtl_bench, $(date -u), $(verilator --version), load $(cut -d' ' -f1-3 /proc/loadavg)"
  taskset -c "$cpu" "$target_dir/release/examples/rtl_bench" "$seconds"
} | tee "$out/rtl-harness-$stamp.txt"

if [[ "${RTL_BENCH_NODE:-0}" == 1 ]]; then
  echo "==> through a node (HTTP, one connection)"
  cargo build --release -q -p netaccel-node -p netaccel-bench
  dir=$(mktemp -d)
  trap 'kill "${node_pid:-}" 2>/dev/null || true; rm -rf "$dir"' EXIT
  read -r http_port rac_port < <(python3 -c 'import socket
socks = [socket.socket() for _ in range(2)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))')
  cat > "$dir/node.toml" <<EOF
http = "127.0.0.1:$http_port"
rac = "127.0.0.1:$rac_port"
log_level = "warn"

[[devices]]
name = "rtl0"
backend = "rtl"
slots = ["echo", "topk"]
EOF
  taskset -c 0 "$target_dir/release/netaccel-node" --config "$dir/node.toml" &
  node_pid=$!
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$http_port/health" >/dev/null && break; sleep 0.1; done
  {
    for size in 64 4096; do
      for accel in echo "topk?k=16"; do
        echo "## $accel, $size B"
        taskset -c 1 "$target_dir/release/netaccel-bench" run "http://127.0.0.1:$http_port/v1/fn/$accel" \
          --size "$size" --duration 5 2>&1 | tail -n 12
        # The exec time a call reports is the modelled one: cycles at the clock.
        head -c "$size" /dev/zero | curl -s -o /dev/null -D - --data-binary @- \
          "http://127.0.0.1:$http_port/v1/fn/$accel" | grep -i '^x-netaccel-exec-ns'
      done
    done
  } | tee "$out/rtl-node-$stamp.txt"
fi

if [[ "${RTL_BENCH_SYNTH:-0}" == 1 ]]; then
  echo "==> yosys synth_xilinx -family xcup (minutes)"
  cargo build --release -q -p netaccel-client
  for name in echo to_uppercase topk minmax; do
    "$target_dir/release/netaccel" rtl synth "rtl/accelerators/$name"
  done | tee "$out/rtl-synth-$stamp.txt"
fi
