#!/usr/bin/env bash
# Remote OpenCL round trip with and without TLS: one node (its plain OpenCL port and its
# `[tls] opencl` port, a tenant's token required on both), the netaccel ICD on the
# network path (NETACCEL_OPENCL_SHM=0: the same-host path would leave TLS after Hello),
# and bench/opencl/overhead.c's small task (write 64 B, kernel, read 64 B, clFinish:
# one round trip per iteration; MODE=large: 1 MiB each way).
#
#   bench/opencl/tls.sh [ITERATIONS] [ROUNDS]
#
# Needs gcc, openssl, ocl-icd-opencl-dev, opencl-headers and pocl-opencl-icd. The two
# setups run interleaved, ROUNDS times (default 5), so that a change of machine load
# hits both alike; the summary gives each setup's median p50 over the rounds and the
# per-round TLS/plain ratio of p50s with its median. PROFILE=debug uses the debug
# builds (default release). Ports are free loopback ports.
set -euo pipefail
cd "$(dirname "$0")/../.."
iters="${1:-2000}"
rounds="${2:-5}"
profile="${PROFILE:-release}"
mode="${MODE:-small}"
BENCH_NAME=opencl/tls.sh
HOST=127.0.0.1
# shellcheck source=bench/common/lib.sh
source bench/common/lib.sh
for tool in gcc openssl; do
    command -v "$tool" > /dev/null || die "$tool not found"
done
flag=(--release)
[ "$profile" = release ] || flag=()
cargo build "${flag[@]}" -q -p netaccel-node -p ocl-icd || die "cargo build failed"
target="${CARGO_TARGET_DIR:-target}/$profile"
work="$(mktemp -d)"
node=""
trap '[ -z "$node" ] || kill "$node" 2>/dev/null || true; rm -rf "$work"' EXIT

# A CA and a certificate for 127.0.0.1.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
    -subj /CN=bench-ca -keyout "$work/ca.key" -out "$work/ca.pem" 2> /dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=127.0.0.1 \
    -keyout "$work/node.key" -out "$work/node.csr" 2> /dev/null
printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' > "$work/ext"
openssl x509 -req -in "$work/node.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" \
    -CAcreateserial -days 1 -extfile "$work/ext" -out "$work/node.pem" 2> /dev/null

HTTP_PORT="" RAC_PORT="" GRPC_PORT="" OCL_PORT="" OCL_TLS_PORT=""
pick_ports HTTP_PORT RAC_PORT GRPC_PORT OCL_PORT OCL_TLS_PORT
cat > "$work/node.toml" << EOF
http = "$HOST:$HTTP_PORT"
rac = "$HOST:$RAC_PORT"
grpc = "$HOST:$GRPC_PORT"
anonymous = "refuse"

[[tenants]]
name = "bench"
token = "bench-token"
opencl = true

[opencl]
listen = "$HOST:$OCL_PORT"

[tls]
opencl = "$HOST:$OCL_TLS_PORT"
cert = "$work/node.pem"
key = "$work/node.key"
EOF
"$target/netaccel-node" --config "$work/node.toml" > "$work/node.log" 2>&1 &
node=$!
server_up netaccel-node "$node" "$OCL_TLS_PORT" "$work/node.log" || die "the node did not start"

mkdir -p "$work/vendors"
realpath "$target/libnetaccel_opencl.so" > "$work/vendors/netaccel.icd"
gcc -O2 -Wall -I bench/common/c -o "$work/overhead" bench/opencl/overhead.c -lOpenCL
run() { # label, node address
    printf '%-6s ' "$1"
    env OCL_ICD_VENDORS="$work/vendors" NETACCEL_OPENCL_SHM=0 NETACCEL_OPENCL_NODES="$2" \
        NETACCEL_TENANT=bench NETACCEL_TENANT_TOKEN=bench-token NETACCEL_CACERT="$work/ca.pem" \
        "$work/overhead" "$mode" "$iters"
}
for _ in $(seq "$rounds"); do
    run plain "$HOST:$OCL_PORT"
    run tls "tls://$HOST:$OCL_TLS_PORT"
done | tee "$work/runs.txt"
echo "== $mode: median p50 over $rounds rounds (microseconds, $profile build, $(nproc) CPUs)"
for label in plain tls; do
    printf '%-6s %s\n' "$label" "$(awk -v l="$label" '$1 == l { print $5 }' "$work/runs.txt" | median)"
done
echo "== per-round p50 ratio tls/plain, and its median"
ratios=$(awk '$1 == "plain" { p = $5 } $1 == "tls" { printf "%.2f\n", $5 / p }' "$work/runs.txt")
echo "$(echo "$ratios" | tr '\n' ' ')  median $(echo "$ratios" | median)"
