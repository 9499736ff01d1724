"""``Client.from_registry`` against a real ``netaccel-registry`` and two real
``netaccel-node`` processes on free ports. The binaries come from
``NETACCEL_REGISTRY_BIN`` / ``NETACCEL_NODE_BIN``, else from the cargo target directory
(``CARGO_TARGET_DIR`` or the repository's ``target/``); without them the tests are
skipped. The test registers the nodes and renews their leases as a node's registry
agent would, so a killed node is lost by the registry's own lease expiry."""

import http.server
import json
import os
import pathlib
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request

import pytest

from netaccel import Client, NoBinding, RacError, RegistryClient, RegistryError, Status
from netaccel.registry import is_stale_binding

REPO = pathlib.Path(__file__).resolve().parents[3]
TARGET = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / "debug"
REGISTRY_BIN = pathlib.Path(os.environ.get("NETACCEL_REGISTRY_BIN", TARGET / "netaccel-registry"))
NODE_BIN = pathlib.Path(os.environ.get("NETACCEL_NODE_BIN", TARGET / "netaccel-node"))
LEASE_MS = 1500

needs_binaries = pytest.mark.skipif(
    not (REGISTRY_BIN.exists() and NODE_BIN.exists()),
    reason="netaccel-registry and netaccel-node not built (set NETACCEL_REGISTRY_BIN, NETACCEL_NODE_BIN)",
)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, proc, what):
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert proc.poll() is None, f"{what} exited during start-up"
            assert time.monotonic() < deadline, f"{what} did not listen on {port}"
            time.sleep(0.01)


class Cluster:
    """A registry and nodes ``a`` and ``b`` (slots: to_uppercase, echo), leases renewed
    by a thread for the nodes in ``renewed``."""

    def __init__(self, tmp):
        self.procs = []
        self.nodes = {}
        for name in ("a", "b"):
            http, rac = free_port(), free_port()
            config = pathlib.Path(tmp) / f"{name}.toml"
            config.write_text(
                f'http = "127.0.0.1:{http}"\nrac = "127.0.0.1:{rac}"\nlog_level = "warn"\n'
                '[[slots]]\naccelerator = "to_uppercase"\n[[slots]]\naccelerator = "echo"\n'
            )
            proc = subprocess.Popen([str(NODE_BIN), "--config", str(config)], stdout=subprocess.DEVNULL)
            self.procs.append(proc)
            wait_for_port(http, proc, f"node {name}")
            wait_for_port(rac, proc, f"node {name}")
            self.nodes[name] = (proc, f"127.0.0.1:{http}", f"127.0.0.1:{rac}")
        port = free_port()
        proc = subprocess.Popen(
            [str(REGISTRY_BIN), "--listen", f"127.0.0.1:{port}", "--log-level", "warn", "--lease-ms", str(LEASE_MS)],
            stdout=subprocess.DEVNULL,
        )
        self.procs.append(proc)
        wait_for_port(port, proc, "netaccel-registry")
        self.url = f"http://127.0.0.1:{port}"
        self.registry = RegistryClient(self.url)
        self.renewed = set(self.nodes)
        #: Nodes whose lease is renewed with the registration they had when frozen
        #: (a stopped node cannot be asked for its slots).
        self.frozen = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        for name in self.renewed:
            self.renew(name)
        threading.Thread(target=self.renew_loop, daemon=True).start()

    def registration(self, name):
        """What the node's registry agent would send: its slots as they are now."""
        _, http, rac = self.nodes[name]
        with urllib.request.urlopen(f"http://{http}/v1/slots", timeout=10) as r:
            slots = json.load(r)
        return {
            "http": http,
            "rac": rac,
            "opencl": None,
            "devices": [
                {
                    "id": "cpu0",
                    "backend": "cpu",
                    "vendor": "netaccel",
                    "platform": "host",
                    "slots": [
                        {"id": s["id"], "accelerator": s["accelerator"], "hash": "", "busy_ratio": 0.0, "queue_depth": 0}
                        for s in slots
                    ],
                }
            ],
        }

    def renew(self, name):
        try:
            body = self.frozen.get(name) or self.registration(name)
            req = urllib.request.Request(
                f"{self.url}/v1/nodes/{name}", data=json.dumps(body).encode(), method="PUT"
            )
            urllib.request.urlopen(req, timeout=5).close()
        except OSError:
            pass  # the node was just killed, or the registry is being stopped

    def renew_loop(self):
        while not self.stop.wait(LEASE_MS / 6000):
            with self.lock:
                names = list(self.renewed)
            for name in names:
                self.renew(name)

    def kill(self, name):
        with self.lock:
            self.renewed.discard(name)
        proc = self.nodes[name][0]
        proc.kill()  # SIGKILL: no draining, no deregistration
        proc.wait()

    def close(self):
        self.stop.set()
        for proc in self.procs:
            proc.kill()
            proc.wait()


