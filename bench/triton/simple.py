#!/usr/bin/env python3
"""Triton's examples' `simple` model on netaccel and on NVIDIA Triton (issue 30): the
p50 of one call, the way `simple_http_infer_client.py` and `simple_grpc_infer_client.py`
make it — tritonclient, INPUT0 and INPUT1 INT32 [1, 16], OUTPUT0 = sum and OUTPUT1 =
difference, binary tensors over HTTP — over HTTP and gRPC. Goal: netaccel's p50 at most
a third of Triton's on each.

    python3 bench/triton/simple.py [--calls 2000] [--node-bin PATH] [--venv DIR]

- netaccel: NODE_BIN (--node-bin; default target/release/netaccel-node, built with cargo
  when missing) serving `simple` as bench/triton_examples/make_models.py builds it (an
  ONNX graph, max_batch_size 8), one network thread.
- Triton: PyPI's nvidia-pytriton (tritonserver and its Python backend) in the venv
  bench/triton/run.sh makes (--venv; made here the same way when missing), the model a
  numpy function with the same contract (`serve_triton.py simple`), max_batch_size 8
  without a dynamic batcher.

Both servers are pinned to SERVER_CPU (0) at real-time priority (PRIO, as
bench/triton/run.sh runs them; netaccel's slot workers inherit it), this client to
CLIENT_CPU (1), at the same priority. Per protocol,
one tritonclient client per server, kept alive; after 100 warm-up calls each, the
servers take turns in blocks of 50 calls (see BLOCK), every answer checked. Prints p50 and p90 per
server and protocol and the ratio of p50s. Method and figures: docs/benchmarks.md
("Triton's simple model").
"""
from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "bench" / "triton_examples"))
import make_models  # noqa: E402  (exits with how to install onnx when it is missing)

try:
    import numpy as np
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
except ImportError as e:  # pragma: no cover - depends on the machine
    sys.exit(f"{e}: pip install 'tritonclient[all]' numpy")

PYTRITON_VERSION = os.environ.get("PYTRITON_VERSION", "0.7.0")
SERVER_CPU = os.environ.get("SERVER_CPU", "0")
CLIENT_CPU = int(os.environ.get("CLIENT_CPU", "1"))
#: Both servers (every process and thread of each) and this client at real-time
#: priority (`chrt -f 50`, as root) — on a machine shared with other work, the only way
#: their calls are not queued behind it — or "none".
PRIO = os.environ.get("PRIO", "rt" if os.geteuid() == 0 else "none")
START_S = 180


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, log: Path, what: str) -> None:
    client = httpclient.InferenceServerClient(url)
    deadline = time.time() + START_S
    while time.time() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited at start-up; its log: {log}")
        try:
            if client.is_model_ready("simple"):
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.2)
    sys.exit(f"{what} did not load `simple` in {START_S} s; its log: {log}")


def venv(path: Path) -> Path:
    python = path / "bin" / "python"
    ok = python.exists() and subprocess.run(
        [str(python), "-c", "import pytriton"], capture_output=True).returncode == 0
    if not ok:
        print(f"making {path} with nvidia-pytriton=={PYTRITON_VERSION} (once; about 400 MB)",
              file=sys.stderr)
        subprocess.run(["/usr/bin/python3", "-m", "venv", str(path)], check=True)
        subprocess.run([str(path / "bin" / "pip"), "install", "-q",
                        f"nvidia-pytriton=={PYTRITON_VERSION}"], check=True)
    return python


def calls(module, url: str):
    """One `simple` call as the examples make it, checked."""
    client = module.InferenceServerClient(url)
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    binary = {"binary_data": True} if module is httpclient else {}

    def call() -> None:
        inputs = [module.InferInput("INPUT0", [1, 16], "INT32"),
                  module.InferInput("INPUT1", [1, 16], "INT32")]
        inputs[0].set_data_from_numpy(a, **binary)
        inputs[1].set_data_from_numpy(b, **binary)
        outputs = [module.InferRequestedOutput("OUTPUT0", **binary),
                   module.InferRequestedOutput("OUTPUT1", **binary)]
        r = client.infer("simple", inputs, outputs=outputs)
        assert np.array_equal(r.as_numpy("OUTPUT0"), a + b)
        assert np.array_equal(r.as_numpy("OUTPUT1"), a - b)

    return call


#: Calls to one server before the other's turn. Call by call, the work a PyTriton call
#: leaves behind on the servers' core (its proxy and backend processes finishing up)
#: lands in the next netaccel call: with both on one core that took netaccel's p50 from
#: about 0.1 ms to 3.5 ms. A block lets it end.
BLOCK = 50


