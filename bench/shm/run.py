#!/usr/bin/env python3
"""System shared memory against in-band tensors (issue 30): one call with a 4 MiB
input, its tensor in the request body (HTTP binary tensor, gRPC raw contents) or in a
registered POSIX shared-memory region, with tritonclient as Triton's own examples use
it (`simple_http_shm_client.py`, `simple_grpc_shm_client.py`). Goal: the shared-memory
call's p50 at least 2x lower than the in-band call's.

    python3 bench/shm/run.py [--calls 200] [--mib 4] [--node-bin PATH]

The model is the node's built-in `topk` (INT32 values in, the k largest out, k = 3):
the input is MIB MiB of INT32 and the output 12 bytes, so what differs between the
two ways is how the input reaches the node. The region is written once and registered
once (as a client reusing its buffers does); each shared-memory call names it and its
output region. Per protocol the two ways alternate call by call on one client (its
connections kept alive), after 10 warm-up calls of each; every answer is checked
against numpy's own top 3. Client and node share the machine unpinned; the figures
are medians (p50) and p90 per way, and the ratio of p50s. Method and figures:
docs/benchmarks.md ("System shared memory").

The node is NODE_BIN (--node-bin; default target/release/netaccel-node, built with
cargo when missing), with its default slots, on loopback ports the kernel picks.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

try:
    import numpy as np
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    import tritonclient.utils.shared_memory as shm
except ImportError as e:  # pragma: no cover - depends on the machine
    sys.exit(f"{e}: pip install 'tritonclient[all]' numpy")

K = 3


def start_node(node_bin: Path, log_path: Path):
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [str(node_bin), "--http", "127.0.0.1:0", "--rac", "127.0.0.1:0",
         "--grpc", "127.0.0.1:0", "--log-level", "info"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    found: dict[str, str] = {}
    ready = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            log.write(line)
            log.flush()
            for key in ("http", "grpc"):
                m = re.search(rf"\b{key}=(\S+:\d+)", line)
                if m and key not in found:
                    found[key] = m.group(1)
            if len(found) == 2:
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(60) or len(found) != 2:
        proc.kill()
        sys.exit(f"the node did not start; its log: {log_path}")
    return proc, found["http"], found["grpc"]


def measure(calls: int, inband, shared) -> tuple[list[float], list[float]]:
    """Alternates the two ways call by call; seconds per call of each."""
    for _ in range(10):
        inband()
        shared()
    a: list[float] = []
    b: list[float] = []
    for i in range(calls):
        first, second = (inband, shared) if i % 2 == 0 else (shared, inband)
        for f in (first, second):
            t = time.perf_counter()
            f()
            (a if f is inband else b).append(time.perf_counter() - t)
    return a, b


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def run_protocol(name: str, module, url: str, x, want, calls: int, tag: str):
    client = module.InferenceServerClient(url)
    in_key, out_key = f"/netaccel-bench-{tag}-{name}-in", f"/netaccel-bench-{tag}-{name}-out"
    in_region = shm.create_shared_memory_region(f"{name}-in", in_key, x.nbytes)
    out_region = shm.create_shared_memory_region(f"{name}-out", out_key, 4 * K)
    try:
        shm.set_shared_memory_region(in_region, [x])
        client.register_system_shared_memory(f"{name}-in", in_key, x.nbytes)
        client.register_system_shared_memory(f"{name}-out", out_key, 4 * K)
        binary = {"binary_data": True} if module is httpclient else {}

        def inband():
            inp = module.InferInput("INPUT0", list(x.shape), "INT32")
            inp.set_data_from_numpy(x, **binary)
            out = module.InferRequestedOutput("OUTPUT0", **binary)
            got = client.infer("topk", [inp], outputs=[out], parameters={"k": K}).as_numpy("OUTPUT0")
            assert np.array_equal(got, want), (got, want)

        def shared():
            inp = module.InferInput("INPUT0", list(x.shape), "INT32")
            inp.set_shared_memory(f"{name}-in", x.nbytes)
            out = module.InferRequestedOutput("OUTPUT0", **binary)
            out.set_shared_memory(f"{name}-out", 4 * K)
            client.infer("topk", [inp], outputs=[out], parameters={"k": K})
            got = shm.get_contents_as_numpy(out_region, np.int32, [K])
            assert np.array_equal(got, want), (got, want)

        return measure(calls, inband, shared)
    finally:
        try:
            client.unregister_system_shared_memory()
        finally:
            shm.destroy_shared_memory_region(in_region)
            shm.destroy_shared_memory_region(out_region)
            client.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200, help="calls of each way per protocol")
    ap.add_argument("--mib", type=float, default=4.0, help="input size in MiB")
    ap.add_argument("--node-bin", type=Path, default=ROOT / "target/release/netaccel-node")
    args = ap.parse_args()
    if not args.node_bin.exists():
        subprocess.run(["cargo", "build", "--release", "-p", "netaccel-node"], cwd=ROOT, check=True)
    n = int(args.mib * (1 << 20)) // 4
    rng = np.random.default_rng(30)
    x = rng.integers(-(1 << 30), 1 << 30, size=n, dtype=np.int32)
    want = np.sort(x)[::-1][:K].astype(np.int32)
    log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"netaccel-shm-bench-{os.getpid()}.log"
    node, http, grpc = start_node(args.node_bin, log_path)
    rows = []
    try:
        load = os.getloadavg()[0]
        for name, module, url in (("http", httpclient, http), ("grpc", grpcclient, grpc)):
            inband, shared = run_protocol(name, module, url, x, want, args.calls, str(os.getpid()))
            rows.append((name, inband, shared))
        load_end = os.getloadavg()[0]
    finally:
        node.terminate()
        node.wait(10)
    print(f"# topk of {args.mib:g} MiB INT32 (k = {K}), {args.calls} calls of each way per protocol, "
          f"alternating; load average {load:.1f} -> {load_end:.1f}")
    print()
    print("| protocol | in-band p50 ms | in-band p90 ms | shared memory p50 ms | shared memory p90 ms | p50 in-band / shared |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, inband, shared in rows:
        a, b = statistics.median(inband), statistics.median(shared)
        print(f"| {name} | {a * 1e3:.2f} | {pct(inband, 0.9) * 1e3:.2f} | {b * 1e3:.2f} | "
              f"{pct(shared, 0.9) * 1e3:.2f} | {a / b:.2f}x |")


if __name__ == "__main__":
    main()
