"""The shared black-box suite: every case of cases.json, run by every client's driver
(drivers/<language>.sh), against a real netaccel-node (and, where a case needs one, a
fake node that misbehaves or a fake registry; fakes.py). See README.md.

A driver that cannot be built here (its toolchain missing) is skipped, except under CI
(`CI=true`), where that fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest

from fakes import FakeNode, FakeRegistry

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CASES_FILE = HERE / "cases.json"
CASES: List[Dict] = json.loads(CASES_FILE.read_text())["cases"]
DRIVERS = sorted(p for p in (HERE / "drivers").glob("*.sh"))
#: One driver run at most: a debug node's slow matmul, on a loaded 2-core machine.
DRIVER_TIMEOUT_S = 60
#: Building one driver at most (a cold cargo or go build on 2 cores).
BUILD_TIMEOUT_S = 1800
START_TIMEOUT_S = 60
#: The tenant of `hello` cases, as the default node's configuration names it.
TENANT = ("team-a", "conformance-token-a")

NODE_CONFIGS = {
    # One slot per built-in; queue admission by depth only, so that a call behind a slow
    # one waits (deadline cases) instead of being refused BUSY.
    "default": f'queue_wait_factor = 0\n\n[[tenants]]\nname = "{TENANT[0]}"\ntoken = "{TENANT[1]}"\n',
    # Tiny bounds: payloads over 4096 bytes are TOO_LARGE; each call holds its slot
    # 200 ms and a slot's queue holds one call, so a third call in flight is BUSY.
    "tiny": "queue_wait_factor = 0\nqueue_depth_max = 1\ntenant_queue_depth_max = 1\n"
            "reassembly_buffer_bytes = 4096\nsimulated_exec_us = 200000\n",
}


def require(condition: bool, what: str) -> None:
    """Skips when a prerequisite is missing, except in CI, where that fails."""
    if condition:
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{what} (a prerequisite; CI does not skip)")
    pytest.skip(what)


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_binary() -> Path:
    given = os.environ.get("NETACCEL_NODE_BIN")
    if given:
        return Path(given)
    subprocess.run(["cargo", "build", "-q", "-p", "netaccel-node"], cwd=ROOT, check=True)
    meta = subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps"], cwd=ROOT,
                          check=True, capture_output=True, text=True)
    return Path(json.loads(meta.stdout)["target_directory"]) / "debug" / "netaccel-node"


@contextmanager
def running_node(binary: Path, tmp: Path, config: str, extra: Optional[List[str]] = None,
                 kill: bool = False) -> Iterator[Dict[str, str]]:
    """A node with `config` (and command-line arguments `extra`), its plain listeners on
    kernel-chosen ports; yields the addresses it logged (http, rac, rac_tls). `kill`:
    stopped with SIGKILL (no draining, no deregistration), as a node that dies."""
    (tmp / "node.toml").write_text(config)
    proc = subprocess.Popen(
        [str(binary), "--config", str(tmp / "node.toml"), "--http", "127.0.0.1:0",
         "--rac", "127.0.0.1:0", "--grpc", "off", "--log-level", "info", *(extra or [])],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log: deque = deque(maxlen=200)
    found: Dict[str, str] = {}
    ready = threading.Event()
    wanted = {"http", "rac"} | ({"rac_tls"} if "[tls]" in config else set())

    def read_log() -> None:
        for line in proc.stderr:
            log.append(line.rstrip())
            for key in ("http", "rac", "rac_tls"):
                m = re.search(rf"\b{key}=(\S+:\d+)", line)
                if m and key not in found:
                    found[key] = m.group(1)
            if wanted <= found.keys():
                ready.set()
        ready.set()

    threading.Thread(target=read_log, daemon=True).start()
    try:
        if not ready.wait(START_TIMEOUT_S) or proc.poll() is not None:
            raise RuntimeError(f"netaccel-node did not start (exit status {proc.poll()}):\n" + "\n".join(log))
        yield found
    finally:
        if kill:
            proc.kill()
        else:
            proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d: Path) -> None:
    """ca.pem; server.pem/key for localhost and 127.0.0.1; client alice.pem/key (CN
    alice, signed by ca); other-ca.pem, a CA that signed nothing the node shows."""
    for ca in ("ca", "other-ca"):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "2", "-subj", f"/CN=conformance {ca}", cwd=d)
    for name, cn, ext in [("server", "localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1"),
                          ("alice", "alice", "extendedKeyUsage=clientAuth")]:
        (d / f"{name}.ext").write_text(ext + "\n")
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=d)


ETCD = Path("/usr/bin/etcd")
#: The registry's node lease in the live cases: a killed node is lost 4 to 6.6 s after
#: its death (a node renews every third of a lease; the registry checks every tenth),
#: which leaves a driver (a JVM starting on a loaded machine) time to bind to it first.
LIVE_LEASE_MS = 6000
#: The function of the live cases; its accelerator is to_uppercase.
LIVE_FUNCTION = "conformance-live"


def http_json(method: str, url: str, body: Optional[Dict] = None, timeout: float = 5.0):
    """(status, parsed JSON or None) of one request; redirects are not followed."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    try:
        with urllib.request.build_opener(NoRedirect).open(req, timeout=timeout) as r:
            text = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        text, status = e.read(), e.code
    try:
        return status, json.loads(text) if text else None
    except ValueError:
        return status, text.decode(errors="replace")


