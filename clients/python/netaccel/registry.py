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

>>> from netaccel import Client
>>> with Client.from_registry("http://127.0.0.1:7400", "shout") as f:   # doctest: +SKIP
...     f.call(b"hello")
b'HELLO'
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Dict, Optional

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
    id: str
    generation: int
    node: Optional[str]
    slot: Optional[int]
    http: Optional[str]
    rac: Optional[str]

    @classmethod
    def from_json(cls, doc: Dict[str, Any]) -> "Binding":
        return cls(
            id=str(doc["id"]),
            generation=int(doc["generation"]),
            node=doc.get("node"),
            slot=doc.get("slot"),
            http=doc.get("http"),
            rac=doc.get("rac"),
        )

    @property
    def bound(self) -> bool:
        return self.slot is not None and self.rac is not None


def is_stale_binding(error: BaseException) -> bool:
    """True for failures that mean the node no longer serves this binding."""
    if isinstance(error, RacError):
        return error.status in _STALE_STATUSES
    return isinstance(error, (ConnectionError, OSError))


class RegistryClient:
    """The registry's HTTP API (blocking, ``urllib``)."""

    def __init__(self, url: str, token: Optional[str] = None, timeout: float = 90.0):
        url = url.rstrip("/")
        self.url = url if "://" in url else f"http://{url}"
        self.token = token
        #: Socket timeout; must outlast the longest long poll.
        self.timeout = timeout

    def _request(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                text = resp.read(RESPONSE_BYTES_MAX)
        except urllib.error.HTTPError as e:
            raw = e.read(RESPONSE_BYTES_MAX)
            try:
                doc = json.loads(raw)
                code, message = doc.get("code", "UNKNOWN"), doc.get("error", "")
            except ValueError:
                code, message = "UNKNOWN", raw.decode("utf-8", "replace")
            raise RegistryError(e.code, code, message) from None
        except (urllib.error.URLError, OSError) as e:
            raise RegistryError(0, "UNREACHABLE", f"cannot reach the registry at {self.url}: {e}") from None
        return json.loads(text) if text else None

    def nodes(self) -> Any:
        return self._request("GET", "/v1/nodes")

    def function(self, name: str) -> Any:
        return self._request("GET", f"/v1/functions/{_q(name)}")

    def put_function(self, name: str, accelerator: str, instances: int = 0, **query: Any) -> Any:
        spec = {"accelerator": accelerator, "instances": instances}
        if query:
            spec["query"] = query
        return self._request("PUT", f"/v1/functions/{_q(name)}", spec)

    def delete_function(self, name: str) -> None:
        self._request("DELETE", f"/v1/functions/{_q(name)}")

    def create_instance(self, function: str, id: Optional[str] = None, node: Optional[str] = None) -> Binding:
        body = {k: v for k, v in (("id", id), ("node", node)) if v is not None}
        return Binding.from_json(self._request("POST", f"/v1/functions/{_q(function)}/instances", body))

    def instance(self, function: str, id: str, after: Optional[int] = None, wait: float = 0.0) -> Binding:
        """The binding; with ``after``, waits up to ``wait`` seconds for one whose
        generation is not ``after`` (the long poll)."""
        path = f"/v1/functions/{_q(function)}/instances/{_q(id)}"
        if after is not None:
            path += f"?after={after}&wait_ms={int(wait * 1000)}"
        return Binding.from_json(self._request("GET", path))

    def delete_instance(self, function: str, id: str) -> None:
        self._request("DELETE", f"/v1/functions/{_q(function)}/instances/{_q(id)}")


def _q(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


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
    ):
        from .client import Client  # the node client; client.py imports this module

        self._client_class = Client
        self.registry = registry
        self.function = function
        self.rebind_wait = rebind_wait
        self.timeout = timeout
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
            fresh = self._rebind(binding, first)
        return self._call_node(fresh, payload, kw)

    def _call_node(self, binding: Binding, payload: Any, kw: Dict[str, Any]) -> bytes:
        if self._node is None or self._node_addr != binding.rac:
            self._drop_node()
            self._node = self._client_class.from_addr(binding.rac, timeout=self.timeout)
            self._node_addr = binding.rac
        try:
            return self._node.call(self.accelerator, payload, **kw)
        except (ConnectionError, OSError):
            self._drop_node()  # a broken connection is never reused
            raise

    def _drop_node(self) -> None:
        if self._node is not None:
            self._node.close()
        self._node, self._node_addr = None, None

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
