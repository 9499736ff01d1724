#!/usr/bin/env bash
# Remote OpenCL overhead: native PoCL vs the netaccel ICD through a local node service,
# with the shared-memory path (same host) and with the network path forced.
#
#   bench/opencl/run.sh [ITERATIONS] [ROUNDS]
#
# Needs gcc, ocl-icd-opencl-dev, opencl-headers and pocl-opencl-icd. The three setups
# run interleaved, ROUNDS times (default 5), so that a change of machine load hits all
# of them alike; for 1 MiB and 256 MiB a fourth, remote-shm-one-copier, is shared memory
# with the ICD's copies made by the application's thread alone
# (NETACCEL_OPENCL_COPY_THREADS=0), which shows what the remote path costs without the
# helper thread that shares large copies. Each run of overhead.c prints median/p90/p99
# in microseconds (or MiB/s for the 256 MiB writes), and the summary gives the median
# over the rounds, then each remote run against the native run just before it (per
# round, and their median).
# Both CPUs are kept from halting meanwhile (KEEP_AWAKE=1, the default; see
# awake_start in bench/common/lib.sh): on a virtual machine a wake-up of a halted CPU costs
# tens of µs, and the remote path has two more thread wake-ups than native. The service
# listens on a free loopback port (SERVICE_PORT to choose one).
set -euo pipefail
cd "$(dirname "$0")/../.."
iters="${1:-2000}"
rounds="${2:-5}"
BENCH_NAME=opencl/run.sh
# shellcheck source=bench/opencl/common.sh
source bench/opencl/common.sh
start_remote_service
trap 'awake_stop; kill "$svc" 2>/dev/null || true; rm -rf "$work"' EXIT
awake_start "0-$(($(nproc) - 1))"
gcc -O2 -Wall -I bench/common/c -o "$work/overhead" bench/opencl/overhead.c -lOpenCL
run() { # label, vendors dir, extra env, mode, iterations
    printf '%-22s ' "$1"
    env OCL_ICD_VENDORS="$work/$2" $3 "$work/overhead" "$4" "$5"
}
for round in $(seq "$rounds"); do
    for mode in small large; do
        run "native" local "" "$mode" "$iters"
        run "remote-shared-memory" remote "" "$mode" "$iters"
        [ "$mode" = small ] || run "remote-shm-one-copier" remote "NETACCEL_OPENCL_COPY_THREADS=0" "$mode" "$iters"
        run "remote-network" remote "NETACCEL_OPENCL_SHM=0" "$mode" "$iters"
    done
    run "native" local "" bw 3
    run "remote-shared-memory" remote "" bw 3
    run "remote-shm-one-copier" remote "NETACCEL_OPENCL_COPY_THREADS=0" bw 3
    [ "$round" -gt 1 ] || run "remote-network" remote "NETACCEL_OPENCL_SHM=0" bw 2
done | tee "$work/runs.txt"
echo "== median over $rounds rounds (microseconds; MiB/s for bw)"
awk '{ print $1 "_" $2 "_" $3, $5 }' "$work/runs.txt" | sort -k1,1 -k2,2n |
    awk '{ n[$1]++; v[$1, n[$1]] = $2 }
         END { for (k in n) printf "%-40s %s\n", k, v[k, int((n[k] + 1) / 2)] }' | sort
# Paired per round: each remote run against the native run just before it, so that a
# change of machine load between rounds moves both sides of a pair alike.
echo "== per-round remote vs native, and their median (small: +µs; large: ratio; bw: %)"
awk '{ key = $2; v = $5
       if ($1 == "native") nat[key] = v
       else if (key in nat) {
           d = (key == "small") ? v - nat[key] : (key == "large") ? v / nat[key] : 100 * v / nat[key]
           out[$1 " " key] = out[$1 " " key] sprintf(" %.2f", d)
       } }
     END { for (k in out) print k ":" out[k] }' "$work/runs.txt" | sort |
    while IFS=: read -r k vals; do
        printf '%-40s%s   median %s\n' "$k" "$vals" "$(tr ' ' '\n' <<<"$vals" | grep . | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }')"
    done