def wait_until(what: str, ready, within_s: float = START_TIMEOUT_S):
    """Polls `ready()` until it returns something true; that value."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            got = ready()
        except OSError:
            got = None
        if got:
            return got
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {within_s} s")
        time.sleep(0.05)


class LiveCluster:
    """The registry cases against the real thing, shared by every driver: one etcd, two
    `netaccel-registry` replicas in HA mode on it, and a real node (`live-1`, one slot
    per built-in) registered with both. A migration case adds a node of its own that
    holds to_uppercase and nothing bound yet (so the registry prefers it), and kills it
    with SIGKILL just before the driver binds: the binding names a dead node until its
    lease runs out and the registry moves the instance to `live-1`."""

    def __init__(self, tmp_factory, node_bin: Path):
        require(ETCD.exists(), f"{ETCD} is missing: install Debian's etcd-server (test.sh does)")
        self.tmp_factory = tmp_factory
        self.node_bin = node_bin
        self.stack: List = []
        self.victims = 0
        self.before: Dict[str, Dict] = {}
        try:
            self.etcd = self.start_etcd()
            self.replicas = [self.start_registry(self.etcd) for _ in range(2)]
            self.urls = ",".join(self.replicas)
            self.add_node("live-1", NODE_CONFIGS["default"], kill=False)
            # A ballast instance on live-1: a migration case's new node, with none, is
            # then the registry's first choice.
            status, doc = http_json("PUT", f"{self.leader()}/v1/functions/{LIVE_FUNCTION}",
                                    {"accelerator": "to_uppercase", "instances": 1})
            assert status == 200, f"creating {LIVE_FUNCTION}: {status} {doc}"
        except BaseException:
            self.close()
            raise

    def spawn(self, args: List[str]) -> subprocess.Popen:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)

        def stop() -> None:
            proc.kill()
            proc.wait()

        self.stack.append(stop)
        return proc

    def start_etcd(self) -> str:
        data = self.tmp_factory.mktemp("etcd")
        client, peer = f"127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
        proc = self.spawn([str(ETCD), "--name", "conformance", "--data-dir", str(data / "data"),
                           "--listen-client-urls", f"http://{client}", "--advertise-client-urls",
                           f"http://{client}", "--listen-peer-urls", peer,
                           "--initial-advertise-peer-urls", peer, "--initial-cluster",
                           f"conformance={peer}", "--log-level", "error"])

        def healthy():
            assert proc.poll() is None, "etcd exited"
            return "true" in str(http_json("GET", f"http://{client}/health", timeout=1)[1])

        wait_until("etcd healthy", healthy)
        return client

    def start_registry(self, etcd: str) -> str:
        binary = Path(os.environ.get("NETACCEL_REGISTRY_BIN") or self.node_bin.with_name("netaccel-registry"))
        if not binary.exists():
            subprocess.run(["cargo", "build", "-q", "-p", "netaccel-registry"], cwd=ROOT, check=True)
        listen = f"127.0.0.1:{free_port()}"
        proc = self.spawn([str(binary), "--listen", listen, "--log-level", "warn", "--store",
                           f"etcd://{etcd}", "--election-ttl-s", "3", "--lease-ms", str(LIVE_LEASE_MS)])
        url = f"http://{listen}"

        def up():
            assert proc.poll() is None, "netaccel-registry exited"
            return http_json("GET", f"{url}/metrics", timeout=1)[0] == 200

        wait_until("netaccel-registry listening", up)
        return url

    def leads(self, url: str) -> bool:
        status, text = http_json("GET", f"{url}/metrics", timeout=2)
        return status == 200 and "\nnetaccel_registry_leader 1" in "\n" + str(text)

    def leader(self) -> str:
        return wait_until("a leading registry replica",
                          lambda: next((u for u in self.replicas if self.leads(u)), None))

    def follower_first(self) -> List[str]:
        leader = self.leader()
        return [u for u in self.replicas if u != leader] + [leader]

    def node_state(self, name: str) -> Optional[str]:
        status, nodes = http_json("GET", f"{self.leader()}/v1/nodes")
        assert status == 200, f"GET /v1/nodes: {status} {nodes}"
        return next((n["state"] for n in nodes if n["name"] == name), None)

    def add_node(self, name: str, config: str, kill: bool) -> None:
        """A real node registered as `name`; `kill`: started, seen ready, and killed."""
        cm = running_node(self.node_bin, self.tmp_factory.mktemp(name), config,
                          ["--registry", self.urls, "--name", name], kill=kill)
        cm.__enter__()
        try:
            wait_until(f"node {name} ready at the registry", lambda: self.node_state(name) == "ready")
        finally:
            if kill:
                cm.__exit__(None, None, None)
            else:
                self.stack.append(lambda: cm.__exit__(None, None, None))

    def generations(self) -> Dict[str, Dict]:
        status, doc = http_json("GET", f"{self.leader()}/v1/functions/{LIVE_FUNCTION}")
        assert status == 200, f"GET function: {status} {doc}"
        return {b["id"]: b for b in doc["instances"]}

    @contextmanager
    def flags(self, scenario: str, key: str) -> Iterator[List[str]]:
        """The replicas a driver is given for `scenario`; a migration is checked after
        it: the driver's instance was bound to the dead node and moved to live-1."""
        urls = self.follower_first()
        if scenario != "failover":
            urls.reverse()  # the leader first
        if scenario != "migration":
            yield [",".join(urls)]
            return
        self.victims += 1
        victim = f"victim-{self.victims}"
        reports = self.unreachable_reports()
        self.add_node(victim, '[[slots]]\naccelerator = "to_uppercase"\n', kill=True)
        # The driver deletes its instance when done: watch it while the driver runs.
        known, seen, stop = set(self.generations()), set(), threading.Event()

        def watch() -> None:
            while not stop.is_set():
                try:
                    for i, b in self.generations().items():
                        if i in known:
                            continue
                        seen.add((b.get("node"), b["generation"]))
                        if b.get("node") == victim:
                            # The move comes seconds later; the driver deletes the
                            # instance right after its call: a long poll sees the move.
                            status, moved = http_json(
                                "GET", f"{self.leader()}/v1/functions/{LIVE_FUNCTION}/instances/{i}"
                                f"?after={b['generation']}&wait_ms=20000", timeout=30)
                            if status == 200:
                                seen.add((moved.get("node"), moved["generation"]))
                except (OSError, AssertionError):
                    pass
                stop.wait(0.05)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            yield [",".join(urls)]
        finally:
            stop.set()
            watcher.join()
            self.before[key] = {"victim": victim, "seen": seen, "reports": reports}

    def unreachable_reports(self) -> int:
        """Clients' reports of unreachable nodes the replicas acted on, together."""
        total = 0
        for url in self.replicas:
            status, text = http_json("GET", f"{url}/metrics", timeout=2)
            for line in str(text).splitlines() if status == 200 else []:
                if line.startswith("netaccel_registry_unreachable_reports_total "):
                    total += int(float(line.split()[1]))
        return total

    def check_moved(self, key: str) -> None:
        """The driver's instance was first bound to the dead node, then moved to live-1
        at once because the client reported the node it could not reach (every client
        does: `POST …/instances/{id}/unreachable` with the binding's generation; the
        registry counts the reports it acted on), not when the node's lease ran out.
        The watcher may not have seen the first binding before the move."""
        before = self.before.pop(key)
        victim, seen = before["victim"], before["seen"]
        assert all(n in (victim, "live-1", None) for n, _ in seen), seen
        if self.unreachable_reports() > before["reports"]:
            return
        on_victim = [g for n, g in seen if n == victim]
        assert on_victim, (f"the driver's instance was never bound to {victim} (its lease of "
                           f"{LIVE_LEASE_MS} ms ran out before the driver bound?): {seen}")
        raise AssertionError(f"the client did not report {victim}, which it could not reach; "
                             f"the registry moved the instance when the lease ran out: {seen}")

    def close(self) -> None:
        for stop in reversed(self.stack):
            stop()
        self.stack.clear()