def measure(n: int, netaccel, triton) -> tuple[list[float], list[float]]:
    for _ in range(100):
        netaccel()
        triton()
    times: dict[object, list[float]] = {netaccel: [], triton: []}
    for i in range(0, n, BLOCK):
        for f in ((netaccel, triton) if (i // BLOCK) % 2 == 0 else (triton, netaccel)):
            time.sleep(0.05)
            for _ in range(min(BLOCK, n - i)):
                t = time.perf_counter()
                f()
                times[f].append(time.perf_counter() - t)
    return times[netaccel], times[triton]


def pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000, help="calls per server and protocol")
    ap.add_argument("--node-bin", type=Path, default=ROOT / "target/release/netaccel-node")
    ap.add_argument("--venv", type=Path, default=Path.home() / ".cache/netaccel/triton" /
                    f"venv-{PYTRITON_VERSION}")
    args = ap.parse_args()
    if not args.node_bin.exists():
        subprocess.run(["cargo", "build", "--release", "-p", "netaccel-node"], cwd=ROOT, check=True)
    python = venv(args.venv)
    work = Path(tempfile.mkdtemp(prefix="netaccel-simple-"))
    models = work / "models" / "simple"
    (models / "1").mkdir(parents=True)
    model, max_batch = make_models.models()["simple"]
    make_models.onnx.save(model, str(models / "1" / "model.onnx"))
    (models / "config.toml").write_text(make_models.config(model, max_batch))
    # Slot workers at the node's own priority (see PRIO): at their default, SCHED_IDLE,
    # a model's worker on a core other work keeps busy waits for it.
    (work / "node.toml").write_text(
        f'models_dir = "{work / "models"}"\nslot_worker_policy = "inherit"\n')
    ports = {k: free_port() for k in ("nh", "nr", "ng", "th", "tg", "tm")}
    node_log, triton_log = work / "node.log", work / "triton.log"
    prio = ["chrt", "-f", "50"] if PRIO == "rt" else []
    node = subprocess.Popen(
        [*prio, "taskset", "-c", SERVER_CPU, str(args.node_bin), "--config", str(work / "node.toml"),
         "--http", f"127.0.0.1:{ports['nh']}", "--rac", f"127.0.0.1:{ports['nr']}",
         "--grpc", f"127.0.0.1:{ports['ng']}", "--io-threads", "1", "--log-level", "warn"],
        stdout=subprocess.DEVNULL, stderr=open(node_log, "w"))
    triton = subprocess.Popen(
        [*prio, "taskset", "-c", SERVER_CPU, str(python), str(HERE / "serve_triton.py"),
         str(ports["th"]), str(ports["tg"]), str(ports["tm"]), "simple"],
        stdout=subprocess.DEVNULL, stderr=open(triton_log, "w"), start_new_session=True)
    try:
        wait_ready(f"127.0.0.1:{ports['nh']}", node, node_log, "netaccel-node")
        wait_ready(f"127.0.0.1:{ports['th']}", triton, triton_log, "Triton")
        os.sched_setaffinity(0, {CLIENT_CPU})
        if PRIO == "rt":
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))
        load = os.getloadavg()[0]
        rows = []
        for name, module, n_port, t_port in (("HTTP", httpclient, "nh", "th"),
                                             ("gRPC", grpcclient, "ng", "tg")):
            a, b = measure(args.calls, calls(module, f"127.0.0.1:{ports[n_port]}"),
                           calls(module, f"127.0.0.1:{ports[t_port]}"))
            rows.append((name, a, b))
        load_end = os.getloadavg()[0]
    finally:
        node.terminate()
        os.killpg(triton.pid, signal.SIGTERM)
        for p in (node, triton):
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
    print(f"# `simple` (INT32 [1, 16] add/sub), tritonclient, {args.calls} calls per server and "
          f"protocol, in turns; servers on CPU {SERVER_CPU} (priority {PRIO}), client on CPU {CLIENT_CPU}; "
          f"load average {load:.1f} -> {load_end:.1f}")
    print()
    print("| protocol | netaccel p50 µs | netaccel p90 µs | Triton p50 µs | Triton p90 µs | p50 netaccel / Triton |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    met = True
    for name, a, b in rows:
        ratio = statistics.median(a) / statistics.median(b)
        met &= ratio <= 1 / 3
        print(f"| {name} | {statistics.median(a) * 1e6:.0f} | {pct(a, 0.9) * 1e6:.0f} | "
              f"{statistics.median(b) * 1e6:.0f} | {pct(b, 0.9) * 1e6:.0f} | {ratio:.2f} |")
    print()
    print(f"Goal (p50 ≤ 1/3 of Triton's on each protocol): {'met' if met else 'NOT met'}.")


if __name__ == "__main__":
    main()
