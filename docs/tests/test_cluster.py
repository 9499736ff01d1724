"""docs/cluster.md, run as a reader runs it: etcd, Prometheus, two registry replicas,
two nodes, functions created and called from the CLI and from Python, and the page's
screenshot, all on ports the kernel reports free.

The page's `<!-- cluster: NAME -->` blocks run in page order in one bash shell (the
page says to use one: later blocks use the variables and the `leader` function of
earlier ones). The `settings` block is the one thing replaced: the test sets the same
variables to free ports, a temporary directory, two replicas and two nodes. `build` is
replaced by the debug binaries this test builds, `registry-3` and `node-c` are left
out (two of each show the same), and everything the shell started in the background
is stopped at the end (its process group). The `cli` and `python` blocks must print exactly
the ```text block that follows each on the page.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ROOT, build
from docblocks import tagged_blocks

PAGE = ROOT / "docs" / "cluster.md"
#: Blocks of the page this test runs, in page order; every one must exist.
RUN = ["etcd", "prometheus", "registry-1", "registry-2", "leader", "node-a", "node-b", "nodes", "cli", "python", "screenshot"]
#: Blocks it does not run, and why: replaced by the test's own, or a third of a kind.
NOT_RUN = {"build", "settings", "registry-3", "node-c"}
#: Blocks whose output the page shows and that must print exactly that. (The page's
#: `nodes` table has node-c and the page's ports; the test checks its rows instead.)
EXACT = ["cli", "python"]
#: Bound on the whole recipe: debug binaries starting on a loaded 2-core machine.
TIMEOUT_S = 240
MARK = "::netaccel-docs-block::"


def free_ports(n: int):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def documented_outputs():
    """NAME → the ```text block that follows the block NAME on the page, if any."""
    text = PAGE.read_text(encoding="utf-8").splitlines()
    outputs = {}
    for block in tagged_blocks(PAGE):
        # Skip to the end of the tagged block, then look for the next fence.
        i = block.line  # 1-based line of the tag = 0-based line of what follows it
        while not text[i].startswith("```"):
            i += 1
        i += 1
        while not text[i].startswith("```"):
            i += 1
        i += 1
        while i < len(text) and not text[i].strip():
            i += 1
        if i < len(text) and text[i].strip() == "```text":
            j = i + 1
            while text[j].strip() != "```":
                j += 1
            outputs[block.name] = "".join(line + "\n" for line in text[i + 1 : j])
    return outputs


def missing_tools():
    return [t for t in ("etcd", "prometheus", "chromium", "curl") if shutil.which(t) is None]