class Nodes:
    """The real nodes of the suite, started the first time a case needs one."""

    def __init__(self, tmp_factory):
        self.tmp_factory = tmp_factory
        self.binary: Optional[Path] = None
        self.started: Dict[str, Dict[str, str]] = {}
        self.stack: List = []
        self.pki: Optional[Path] = None
        self.cluster: Optional[LiveCluster] = None

    def get(self, kind: str) -> Dict[str, str]:
        if kind not in self.started:
            if self.binary is None:
                self.binary = node_binary()
            config = NODE_CONFIGS.get(kind)
            if kind == "tls":
                pki = self.tls_pki()
                config = (f'[tls]\nrac = "127.0.0.1:0"\ncert = "{pki / "server.pem"}"\nkey = "{pki / "server.key"}"\n'
                          f'client_ca = "{pki / "ca.pem"}"\nclient_certs = "optional"\n\n[tls.subjects]\nalice = "team-a"\n')
            cm = running_node(self.binary, self.tmp_factory.mktemp(kind), config)
            self.started[kind] = cm.__enter__()
            self.stack.append(cm)
        return self.started[kind]

    def tls_pki(self) -> Path:
        if self.pki is None:
            require(shutil.which("openssl") is not None, "the openssl command is not installed")
            self.pki = self.tmp_factory.mktemp("pki")
            make_pki(self.pki)
        return self.pki

    def live(self) -> LiveCluster:
        if self.cluster is None:
            if self.binary is None:
                self.binary = node_binary()
            self.cluster = LiveCluster(self.tmp_factory, self.binary)
        return self.cluster

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.close()
        for cm in reversed(self.stack):
            cm.__exit__(None, None, None)


