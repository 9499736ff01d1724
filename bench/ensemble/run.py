#!/usr/bin/env python3
"""Ensembles (issue 30): a two-step pipeline, `sobel` (a built-in accelerator) then
`edge_grid` (a small ONNX model: the edge image's mean over a 4x4 grid of tiles), as
one call to the ensemble `sobel_grid` against the client making the two calls itself
(sobel's edges back to the client, then out again to the model). Both over the Open
Inference Protocol on HTTP with binary tensors (what tritonclient sends), on one
keep-alive connection, alternating call by call; each answer checked to be the
other's bytes. Prints p50 and p90 of a whole pipeline (one call, or the two), the
bytes it put on the wire each way (request and response, heads included, counted on
the socket), and the ratios.

    pip install onnx
    python3 bench/ensemble/run.py [--calls 2000] [--size 256] [--node-bin PATH]

The node is NODE_BIN (--node-bin; default target/release/netaccel-node, built with
cargo when missing), started on loopback ports the kernel picks, with a model
repository this script writes into a temporary folder with
bench/triton_examples/make_models.py's `write_ensembles` (the model with the `onnx`
package; the configs as docs/inference.md "Ensembles" shows them). Method and
figures: docs/benchmarks.md ("Ensembles").
"""
from __future__ import annotations

import argparse
import json
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The model and the ensemble's config have one home: the examples' model generator.
sys.path.insert(0, str(ROOT / "bench" / "triton_examples"))
import make_models  # noqa: E402  (exits with how to install onnx when it is missing)

GRID = make_models.GRID


def repository(out: Path, size: int) -> None:
    """`edge_grid` and the ensemble `sobel_grid` for images of `size` x `size`."""
    out.mkdir(parents=True)
    make_models.write_ensembles(out, size)


def start_node(node_bin: Path, models: Path, log_path: Path):
    config = models.parent / "node.toml"
    config.write_text(f'models_dir = "{models}"\n')
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [str(node_bin), "--config", str(config), "--http", "127.0.0.1:0", "--rac", "127.0.0.1:0",
         "--log-level", "info"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    found: dict[str, str] = {}
    ready = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            log.write(line)
            m = re.search(r"\bhttp=(\S+:\d+)", line)
            if m and "http" not in found:
                found["http"] = m.group(1)
                ready.set()
        ready.set()

    threading.Thread(target=read, daemon=True).start()
    if not ready.wait(60) or "http" not in found:
        proc.kill()
        sys.exit(f"the node did not start; its log: {log_path}")
    host, port = found["http"].rsplit(":", 1)
    return proc, (host, int(port))


class Conn:
    """One keep-alive HTTP/1.1 connection that counts the bytes it sends and reads."""

    def __init__(self, addr) -> None:
        self.sock = socket.create_connection(addr)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        self.sent = 0
        self.received = 0

    def infer(self, model: str, inp: str, out: str, shape: list[int], datatype: str, data: bytes) -> bytes:
        header = json.dumps({
            "inputs": [{"name": inp, "shape": shape, "datatype": datatype,
                        "parameters": {"binary_data_size": len(data)}}],
            "outputs": [{"name": out, "parameters": {"binary_data": True}}],
        }).encode()
        request = (
            f"POST /v2/models/{model}/infer HTTP/1.1\r\nHost: node\r\n"
            f"Content-Type: application/octet-stream\r\n"
            f"Inference-Header-Content-Length: {len(header)}\r\n"
            f"Content-Length: {len(header) + len(data)}\r\n\r\n"
        ).encode() + header + data
        self.sock.sendall(request)
        self.sent += len(request)
        head, body = self.response()
        status = int(head.split(b" ", 2)[1])
        if status != 200:
            sys.exit(f"{model}: HTTP {status}: {body[:500]!r}")
        json_len = int(re.search(rb"(?i)\r\ninference-header-content-length: *(\d+)", head).group(1))
        return body[json_len:]

    def response(self) -> tuple[bytes, bytes]:
        while b"\r\n\r\n" not in self.buf:
            self.read()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        length = int(re.search(rb"(?i)\r\ncontent-length: *(\d+)", head).group(1))
        while len(self.buf) < length:
            self.read()
        body, self.buf = self.buf[:length], self.buf[length:]
        self.received += len(head) + 4 + length
        return head, body

    def read(self) -> None:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            sys.exit("the node closed the connection")
        self.buf += chunk


def measure(conn: Conn, run) -> tuple[float, int, int, bytes]:
    sent, received = conn.sent, conn.received
    t0 = time.perf_counter()
    out = run()
    took = time.perf_counter() - t0
    return took, conn.sent - sent, conn.received - received, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="pipelines of each kind")
    parser.add_argument("--size", type=int, default=256, help="image side, a multiple of 4")
    parser.add_argument("--node-bin", type=Path, default=ROOT / "target" / "release" / "netaccel-node")
    args = parser.parse_args()
    assert args.size % GRID == 0 and args.size >= 8
    if not args.node_bin.exists():
        subprocess.run(["cargo", "build", "--release", "-p", "netaccel-node"], cwd=ROOT, check=True)
    size = args.size
    with tempfile.TemporaryDirectory(prefix="netaccel-ensemble-bench-") as tmp:
        models = Path(tmp) / "models"
        repository(models, size)
        proc, addr = start_node(args.node_bin, models, Path(tmp) / "node.log")
        try:
            conn = Conn(addr)
            image = bytes((x * 7 + y * 13 + (x * y) % 31) % 256 for y in range(size) for x in range(size))
            shape = [size, size]

            def one() -> bytes:
                return conn.infer("sobel_grid", "IMAGE", "GRID", shape, "UINT8", image)

            def two() -> bytes:
                edges = conn.infer("sobel", "INPUT0", "OUTPUT0", shape, "UINT8", image)
                return conn.infer("edge_grid", "EDGES", "GRID", shape, "UINT8", edges)

            for _ in range(50):  # warm up both paths
                assert one() == two()
            results = {"one": [], "two": []}
            for _ in range(args.calls):
                for name, run in (("one", one), ("two", two)):
                    results[name].append(measure(conn, run))
                assert results["one"][-1][3] == results["two"][-1][3], "the two paths disagree"
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    report(results, args, size)


def report(results, args, size: int) -> None:
    def row(name: str):
        taken = sorted(r[0] for r in results[name])
        p50 = statistics.median(taken) * 1e6
        p90 = taken[int(0.9 * (len(taken) - 1))] * 1e6
        sent = statistics.median(r[1] for r in results[name])
        received = statistics.median(r[2] for r in results[name])
        return p50, p90, sent, received

    one, two = row("one"), row("two")
    print(f"sobel {size}x{size} -> edge_grid, OIP HTTP binary tensors, {args.calls} pipelines each, "
          f"alternating, one connection; node {args.node_bin}")
    print(f"{'pipeline':<28} {'p50 us':>9} {'p90 us':>9} {'bytes sent':>11} {'bytes received':>15}")
    for label, r in (("one ensemble call", one), ("two calls from the client", two)):
        print(f"{label:<28} {r[0]:>9.0f} {r[1]:>9.0f} {r[2]:>11.0f} {r[3]:>15.0f}")
    spread = {n: sorted({r[2] for r in results[n]}) for n in results}
    print(f"bytes received, distinct values: {spread}")
    print(f"{'two calls / ensemble':<28} {two[0] / one[0]:>8.2f}x {two[1] / one[1]:>8.2f}x "
          f"{two[2] / one[2]:>10.2f}x {two[3] / one[3]:>14.2f}x")


if __name__ == "__main__":
    main()
