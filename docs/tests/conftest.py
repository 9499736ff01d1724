"""Shared fixtures of the documentation tests: a real netaccel node, built from this
checkout and started on ports the kernel picks, so the tests never collide with
another program's ports.

The documentation tests check that what docs/ tells a reader is true of the node:
the recipes in docs/accelerators.md print what the page says, and the monitoring
files (deploy/monitoring/) and the metrics reference (docs/monitoring.md) name only
metrics that the node exports.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
import urllib.request
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Deque, Optional

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: How long the node may take to start (a debug build on a loaded 2-core machine).
START_TIMEOUT_S = 60


@dataclass
class Node:
    http: str  # host:port
    rac: str  # host:port
    opencl: Optional[str]  # host:port, or None when the host has no OpenCL runtime
    bin_dir: Path  # where netaccel-node and netaccel were built
    log: Deque[str]
    grpc: Optional[str] = None  # host:port of the gRPC front end

    @property
    def url(self) -> str:
        return f"http://{self.http}"

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(self.url + path, timeout=10) as response:
            return response.read()

    def get_json(self, path: str):
        return json.loads(self.get(path))


def target_dir() -> Path:
    meta = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(json.loads(meta.stdout)["target_directory"])


def build(*packages: str) -> Path:
    """Builds the packages (debug) and returns the directory of their binaries."""
    args = ["cargo", "build", "-q"]
    for p in packages:
        args += ["-p", p]
    subprocess.run(args, cwd=ROOT, check=True)
    return target_dir() / "debug"


@contextmanager
def running_node(tmp_dir: Path, config: str = ""):
    """Starts a node with `config` (TOML) and HTTP, RAC and gRPC on loopback ports
    chosen by the kernel (port 0), with remote OpenCL when the host has an OpenCL
    runtime."""
    bin_dir = build("netaccel-node", "netaccel-client")
    config_file = tmp_dir / "node.toml"
    config_file.write_text(config)
    proc = subprocess.Popen(
        [
            str(bin_dir / "netaccel-node"),
            "--config", str(config_file),
            "--http", "127.0.0.1:0",
            "--rac", "127.0.0.1:0",
            "--opencl", "127.0.0.1:0",
            "--grpc", "127.0.0.1:0",
            "--log-level", "info",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    log: Deque[str] = deque(maxlen=200)
    found = {}
    ready = threading.Event()

    def read_log() -> None:
        # The node logs where it listens once its listeners are bound; keep reading
        # afterwards so that a full pipe never blocks it.
        for line in proc.stderr:
            log.append(line.rstrip())
            for key in ("http", "rac", "opencl", "grpc"):
                m = re.search(rf"\b{key}=(\S+:\d+)", line)
                if m and key not in found:
                    found[key] = m.group(1)
            if "http" in found and "rac" in found:
                ready.set()
        ready.set()

    threading.Thread(target=read_log, daemon=True).start()
    try:
        if not ready.wait(START_TIMEOUT_S) or proc.poll() is not None or "http" not in found:
            raise RuntimeError(
                f"netaccel-node did not start within {START_TIMEOUT_S} s "
                f"(exit status {proc.poll()}); its log:\n" + "\n".join(log)
            )
        n = Node(found["http"], found["rac"], found.get("opencl"), bin_dir, log, found.get("grpc"))
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                n.get("/health")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield n
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def node(tmp_path_factory):
    """A node with its defaults: one slot per built-in accelerator, no tokens."""
    with running_node(tmp_path_factory.mktemp("node")) as n:
        yield n


#: The tokens of `secured_node`, as docs/security.md names them.
ADMIN_TOKEN = "change-me-admin"
TENANT = ("team-a", "change-me-team-a")


@pytest.fixture(scope="session")
def secured_node(tmp_path_factory):
    """A node with an admin token and one RAC tenant, as docs/security.md sets up."""
    config = f'admin_token = "{ADMIN_TOKEN}"\n\n[[tenants]]\nname = "{TENANT[0]}"\ntoken = "{TENANT[1]}"\n'
    with running_node(tmp_path_factory.mktemp("secured-node"), config) as n:
        yield n


@pytest.fixture(scope="session")
def quota_node(tmp_path_factory):
    """A node with the quotas docs/quotas.md configures (its `config: node toml` block)."""
    from docblocks import tagged_blocks

    page = ROOT / "docs" / "quotas.md"
    (config,) = [b.text for b in tagged_blocks(page) if b.kind == "config"]
    with running_node(tmp_path_factory.mktemp("quota-node"), config) as n:
        yield n


#: The production profile of docs/security.md, word for word: anonymous callers
#: refused, tokens stored hashed (`netaccel-node hash-token` made these from
#: change-me-team-a, change-me-team-b and change-me-ops), a policy per tenant.
PRODUCTION_CONFIG = """anonymous = "refuse"