@pytest.fixture(scope="session")
def nodes(tmp_path_factory):
    n = Nodes(tmp_path_factory)
    yield n
    n.close()


BUILT: Dict[Path, Optional[str]] = {}


def build_driver(driver: Path) -> None:
    """Runs `driver --build` once; a driver whose toolchain is missing exits 3."""
    if driver not in BUILT:
        p = subprocess.run([str(driver), "--build"], cwd=ROOT, capture_output=True, text=True,
                           timeout=BUILD_TIMEOUT_S)
        if p.returncode == 0:
            BUILT[driver] = None
        elif p.returncode == 3:
            BUILT[driver] = "skip: " + (p.stderr.strip() or p.stdout.strip())
        else:
            BUILT[driver] = f"build failed (exit {p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    why = BUILT[driver]
    if why is not None:
        if why.startswith("skip: "):
            require(False, f"{driver.name}: {why[6:]}")
        pytest.fail(f"{driver.name}: {why}")


@contextmanager
def connection_flags(case: Dict, nodes: Nodes) -> Iterator[List[str]]:
    """The driver's connection flags for `case`, with what they point at running."""
    kind = case["node"]
    flags: List[str] = []
    if "hello" in case:
        flags += ["--tenant", case["hello"]["tenant"], "--token", case["hello"]["token"]]
    if kind in NODE_CONFIGS:
        yield flags + ["--node", nodes.get(kind)["rac"]]
    elif kind == "tls":
        pki = nodes.tls_pki()
        flags += ["--node", nodes.get("tls")["rac_tls"]]
        flags += ["--tls-ca", str(pki / ("other-ca.pem" if case.get("untrusted_ca") else "ca.pem"))]
        if case.get("client_cert"):
            flags += ["--cert", str(pki / "alice.pem"), "--key", str(pki / "alice.key")]
        yield flags
    elif kind == "closed_port":
        yield flags + ["--node", f"127.0.0.1:{free_port()}"]
    elif kind.startswith("fake:"):
        fake = FakeNode(kind.split(":", 1)[1])
        try:
            yield flags + ["--node", fake.addr]
        finally:
            fake.close()
        return
    elif kind.startswith("live-registry:"):
        with nodes.live().flags(kind.split(":", 1)[1], case["name"]) as urls:
            yield flags + ["--registry", *urls]
    elif kind.startswith("registry:"):
        with fake_registries(kind.split(":", 1)[1], case["function"], nodes.get("default")["rac"]) as urls:
            yield flags + ["--registry", ",".join(urls)]
    else:
        raise AssertionError(f"case {case['name']}: unknown node kind {kind}")