@pytest.fixture
def cluster():
    with tempfile.TemporaryDirectory() as tmp:
        c = Cluster(tmp)
        try:
            yield c
        finally:
            c.close()


def test_stale_binding_failures_are_told_apart():
    assert is_stale_binding(ConnectionRefusedError())
    assert is_stale_binding(ConnectionResetError())
    assert not is_stale_binding(ValueError("bad params"))


@needs_binaries
def test_a_function_is_called_through_its_binding_and_the_instance_released(cluster):
    cluster.registry.put_function("shout", "to_uppercase")
    with Client.from_registry(cluster.url, "shout", timeout=30) as f:
        assert f.accelerator == "to_uppercase"
        assert f.call(b"hello") == b"HELLO"
        instance = f.binding.id
        assert cluster.registry.function("shout")["instances"][0]["id"] == instance
    assert cluster.registry.function("shout")["instances"] == []


@needs_binaries
def test_killing_the_bound_node_rebinds_and_the_next_call_succeeds(cluster):
    cluster.registry.put_function("up", "to_uppercase")
    cluster.registry.create_instance("up", "py-1", node="a")
    with Client.from_registry(cluster.url, "up", instance="py-1", watch=False, timeout=30) as f:
        assert f.binding.node == "a"
        assert f.call(b"before") == b"BEFORE"
        killed = time.monotonic()
        cluster.kill("a")
        assert f.call(b"after the kill") == b"AFTER THE KILL"
        print(f"from SIGKILL to a successful call on the new binding: {time.monotonic() - killed:.3f} s")
        assert f.binding.node == "b"
        assert f.call(b"again") == b"AGAIN"

        # With both nodes gone the call fails, saying why.
        cluster.kill("b")
        f.rebind_wait = 3 * LEASE_MS / 1000
        with pytest.raises((NoBinding, ConnectionError, OSError)):
            f.call(b"nowhere")


@needs_binaries
def test_a_migration_is_seen_through_the_long_poll(cluster):
    cluster.registry.put_function("up", "to_uppercase")
    cluster.registry.create_instance("up", "watched", node="a")
    with Client.from_registry(cluster.url, "up", instance="watched", timeout=30) as f:
        before = f.binding
        assert before.node == "a"
        with cluster.lock:
            cluster.renewed.discard("a")
        drained = time.monotonic()
        urllib.request.urlopen(urllib.request.Request(f"{cluster.url}/v1/nodes/a", method="DELETE"), timeout=10)
        while f.binding.node != "b":
            assert time.monotonic() - drained < 5, f"the watcher never saw the migration: {f.binding}"
            time.sleep(0.002)
        assert f.binding.generation > before.generation
        cluster.kill("a")
        assert f.call(b"moved") == b"MOVED"


@needs_binaries
def test_an_error_that_is_not_about_the_binding_is_raised_at_once(cluster):
    cluster.registry.put_function("rank", "topk")
    with Client.from_registry(cluster.url, "rank", timeout=30) as f:
        generation = f.binding.generation
        with pytest.raises(RacError) as e:
            f.call(b"\x01\x00\x00\x00", k=0)
        assert e.value.status == Status.BAD_REQUEST
        assert f.binding.generation == generation


