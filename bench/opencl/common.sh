# Shared set-up of the remote OpenCL benchmarks: source it from the repository root.
# shellcheck shell=bash
#
# start_remote_service: builds the ICD and the standalone service (release), makes a
# scratch directory $work with two ICD vendor directories, $work/local (the machine's
# platforms except netaccel's: native) and $work/remote (only the netaccel ICD), starts
# netaccel-ocl-service on a random loopback port, exports NETACCEL_OPENCL_NODES for it,
# and stops it and removes $work on exit. Point OCL_ICD_VENDORS at either directory.
start_remote_service() {
    target="${CARGO_TARGET_DIR:-target}"
    cargo build --release -q -p ocl-remote -p ocl-icd
    work="$(mktemp -d)"
    trap 'kill "$svc" 2>/dev/null || true; rm -rf "$work"' EXIT
    mkdir -p "$work/local" "$work/remote"
    for icd in /etc/OpenCL/vendors/*.icd; do
        [ "$(basename "$icd")" = netaccel.icd ] || cp "$icd" "$work/local/"
    done
    realpath "$target/release/libnetaccel_opencl.so" > "$work/remote/netaccel.icd"
    local port=$((20000 + RANDOM % 20000))
    "$target/release/netaccel-ocl-service" --listen "127.0.0.1:$port" > "$work/service.log" 2>&1 &
    svc=$!
    sleep 1
    export NETACCEL_OPENCL_NODES="127.0.0.1:$port"
}