@contextmanager
def fake_registries(scenario: str, function: str, live_rac: str) -> Iterator[List[str]]:
    """The registry URLs a driver is given for `scenario`."""
    started: List[FakeRegistry] = []
    try:
        if scenario == "bind":
            started.append(FakeRegistry(function, "to_uppercase", first_rac=live_rac))
            urls = [started[0].url]
        elif scenario == "failover":
            leader = FakeRegistry(function, "to_uppercase", first_rac=live_rac)
            follower = FakeRegistry(function, "to_uppercase", leader=leader.url)
            started += [leader, follower]
            urls = [follower.url]
        elif scenario == "migration":
            gone = f"127.0.0.1:{free_port()}"
            started.append(FakeRegistry(function, "to_uppercase", first_rac=gone, then_rac=live_rac))
            urls = [started[0].url]
        else:
            raise AssertionError(f"unknown registry scenario {scenario}")
        yield urls
    finally:
        for r in started:
            r.close()


def run_driver(driver: Path, case: Dict, flags: List[str]) -> Dict:
    args = [str(driver), "--cases", str(CASES_FILE), "--case", case["name"], *flags]
    try:
        p = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{driver.name} {case['name']}: no answer within {DRIVER_TIMEOUT_S} s (a hang)")
    lines = [line for line in p.stdout.splitlines() if line.strip()]
    assert p.returncode == 0 and lines, (
        f"{driver.name} {case['name']} exited {p.returncode}; stdout tail: {p.stdout[-2000:]!r}; "
        f"stderr tail: {p.stderr[-3000:]}")
    return json.loads(lines[-1])


def f32_close(want_hex: str, got_hex: str) -> bool:
    want, got = bytes.fromhex(want_hex), bytes.fromhex(got_hex)
    if len(want) != len(got):
        return False
    pairs = zip(struct.unpack(f"<{len(want) // 4}f", want), struct.unpack(f"<{len(got) // 4}f", got))
    return all(abs(w - g) <= 1e-5 * max(1.0, abs(w)) for w, g in pairs)


def check(case: Dict, got: Dict) -> None:
    """`got` (a driver's line) against the case's expectation."""
    want = case["expect"]
    summary = json.dumps(got)[:2000]
    assert got.get("ok") is want["ok"], f"expected ok={want['ok']}, got {summary}"
    outputs = got.get("outputs") or []
    for i, w in enumerate(want.get("outputs", [])):
        if w is None:
            continue
        assert i < len(outputs) and outputs[i] is not None, f"call {i} has no output: {summary}"
        same = f32_close(w, outputs[i]) if case.get("compare") == "f32" else outputs[i] == w
        assert same, f"call {i}: expected {w}, got {outputs[i]}"
    if "error" in want:
        error = got.get("error") or {}
        for key, w in want["error"].items():
            assert error.get(key) == w, f"error.{key}: expected {w!r}, got {summary}"
    if "first" in want:
        order = got.get("order") or []
        assert order and order[0] == want["first"], f"call {want['first']} should complete first: {summary}"


def driver_name(driver: Path) -> str:
    return driver.stem


@pytest.mark.parametrize("driver", DRIVERS, ids=driver_name)
@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case(driver: Path, case: Dict, nodes: Nodes) -> None:
    build_driver(driver)
    with connection_flags(case, nodes) as flags:
        started = time.monotonic()
        got = run_driver(driver, case, flags)
    check(case, got)
    assert time.monotonic() - started < DRIVER_TIMEOUT_S
    if case["node"] == "live-registry:migration":
        nodes.live().check_moved(case["name"])


def test_every_case_is_well_formed() -> None:
    """Each case names a node kind the harness knows and says what it is for."""
    names = [c["name"] for c in CASES]
    assert len(names) == len(set(names)), "case names must be unique"
    for c in CASES:
        assert c["what"] and c["calls"] and "ok" in c["expect"], c["name"]
        assert c["mode"] in ("sync", "pipelined"), c["name"]
        kind = c["node"]
        assert (kind in NODE_CONFIGS or kind in ("tls", "closed_port")
                or (kind.startswith("fake:") and kind[5:] in FakeNode.MODES)
                or kind in ("registry:bind", "registry:failover", "registry:migration")
                or kind in ("live-registry:bind", "live-registry:failover", "live-registry:migration")), c["name"]
        if kind.startswith("live-registry:"):
            assert c["function"] == LIVE_FUNCTION, c["name"]
