# Shared set-up of the remote OpenCL benchmarks: source it from the repository root.
# shellcheck shell=bash
BENCH_NAME=${BENCH_NAME:-opencl}
HOST=127.0.0.1
# shellcheck source=bench/common/lib.sh
source bench/common/lib.sh

# start_remote_service: builds the ICD and the standalone service (release), makes a
# scratch directory $work with two ICD vendor directories, $work/local (the machine's
# platforms except netaccel's: native) and $work/remote (only the netaccel ICD), starts
# netaccel-ocl-service on a free loopback port (SERVICE_PORT, when set, must be free),
# exports NETACCEL_OPENCL_NODES for it, and stops it and removes $work on exit. Point
# OCL_ICD_VENDORS at either directory.
start_remote_service() {
    target="${CARGO_TARGET_DIR:-target}"
    cargo build --release -q -p ocl-remote -p ocl-icd || die "cargo build -p ocl-remote -p ocl-icd failed"
    work="$(mktemp -d)"
    svc=""
    trap '[ -z "$svc" ] || kill "$svc" 2>/dev/null || true; rm -rf "$work"' EXIT
    mkdir -p "$work/local" "$work/remote"
    for icd in /etc/OpenCL/vendors/*.icd; do
        [ "$(basename "$icd")" = netaccel.icd ] || cp "$icd" "$work/local/"
    done
    realpath "$target/release/libnetaccel_opencl.so" > "$work/remote/netaccel.icd"
    SERVICE_PORT=${SERVICE_PORT:-}
    pick_ports SERVICE_PORT
    "$target/release/netaccel-ocl-service" --listen "$HOST:$SERVICE_PORT" > "$work/service.log" 2>&1 &
    svc=$!
    server_up netaccel-ocl-service "$svc" "$SERVICE_PORT" "$work/service.log" || die "the remote OpenCL service did not start"
    export NETACCEL_OPENCL_NODES="$HOST:$SERVICE_PORT"
}