[[tenants]]
name = "team-a"
token_hash = "$argon2id$v=19$m=19456,t=2,p=1$5LlB4yVjvbZGdxQ78TTArA$E/qDJ8ursG5rp13o43OdqlYONxyBDb+RBr5IVj9h4uU"
call = ["to_uppercase", "echo"]

[[tenants]]
name = "team-b"
token_hash = "$argon2id$v=19$m=19456,t=2,p=1$8YbiBBNgleFj5EKaTkuiFQ$3Zf+1zQGBGUG+xHoT8aYljFKro1v3QpdjKB5tTQZwss"
call = ["sobel", "topk"]

[[tenants]]
name = "ops"
token_hash = "$argon2id$v=19$m=19456,t=2,p=1$fS78/FG5ntWgefuRKogICQ$gdIwC7QfFD9vvwW/46dRSK39x3igci7kVhc1Byi/TvY"
roles = ["operator"]
"""


@pytest.fixture(scope="session")
def production_node(tmp_path_factory):
    """A node under docs/security.md's production profile."""
    with running_node(tmp_path_factory.mktemp("production-node"), PRODUCTION_CONFIG) as n:
        yield n


@pytest.fixture(scope="session")
def secured_registry(tmp_path_factory):
    """docs/security.md's registry: its `config: registry toml` credentials, anonymous
    callers refused, and a node registered as `node-1` with its node token. Yields the
    node, with the registry's URL as its `registry` attribute."""
    import socket

    from docblocks import tagged_blocks

    page = ROOT / "docs" / "security.md"
    (credentials,) = [b.text for b in tagged_blocks(page) if b.kind == "config" and b.name == "registry toml"]
    tmp = tmp_path_factory.mktemp("secured-registry")
    (tmp / "credentials.toml").write_text(credentials)
    bin_dir = build("netaccel-registry", "netaccel-node", "netaccel-client")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    registry = subprocess.Popen(
        [str(bin_dir / "netaccel-registry"), "--listen", f"127.0.0.1:{port}",
         "--credentials", str(tmp / "credentials.toml")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        config = f'registry = "{url}"\nname = "node-1"\nregistry_token = "change-me-node-1"\n'
        with running_node(tmp, config) as n:
            deadline = time.monotonic() + START_TIMEOUT_S
            while True:
                request = urllib.request.Request(
                    url + "/v1/nodes", headers={"Authorization": "Bearer change-me-registry-ops"}
                )
                try:
                    with urllib.request.urlopen(request, timeout=5) as response:
                        if json.loads(response.read()):
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("the node never registered with the registry")
                time.sleep(0.1)
            n.registry = url
            yield n
    finally:
        registry.terminate()
        registry.wait(timeout=30)


def require(condition: bool, what: str) -> None:
    """Skips when a prerequisite is missing, except in CI (`CI=true`), where a missing
    prerequisite fails the test instead of hiding it."""
    if condition:
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{what} (a prerequisite; CI does not skip)")
    pytest.skip(what)
