"""Calls through a netaccel registry's binding.

The registry never carries calls. :class:`BoundClient` asks it once for an instance of
a function (``POST /v1/functions/F/instances``), then calls the node that instance is
bound to, directly, over RAC. A daemon thread keeps a long poll
(``GET …/instances/ID?after=G&wait_ms=T``) open, so a migration is seen as soon as the
registry makes it. When a call fails in a way that means "this binding is stale" — the
node cannot be reached or the connection breaks, or it answers ``UNKNOWN_ACCELERATOR``
or ``UNAVAILABLE`` — the client waits (at most ``rebind_wait`` seconds) for the
registry to rebind the instance and retries once there. Any other failure, and a second
one, is raised: a call returns what the function's accelerator computed, or raises.

A node can also vanish without closing its connections (a machine that loses power or
its link): a call waiting on it would wait for the socket timeout. So when the watcher
sees the instance moved to another node it shuts the old node's connection down, and
the call in flight there fails at once and is retried on the new binding.

The registry may run as several replicas sharing their state in etcd (one leads, the
others answer reads and send writers to the leader with ``503 NOT_LEADER`` and a
``Location``). Give them all (``"http://a:7400,http://b:7400"``): a request goes to the
replica that answered last, and on to the next one (or the leader a follower names) when
a replica cannot be reached or answers 503. While no replica takes a request but some
answer 503 (the leader was just killed and the election has not settled) it goes round
them again, for up to ``ELECTION_WAIT`` seconds, so a client outlives any replica,
the leader included.

>>> from netaccel import Client
>>> with Client.from_registry("http://127.0.0.1:7400", "shout") as f:   # doctest: +SKIP
...     f.call(b"hello")
b'HELLO'
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Dict, Optional

from . import registry_api as api
from .rac import RacError, Status

#: Longest long poll the watcher asks for: a closed client's thread ends within it.
WATCH_WAIT_MS = 5_000
#: Longest wait of one long poll while rebinding (the registry's default bound; it
#: refuses longer ones): a longer ``rebind_wait`` polls again.
REBIND_POLL_WAIT_MAX = 60.0
#: Pause after a failed poll, so an unreachable registry is not asked in a loop.
WATCH_RETRY_PAUSE = 0.5
#: Largest registry answer read (a ``GET /v1/nodes`` of a big cluster fits).
RESPONSE_BYTES_MAX = 64 << 20
#: Registry replicas a client may list (more are ignored).
REGISTRY_REPLICAS_MAX = 8
#: How long a request keeps going round the replicas while none takes it but some
#: answer 503: the registry's default election lease (5 s), twice over.
ELECTION_WAIT = 10.0
#: Pause between two such rounds.
ROUND_PAUSE = 0.1

_STALE_STATUSES = (Status.UNKNOWN_ACCELERATOR, Status.UNAVAILABLE)


class RegistryError(Exception):
    """The registry answered with an error (``status`` 0: it could not be reached)."""

    def __init__(self, status: int, code: str, message: str):
        self.status = status
        self.code = code
        super().__init__(f"registry answered {status} {code}: {message}" if status else message)


class NoBinding(Exception):
    """The registry gave the instance no usable binding within the wait."""


@dataclass(frozen=True)
class Binding:
    """An instance and where it is bound: the registry's binding document
    (``registry_api.SCHEMAS["binding"]``), every address ``None`` while unbound and
    for a front end the node lacks."""

    id: str
    generation: int
    node: Optional[str]
    slot: Optional[int]
    http: Optional[str]
    rac: Optional[str]
    #: The bound node's TLS listeners (``--https``, ``--rac-tls``) and gRPC ones, when
    #: it has them (older registries send none).
    https: Optional[str] = None
    rac_tls: Optional[str] = None
    grpc: Optional[str] = None
    grpc_tls: Optional[str] = None
    function: str = ""
    device: Optional[str] = None
    opencl: Optional[str] = None
    #: Bound where someone else decided (a DRA claim): the registry never moves it.
    pinned: bool = False

    @classmethod
    def from_json(cls, doc: Dict[str, Any]) -> "Binding":
        """Reads a binding document; :class:`registry_api.ShapeError` if it is not one."""
        return cls(**api.parse("binding", doc))

    def to_json(self) -> Dict[str, Any]:
        """The document as the registry writes it."""
        return api.dump("binding", dataclasses.asdict(self))

    @property
    def bound(self) -> bool:
        return self.slot is not None and self.rac is not None

    def rac_address(self, tls: bool) -> Optional[str]:
        """Where to call the bound node over RAC: its RAC-over-TLS listener when
        ``tls``, else its plain one."""
        return self.rac_tls if tls else self.rac


def is_stale_binding(error: BaseException) -> bool:
    """True for failures that mean the node no longer serves this binding."""
    if isinstance(error, RacError):
        return error.status in _STALE_STATUSES
    return isinstance(error, (ConnectionError, OSError))


class RegistryClient:
    """The registry's HTTP API (blocking, ``urllib``). ``url`` is one registry, or
    several replicas comma-separated (see the module's documentation)."""

    def __init__(
        self,
        url: str,
        token: Optional[str] = None,
        timeout: float = 90.0,
        election_wait: Optional[float] = None,
    ):
        bases = [_base(u) for u in url.split(",") if u.strip()][:REGISTRY_REPLICAS_MAX]
        #: The replicas, as given.
        self.urls = bases or [_base(url)]
        self._preferred = 0
        self.token = token
        #: Socket timeout; must outlast the longest long poll.
        self.timeout = timeout
        #: How long a request goes round the replicas while none takes it but some
        #: answer 503 (an election settling).
        self.election_wait = ELECTION_WAIT if election_wait is None else election_wait

    @property
    def url(self) -> str:
        """The replica requests go to first: the one that answered last."""
        return self.urls[self._preferred]

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        """One request, in rounds (the loop of the Rust crate ``registry-api``): each
        round asks the replica that answered last, then the others, and each leader a
        follower names in its 503's ``Location`` right after that follower, each at most
        once. A round that ends without an answer while some replica answered 503 (a
        leader just died, no election has settled) is followed by another after
        ``ROUND_PAUSE``, for up to ``election_wait`` seconds; a round in which nobody
        answered ends it at once."""
        data = None if body is None else json.dumps(body).encode()
        settled = time.monotonic() + self.election_wait
        unreachable: list = []
        refusal: Optional[RegistryError] = None
        while True:
            answered, text, round_refusal = self._round(method, path, data, unreachable)
            if answered:
                return json.loads(text) if text else None
            refusal = round_refusal or refusal
            if round_refusal is None or time.monotonic() + ROUND_PAUSE >= settled:
                break
            time.sleep(ROUND_PAUSE)
        if refusal is not None:
            raise refusal
        raise RegistryError(0, "UNREACHABLE", "; ".join(unreachable))

    def _round(self, method: str, path: str, data: Optional[bytes], unreachable: list):
        """One round: ``(True, text, None)`` with an answer, else ``(False, None, the
        last 503)``."""
        first = self._preferred
        order = [self.urls[(first + i) % len(self.urls)] for i in range(len(self.urls))]
        asked: list = []
        refusal = None
        while order:
            base = order.pop(0)
            if base in asked:
                continue
            asked.append(base)
            try:
                text = self._send(base, method, path, data)
            except _Unreachable as e:
                unreachable.append(str(e))
                continue
            except _Refused as e:
                if e.error.status != 503:
                    raise e.error from None
                # A follower (its leader is asked next) or a replica that cannot serve.
                if e.leader:
                    order.insert(0, e.leader)
                refusal = e.error
                continue
            if base in self.urls:
                self._preferred = self.urls.index(base)
            return True, text, None
        return False, None, refusal

    def _send(self, base: str, method: str, path: str, data: Optional[bytes]) -> bytes:
        req = urllib.request.Request(base + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with _OPENER.open(req, timeout=self.timeout) as resp:
                return resp.read(RESPONSE_BYTES_MAX)
        except urllib.error.HTTPError as e:
            raw = e.read(RESPONSE_BYTES_MAX)
            try:
                doc = json.loads(raw)
                code, message = doc.get("code", "UNKNOWN"), doc.get("error", "")
            except ValueError:
                code, message = "UNKNOWN", raw.decode("utf-8", "replace")
            leader = _origin(e.headers.get("Location", "")) if e.code == 503 else None
            raise _Refused(RegistryError(e.code, code, message), leader) from None
        except (urllib.error.URLError, OSError) as e:
            raise _Unreachable(f"cannot reach the registry at {base}: {e}") from None

    def nodes(self) -> Any:
        """``GET /v1/nodes``: a list of nodes (``registry_api.SCHEMAS["node"]``)."""
        return api.parse("nodes", self._request("GET", "/v1/nodes"))

    def function(self, name: str) -> Any:
        """A function and its instances' bindings (``registry_api.SCHEMAS["function"]``)."""
        return api.parse("function", self._request("GET", f"/v1/functions/{_q(name)}"))

    def put_function(self, name: str, accelerator: str, instances: int = 0, **query: Any) -> Any:
        spec = api.parse("function-spec", {"accelerator": accelerator, "instances": instances, "query": query})
        doc = self._request("PUT", f"/v1/functions/{_q(name)}", api.dump("function-spec", spec))
        return api.parse("function", doc)

    def delete_function(self, name: str) -> None:
        self._request("DELETE", f"/v1/functions/{_q(name)}")

    def create_instance(self, function: str, id: Optional[str] = None, node: Optional[str] = None) -> Binding:
        body = api.dump("instance-spec", api.parse("instance-spec", {"id": id, "node": node}))
        return Binding.from_json(self._request("POST", f"/v1/functions/{_q(function)}/instances", body))

    def instance(self, function: str, id: str, after: Optional[int] = None, wait: float = 0.0) -> Binding:
        """The binding; with ``after``, waits up to ``wait`` seconds for one whose
        generation is not ``after`` (the long poll)."""
        path = f"/v1/functions/{_q(function)}/instances/{_q(id)}"
        if after is not None:
            path += f"?after={after}&wait_ms={int(wait * 1000)}"
        return Binding.from_json(self._request("GET", path))

    def report_unreachable(self, function: str, id: str, generation: int) -> Binding:
        """``POST …/instances/{id}/unreachable``: this client could not reach the node of
        the instance's binding ``generation``. If that binding is still current the
        registry moves the instance to another node; it answers the binding then."""
        path = f"/v1/functions/{_q(function)}/instances/{_q(id)}/unreachable"
        report = api.dump("unreachable-report", {"generation": int(generation)})
        return Binding.from_json(self._request("POST", path, report))

    def delete_instance(self, function: str, id: str) -> None:
        self._request("DELETE", f"/v1/functions/{_q(function)}/instances/{_q(id)}")


def _q(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


def _base(url: str) -> str:
    url = url.strip().rstrip("/")
    return url if "://" in url else f"http://{url}"


def _origin(url: str) -> Optional[str]:
    """``scheme://authority`` of a URL (a follower's ``Location`` names the leader's URL
    and the path asked)."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A follower's 503 carries a ``Location``; urllib must not follow redirects of any
    kind on its own (a write must not be re-sent by a handler that drops its body)."""

    def redirect_request(self, *args: Any, **kw: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


class _Unreachable(Exception):
    pass


class _Refused(Exception):
    def __init__(self, error: RegistryError, leader: Optional[str]):
        super().__init__(str(error))
        self.error = error
        self.leader = leader


class BoundClient:
    """An instance of a function that calls its node and follows its binding. Made by
    :meth:`netaccel.Client.from_registry`; not thread-safe (one per thread)."""

    def __init__(
        self,
        registry: RegistryClient,
        function: str,
        *,
        instance: Optional[str] = None,
        rebind_wait: float = 10.0,
        watch: bool = True,
        timeout: Optional[float] = None,
        ssl: Optional[Any] = None,
        unreachable_after: Optional[float] = None,
    ):
        from .client import Client  # the node client; client.py imports this module

        self._client_class = Client
        #: With an ``ssl.SSLContext``, calls go to the bound node's RAC-over-TLS
        #: listener (the binding's ``rac_tls``), verified and authenticated with it.
        self._ssl = ssl
        self.registry = registry
        self.function = function
        self.rebind_wait = rebind_wait
        self.timeout = timeout
        #: Seconds a call may go without an answer before it is abandoned as if its
        #: node could not be reached: reported to the registry (which moves the
        #: instance to another node) and retried once on the new binding. For a node
        #: cut off from its clients while the registry still reaches it. Set it above
        #: the longest call the function makes (the call may run twice). ``None``:
        #: calls are not abandoned for time.
        self.unreachable_after = unreachable_after
        #: An instance this client created is deleted by ``close()``; a named one is kept.
        self._owned = instance is None
        self.accelerator = str(registry.function(function)["accelerator"])
        self._lock = threading.Lock()
        self._binding = registry.create_instance(function, instance)
        self._node: Optional[Any] = None
        self._node_addr: Optional[str] = None
        self._stop = threading.Event()
        if watch:
            threading.Thread(target=self._watch, name="netaccel-binding-watch", daemon=True).start()

    @property
    def binding(self) -> Binding:
        with self._lock:
            return self._binding

    def _set_binding(self, binding: Binding) -> None:
        with self._lock:
            self._binding = binding

    def __enter__(self) -> "BoundClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stops the watcher, closes the node connection, and releases the instance if
        this client created it."""
        self._stop.set()
        self._drop_node()
        if self._owned:
            try:
                self.registry.delete_instance(self.function, self.binding.id)
            except RegistryError:
                pass  # already gone, or the registry is away: it is not ours to wait for

    def call(self, payload: Any = b"", **kw: Any) -> bytes:
        """Calls the function's accelerator on the bound node (keyword arguments as for
        :meth:`netaccel.Client.call`); rebinds and retries once on a stale binding."""
        binding = self.binding
        if not binding.bound:
            binding = self._rebind(binding, None)
        try:
            return self._call_node(binding, payload, kw)
        except Exception as first:  # noqa: BLE001 - sorted just below
            if not is_stale_binding(first):
                raise
            if not isinstance(first, RacError):
                # Not an answer of the node's: it could not be reached.
                self._report_unreachable(binding)
            fresh = self._rebind(binding, first)
        return self._call_node(fresh, payload, kw)

    def _report_unreachable(self, binding: Binding) -> None:
        """Tells the registry this client cannot reach ``binding``'s node (unless the
        instance has moved already) and keeps the binding it answers. A failed report
        changes nothing: the rebind waits as it would have."""
        if not binding.bound or self.binding.generation != binding.generation:
            return
        try:
            fresh = self.registry.report_unreachable(self.function, binding.id, binding.generation)
        except (RegistryError, ValueError, KeyError):
            return
        with self._lock:
            if fresh.id == self._binding.id and fresh.generation > self._binding.generation:
                self._binding = fresh

    def _call_node(self, binding: Binding, payload: Any, kw: Dict[str, Any]) -> bytes:
        tls = self._ssl is not None
        addr = binding.rac_address(tls)
        if addr is None:
            raise NoBinding(
                f"instance {binding.id} is bound to node {binding.node}, which has no "
                "RAC-over-TLS listener (start it with --rac-tls), and this client was "
                "given an ssl context"
            )
        if self._node is None or self._node_addr != addr:
            self._drop_node()
            node = self._client_class.from_addr(addr, timeout=self.timeout, ssl=self._ssl)
            with self._lock:
                self._node, self._node_addr = node, addr
            if self.binding.rac_address(tls) != addr:
                # Moved while connecting: the watcher may have looked before the
                # connection was stored.
                node.abandon()
        node = self._node
        silent = threading.Event()
        timer = None
        if self.unreachable_after is not None:
            timer = threading.Timer(self.unreachable_after, lambda: (silent.set(), node.abandon()))
            timer.daemon = True
            timer.start()
        try:
            out = node.call(self.accelerator, payload, **kw)
            if timer is not None:
                timer.cancel()
                if silent.is_set():
                    self._drop_node()  # answered as the timer shut the connection down
            return out
        except (ConnectionError, OSError) as e:
            self._drop_node()  # a broken connection is never reused
            if silent.is_set():
                raise ConnectionError(
                    f"no answer from {addr} within {self.unreachable_after} s (unreachable_after)"
                ) from e
            raise
        finally:
            if timer is not None:
                timer.cancel()

    def _drop_node(self) -> None:
        with self._lock:
            node, self._node, self._node_addr = self._node, None, None
        if node is not None:
            node.close()

    def _rebind(self, stale: Binding, cause: Optional[BaseException]) -> Binding:
        deadline = time.monotonic() + self.rebind_wait
        seen = stale.generation
        while True:
            current = self.binding
            if current.generation != stale.generation and current.bound:
                return current
            seen = max(seen, current.generation)
            left = deadline - time.monotonic()
            if left <= 0:
                why = f"; the call failed with: {cause}" if cause else ""
                raise NoBinding(
                    f"instance {stale.id} has no usable binding: the registry did not move it off "
                    f"{stale.node} within {self.rebind_wait} s{why}"
                ) from cause
            try:
                polled = self.registry.instance(self.function, stale.id, after=seen, wait=min(left, REBIND_POLL_WAIT_MAX))
            except RegistryError as e:
                if e.status != 404:
                    raise
                polled = self.registry.create_instance(self.function, stale.id)
            # The registry's answer is the truth, even if older than what the watcher saw
            # (an instance created again starts a new generation).
            self._set_binding(polled)

    def _watch(self) -> None:
        while not self._stop.is_set():
            current = self.binding
            try:
                fresh = self.registry.instance(self.function, current.id, after=current.generation, wait=WATCH_WAIT_MS / 1000)
            except (RegistryError, ValueError, KeyError):
                self._stop.wait(WATCH_RETRY_PAUSE)
                continue
            with self._lock:
                if fresh.id == self._binding.id and fresh.generation > self._binding.generation:
                    self._binding = fresh
                    if self._node is not None and self._node_addr != fresh.rac_address(self._ssl is not None):
                        # A call in flight on the old node fails now and is retried on
                        # the new binding, rather than waiting on a node that vanished.
                        self._node.abandon()