@needs_binaries
def test_a_node_that_answers_unknown_accelerator_is_left_for_the_new_binding(cluster):
    cluster.registry.put_function("up", "to_uppercase")
    cluster.registry.create_instance("up", "moved", node="a")
    with Client.from_registry(cluster.url, "up", instance="moved", watch=False, timeout=30) as f:
        assert f.call(b"before") == b"BEFORE"
        # Slot 0 of node a is reconfigured behind the registry's back: a answers
        # UNKNOWN_ACCELERATOR until the registry, seeing the change in a's next lease
        # renewal, migrates the instance.
        _, http, rac = cluster.nodes["a"]
        req = urllib.request.Request(
            f"http://{http}/v1/slots/0", data=json.dumps({"accelerator": "echo"}).encode(), method="PUT"
        )
        urllib.request.urlopen(req, timeout=10).close()
        with Client.from_addr(rac, timeout=10) as node_a:
            with pytest.raises(RacError) as e:
                node_a.call("to_uppercase", b"x")
            assert e.value.status == Status.UNKNOWN_ACCELERATOR
        assert f.call(b"after") == b"AFTER"
        assert f.binding.node == "b"


def _wait_stopped(pid, within=10.0):
    """Waits until every thread of process `pid` is stopped (state T in /proc)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        states = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:
                pass
        if states and all(s in ("T", "t") for s in states):
            return
        time.sleep(0.005)
    raise AssertionError(f"process {pid} did not stop within {within} s")


@needs_binaries
def test_a_call_in_flight_on_a_node_that_vanished_is_retried_on_the_new_binding(cluster):
    # SIGSTOP: node a keeps its connections open but never answers, as a machine that
    # lost power or its link would. Without the watcher abandoning it, the call would
    # wait for its socket timeout (60 s here).
    cluster.registry.put_function("up", "to_uppercase")
    cluster.registry.create_instance("up", "frozen", node="a")
    with Client.from_registry(cluster.url, "up", instance="frozen", timeout=60) as f:
        assert f.call(b"before") == b"BEFORE"
        with cluster.lock:
            cluster.renewed.discard("a")
        proc = cluster.nodes["a"][0]
        proc.send_signal(signal.SIGSTOP)
        try:
            # The signal is delivered asynchronously: a call sent at once was once
            # answered by node a before it stopped. Wait until every thread is stopped.
            _wait_stopped(proc.pid)
            stopped = time.monotonic()
            assert f.call(b"in flight") == b"IN FLIGHT"
            took = time.monotonic() - stopped
            print(f"from SIGSTOP to the call answered on the new binding: {took:.3f} s")
            assert f.binding.node == "b"
            # Lost after one lease (1.5 s) and a sweep; far from the 60 s socket timeout.
            assert took < 20, f"the call waited {took:.1f} s on the vanished node"
        finally:
            proc.send_signal(signal.SIGCONT)


@needs_binaries
def test_a_node_cut_off_from_its_client_is_reported_and_the_call_moved(cluster):
    # Node a stops answering its client (SIGSTOP) while its lease is still renewed: to
    # the registry it stays ready, so only the client's report moves the instance. A
    # node it cannot connect to at all (SIGKILL, lease still renewed) likewise.
    cluster.registry.put_function("up", "to_uppercase")
    cluster.registry.create_instance("up", "cut", node="a")
    with Client.from_registry(cluster.url, "up", instance="cut", timeout=60, unreachable_after=0.5) as f:
        assert f.call(b"before") == b"BEFORE"
        cluster.frozen["a"] = cluster.registration("a")
        proc = cluster.nodes["a"][0]
        proc.send_signal(signal.SIGSTOP)
        try:
            _wait_stopped(proc.pid)
            stopped = time.monotonic()
            assert f.call(b"cut off") == b"CUT OFF"
            took = time.monotonic() - stopped
            assert f.binding.node == "b"
            # The lease would have kept it on a for good, the socket for 60 s.
            assert took < 5, f"the call waited {took:.1f} s on the silent node"
        finally:
            proc.send_signal(signal.SIGCONT)
    assert _unreachable_reports(cluster) == 1

    # Another instance on a (renewed all along), which is then killed: refused. The
    # registry avoids a node reported unreachable for a lease.
    time.sleep(LEASE_MS / 1000)
    cluster.registry.create_instance("up", "refused", node="a")
    with Client.from_registry(cluster.url, "up", instance="refused", timeout=60) as f:
        assert f.call(b"on a") == b"ON A"
        assert f.binding.node == "a"
        cluster.nodes["a"][0].kill()
        cluster.nodes["a"][0].wait()
        killed = time.monotonic()
        assert f.call(b"refused") == b"REFUSED"
        assert f.binding.node == "b"
        assert time.monotonic() - killed < 5
    assert _unreachable_reports(cluster) == 2


def _unreachable_reports(cluster):
    with urllib.request.urlopen(f"{cluster.url}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("netaccel_registry_unreachable_reports_total "):
                return int(float(line.split()[1]))
    return 0


class _Follower(http.server.BaseHTTPRequestHandler):
    """A registry follower: every request answered 503 NOT_LEADER, naming the leader."""

    leader = ""

    def _refuse(self):
        body = json.dumps({"code": "NOT_LEADER", "error": "this replica does not lead"}).encode()
        self.send_response(503)
        self.send_header("Location", self.leader + self.path)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = do_POST = do_DELETE = _refuse

    def log_message(self, *args):
        pass


@needs_binaries
def test_several_replicas_are_tried_in_turn_and_a_followers_leader_is_followed(cluster):
    # An unreachable replica, then a follower that names the leader (not in the list).
    dead = f"http://127.0.0.1:{free_port()}"
    handler = type("Follower", (_Follower,), {"leader": cluster.url})
    follower = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=follower.serve_forever, daemon=True).start()
    try:
        follower_url = f"http://127.0.0.1:{follower.server_address[1]}"
        registry = RegistryClient(f"{dead},{follower_url}")
        registry.put_function("up", "to_uppercase")
        assert registry.function("up")["accelerator"] == "to_uppercase"
        with Client.from_registry(f"{dead}, {follower_url}", "up", timeout=30) as f:
            assert f.call(b"through the leader") == b"THROUGH THE LEADER"
        # Only unreachable replicas: the error names them.
        with pytest.raises(RegistryError) as e:
            RegistryClient(dead).nodes()
        assert e.value.status == 0 and dead in str(e.value)
    finally:
        follower.shutdown()
        follower.server_close()


class _Survivor(http.server.BaseHTTPRequestHandler):
    """A replica left after the leader was killed: it names the dead leader until
    ``elected_at``, then one of the survivors leads and takes writes."""

    dead = ""
    elected_at = 0.0
    leads = False

    def do_PUT(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.leads and time.monotonic() >= self.elected_at:
            binding = json.loads((FIXTURES / "binding.json").read_text())
            doc = {"name": "f", "accelerator": "echo", "hash": None,
                   "query": {"backend": None, "vendor": None, "node": None},
                   "instances": [binding]}
            status, headers = 200, {}
        else:
            doc = {"code": "NOT_LEADER", "error": f"write to {self.dead}"}
            status, headers = 503, {"Location": self.dead + self.path}
        body = json.dumps(doc).encode()
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "spec" / "registry"


def test_a_write_waits_for_the_election_after_the_leader_is_killed():
    # Issue 29, item 1: the leader (listed first) refuses connections and both
    # survivors name it for 0.6 s; before, the write failed at once with
    # "503 NOT_LEADER … write to <the dead leader>".
    dead = f"http://127.0.0.1:{free_port()}"
    elected_at = time.monotonic() + 0.6
    servers = []
    for leads in (False, True):
        handler = type("S", (_Survivor,), {"dead": dead, "elected_at": elected_at, "leads": leads})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    try:
        urls = [f"http://127.0.0.1:{s.server_address[1]}" for s in servers]
        registry = RegistryClient(",".join([dead] + urls))
        started = time.monotonic()
        f = registry.put_function("f", "echo")
        assert f["instances"][0]["id"] == "edges-1"
        assert time.monotonic() >= elected_at
        assert time.monotonic() - started < 5.0
        assert registry.url == urls[1], "the new leader is asked first from now on"
        # Bounded: a registry whose survivors never elect anyone gives up.
        stuck = RegistryClient(",".join([dead, urls[0]]), election_wait=0.3)
        started = time.monotonic()
        with pytest.raises(RegistryError) as e:
            stuck.put_function("f", "echo")
        assert e.value.code == "NOT_LEADER" and 0.2 <= time.monotonic() - started < 3.0
    finally:
        for s in servers:
            s.shutdown()
            s.server_close()