def test_the_cluster_page_works_as_written(tmp_path: Path):
    missing = missing_tools()
    if missing:
        message = f"{', '.join(missing)} not installed (Debian: etcd-server, prometheus, chromium, curl)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    blocks = {b.name: b for b in tagged_blocks(PAGE) if b.kind == "cluster"}
    assert set(blocks) == set(RUN) | NOT_RUN, f"cluster.md's blocks changed: {sorted(blocks)}"
    order = [b.name for b in tagged_blocks(PAGE) if b.kind == "cluster" and b.name in RUN]
    assert order == RUN, f"the page's order is {order}"
    outputs = documented_outputs()

    bin_dir = build("netaccel-node", "netaccel-registry", "netaccel-client")
    (etcd, etcd_peer, prom, reg1, reg2, a_http, a_rac, a_grpc, b_http, b_rac, b_grpc) = free_ports(11)
    cluster_dir = tmp_path / "cluster"
    settings = f"""
export CLUSTER_DIR={cluster_dir} && mkdir -p "$CLUSTER_DIR"
export ETCD_PORT={etcd} ETCD_PEER_PORT={etcd_peer} PROMETHEUS_PORT={prom}
export REGISTRY_1_PORT={reg1} REGISTRY_2_PORT={reg2}
export REGISTRY_URLS=http://127.0.0.1:{reg1},http://127.0.0.1:{reg2}
export NODE_A_HTTP={a_http} NODE_A_RAC={a_rac} NODE_A_GRPC={a_grpc}
export NODE_B_HTTP={b_http} NODE_B_RAC={b_rac} NODE_B_GRPC={b_grpc}
export NODE_C_HTTP=1 NODE_C_RAC=1 NODE_C_GRPC=1
export NODES="node-a node-b"
export PATH="{bin_dir}:$PATH" PYTHONPATH="{ROOT / 'clients' / 'python'}"
"""
    script = settings + "".join(f"echo '{MARK}{name}'\n{blocks[name].text}" for name in RUN)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NETACCEL_")}
    proc = subprocess.Popen(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"the recipe did not finish within {TIMEOUT_S} s; it printed:\n{out.decode()}\n{err.decode()[-3000:]}\n{logs(cluster_dir)}")
    finally:
        stop_group(proc.pid)
    stdout = out.decode()
    printed = {}
    for part in stdout.split(MARK)[1:]:
        name, _, text = part.partition("\n")
        printed[name] = text
    assert proc.returncode == 0, (
        f"the recipe failed (exit status {proc.returncode}) in block "
        f"`{list(printed)[-1] if printed else '?'}`:\n{stdout}\n{err.decode()[-3000:]}\n{logs(cluster_dir)}"
    )
    for name in EXACT:
        want = outputs[name]
        assert printed[name] == want, (
            f"cluster.md block `{name}` printed\n{printed[name]}\nand the page says\n{want}"
        )
    for node in ("node-a", "node-b"):
        assert any(line.startswith(node) and " ready " in line for line in printed["nodes"].splitlines()), printed["nodes"]
    # Each node serves gRPC on its own address, none falls back to running without it.
    for node, port in (("node-a", a_grpc), ("node-b", b_grpc)):
        log = (cluster_dir / f"{node}.log").read_text(errors="replace")
        assert f"grpc=127.0.0.1:{port}" in log, f"{node} does not serve gRPC on its port:\n{log}"
        assert "gRPC address is taken" not in log, log
    png = cluster_dir / "registry-page.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000, "no screenshot"


def test_nodes_on_one_host_each_get_their_own_listeners():
    """Several nodes on one host cannot share a port: the page gives each node its own
    HTTP, RAC and gRPC address (gRPC is on by default at 127.0.0.1:8001, which only the
    first node would get). Runs without etcd or Prometheus."""
    blocks = {b.name: b.text for b in tagged_blocks(PAGE) if b.kind == "cluster"}
    ports = {}
    for line in blocks["settings"].splitlines():
        for name, value in re.findall(r"\b(NODE_[A-Z]_[A-Z]+)=(\d+)", line):
            ports[name] = value
    nodes = sorted(name for name in blocks if re.fullmatch(r"node-[a-z]", name))
    assert len(nodes) >= 2, nodes
    for node in nodes:
        letter = node[-1].upper()
        for listener in ("HTTP", "RAC", "GRPC"):
            flag = f"--{listener.lower()} 127.0.0.1:$NODE_{letter}_{listener}"
            assert flag in blocks[node], f"block {node} does not pass `{flag}`:\n{blocks[node]}"
            assert f"NODE_{letter}_{listener}" in ports, f"settings has no NODE_{letter}_{listener}"
    values = list(ports.values())
    assert len(values) == len(set(values)), f"two listeners share a port: {ports}"


def stop_group(pgid: int) -> None:
    """Stops what the recipe started in the background (its own process group):
    SIGTERM, then SIGKILL for what is left after a few seconds."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def logs(cluster_dir: Path) -> str:
    parts = []
    for log in sorted(cluster_dir.glob("*.log")):
        tail = log.read_text(errors="replace").splitlines()[-15:]
        parts.append(f"--- {log.name}\n" + "\n".join(tail))
    return "\n".join(parts)
