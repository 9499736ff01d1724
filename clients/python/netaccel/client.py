"""Blocking RAC client over one TCP connection, with pipelining.

``submit()`` sends a call and returns its request id without waiting; ``result(id)``
reads results (which arrive in completion order) until that one is there, keeping the
others for later. ``call()`` is submit-then-result; ``call_many()`` keeps a bounded
window of calls in flight. A ``Client`` is not thread-safe: use one per thread, or
:class:`netaccel.aio.AsyncClient`.
"""

from __future__ import annotations

import socket
import ssl as _ssl
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Set, Tuple, Union

from . import rac
from .rac import (
    BUILTIN_IDS,
    BUILTIN_PARAMS,
    CONTROL_ACCEL_ID,
    DEFAULT_PORT,
    HEADER_LEN,
    CallHeader,
    Kind,
    Partial,
    Result,
    ResultHeader,
)

if TYPE_CHECKING:
    from .registry import BoundClient

Accelerator = Union[str, int]
#: Default bound on calls in flight (``AsyncClient``'s ``max_in_flight``,
#: ``call_many``'s ``window``): the node's own bound per connection
#: (``rac_in_flight_max``), as in every netaccel client. Past it the node stops reading,
#: so more calls out would only wait in the socket and add no throughput.
IN_FLIGHT_MAX_DEFAULT = 32

#: Default bound on the payload of a result the client accepts (1 GiB).
DEFAULT_MAX_PAYLOAD_LEN = 1 << 30
#: Small payloads are sent in the same write as their header.
_COALESCE_LEN = 64 * 1024


def parse_addr(addr: str, default_port: int = DEFAULT_PORT) -> Tuple[str, int]:
    """``"host:port"``, ``"host"`` or ``"[v6]:port"`` to ``(host, port)``."""
    if addr.startswith("["):
        host, _, rest = addr[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") else default_port
    host, sep, port = addr.rpartition(":")
    if not sep:
        return addr, default_port
    return host, int(port)


def as_bytes_view(payload: Any) -> memoryview:
    """Any bytes-like object (bytes, bytearray, memoryview, a C-contiguous numpy array)
    as a flat byte view, without copying."""
    view = memoryview(payload)
    if not view.c_contiguous:
        raise ValueError("payload must be C-contiguous (numpy: np.ascontiguousarray)")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


class _Calls:
    """What both clients share: request ids, accelerator names, call encoding."""

    def __init__(self) -> None:
        self._next_id = 1
        self._names: Dict[str, int] = dict(BUILTIN_IDS)

    def _new_request_id(self, taken: Callable[[int], bool]) -> int:
        """The next id, skipping ids still in use (in flight, or a result not yet
        collected). Ids wrap at 2**32; 0 is skipped (the node answers unreadable calls
        with id 0)."""
        while True:
            rid = self._next_id
            self._next_id = (self._next_id + 1) & 0xFFFFFFFF
            if rid != 0 and not taken(rid):
                return rid

    def _learn_catalog(self, catalog: Any) -> None:
        entries = catalog.get("accelerators", []) if isinstance(catalog, dict) else catalog
        for entry in entries or []:
            if isinstance(entry, dict) and "name" in entry and "id" in entry:
                self._names[str(entry["name"])] = int(entry["id"])

    def _known_id(self, accelerator: Accelerator) -> Optional[int]:
        if isinstance(accelerator, int):
            return accelerator
        return self._names.get(accelerator)

    @staticmethod
    def _encode_call(
        accel_id: int,
        accelerator: Accelerator,
        request_id: int,
        payload: Any,
        params: Optional[bytes],
        deadline_us: int,
        named: Dict[str, Any],
    ) -> Tuple[bytes, memoryview]:
        if accel_id == CONTROL_ACCEL_ID:
            raise ValueError("accelerator id 0xffff is reserved for control messages")
        if params is not None and named:
            raise ValueError("give either params=<44 bytes> or named parameters, not both")
        if params is None:
            name = accelerator if isinstance(accelerator, str) else _builtin_name(accel_id)
            if name in BUILTIN_PARAMS:
                params = rac.params_for(name, **named)
            elif named:
                raise ValueError(f"named parameters need a built-in accelerator; pass params= for {accelerator!r}")
            else:
                params = rac.NO_PARAMS
        view = as_bytes_view(payload)
        header = CallHeader(accel_id, view.nbytes, request_id, deadline_us, bytes(params)).encode()
        return header, view


def _builtin_name(accel_id: int) -> Optional[str]:
    for name, i in BUILTIN_IDS.items():
        if i == accel_id:
            return name
    return None


class CallsInterrupted(ConnectionError):
    """The connection failed while :meth:`Client.call_many` had calls out.

    ``outcomes`` has one entry per call taken from ``calls``, in their order: the call's
    :class:`Result` when the node answered it before the failure, else a
    :class:`ConnectionError` saying that it was not answered (it may or may not have
    run: retry it on a new connection if running it twice is harmless). ``cause`` is
    the failure itself.
    """

    def __init__(self, cause: BaseException, outcomes: List[Union[Result, ConnectionError]]):
        self.cause = cause
        self.outcomes = outcomes
        unanswered = sum(1 for o in outcomes if not isinstance(o, Result))
        super().__init__(
            f"the connection failed with {unanswered} of {len(outcomes)} call(s) unanswered: {cause}"
        )

    @property
    def unanswered(self) -> List[int]:
        """Indexes into ``outcomes`` of the calls that got no answer."""
        return [i for i, o in enumerate(self.outcomes) if not isinstance(o, Result)]


class Client(_Calls):
    """Blocking client. ``Client("127.0.0.1", 9400)`` or ``Client.from_addr("h:9400")``."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        *,
        timeout: Optional[float] = None,
        max_payload_len: int = DEFAULT_MAX_PAYLOAD_LEN,
        ssl: Optional[_ssl.SSLContext] = None,
    ):
        """``ssl``: speak TLS to a node's RAC-over-TLS listener (``--rac-tls``) with
        this context, e.g. ``ssl.create_default_context(cafile="ca.pem")``, plus
        ``load_cert_chain("client.pem", "client.key")`` for a node that wants client
        certificates (docs/tls.md)."""
        super().__init__()
        self.max_payload_len = max_payload_len
        sock = socket.create_connection((host, port), timeout=timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ssl is not None:
            try:
                sock = ssl.wrap_socket(sock, server_hostname=host)
            except BaseException:
                sock.close()
                raise
        self._sock = sock
        self._in_flight: Dict[int, Kind] = {}
        self._done: Dict[int, Result] = {}
        self._buf = bytearray()
        self._closed_reason: Optional[str] = None
        self._send_failed = False  # reads may go on after a failed send

    @classmethod
    def from_addr(cls, addr: str, **kw: Any) -> "Client":
        host, port = parse_addr(addr)
        return cls(host, port, **kw)

    @staticmethod
    def from_registry(
        url: str,
        function: str,
        *,
        token: Optional[str] = None,
        instance: Optional[str] = None,
        rebind_wait: float = 10.0,
        watch: bool = True,
        timeout: Optional[float] = None,
        ssl: Optional[_ssl.SSLContext] = None,
        unreachable_after: Optional[float] = None,
    ) -> "BoundClient":
        """A client of function ``function`` through the registry at ``url``: it binds an
        instance (``instance``, or a new one released by ``close()``), calls the node
        that instance is bound to over RAC, follows migrations, and rebinds and retries
        once when the node is lost or answers UNKNOWN_ACCELERATOR / UNAVAILABLE; a node
        it cannot reach (or that has not answered for ``unreachable_after`` seconds) is
        reported to the registry first, which moves the instance at once. With
        ``ssl`` it calls the node's RAC-over-TLS listener that the node registered
        (the node's certificate must name the address it registered). See
        :mod:`netaccel.registry`."""
        from .registry import BoundClient, RegistryClient

        registry = RegistryClient(url, token=token)
        return BoundClient(
            registry,
            function,
            instance=instance,
            rebind_wait=rebind_wait,
            watch=watch,
            timeout=timeout,
            ssl=ssl,
            unreachable_after=unreachable_after,
        )

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._sock.close()
        self._closed_reason = self._closed_reason or "client closed"

    def abandon(self) -> None:
        """Gives up on the node from another thread: a call waiting for its result
        fails at once with ``ConnectionError`` (the connection is shut down, not closed,
        so the waiting thread still owns a valid socket). For a node that vanished
        without closing its connections."""
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed or never connected

    @property
    def in_flight(self) -> int:
        """Calls submitted whose result has not been read from the connection yet."""
        return len(self._in_flight)

    # --- calls -----------------------------------------------------------------------

    def resolve(self, accelerator: Accelerator) -> int:
        """Accelerator id for a name: built-ins directly, others via the node's catalog."""
        known = self._known_id(accelerator)
        if known is None:
            self._learn_catalog(self.catalog())
            known = self._known_id(accelerator)
        if known is None:
            raise ValueError(f"the node's catalog has no accelerator named {accelerator!r}")
        return known

    def submit(
        self,
        accelerator: Accelerator,
        payload: Any = b"",
        *,
        params: Optional[bytes] = None,
        deadline_us: int = 0,
        **named: Any,
    ) -> int:
        """Sends a call without waiting for its result; returns its request id.

        ``payload`` is any bytes-like object; ``params`` a raw 44-byte block, or named
        parameters of a built-in (``k=3``, ``width=640, height=480``, …).
        """
        self._check_open()
        accel_id = self.resolve(accelerator)
        rid = self._new_request_id(self._id_taken)
        header, view = self._encode_call(accel_id, accelerator, rid, payload, params, deadline_us, named)
        self._in_flight[rid] = Kind.CALL
        self._send(header, view)
        return rid

    def result(self, request_id: Optional[int] = None) -> Result:
        """The result of ``request_id`` (or of whichever call completes next), whatever
        its status. Reads and keeps results of other calls as they come."""
        if request_id is None:
            if self._done:
                return self._done.pop(next(iter(self._done)))
            if not self._in_flight:
                raise ValueError("no call in flight")
            return self._read_result()
        if request_id in self._done:
            return self._done.pop(request_id)
        if request_id not in self._in_flight:
            raise ValueError(f"request {request_id} is not in flight")
        while True:
            r = self._read_result()
            if r.request_id == request_id:
                return r
            if r.request_id == 0:
                # An answer to the connection, not to one call (0 is never a call's id):
                # BUSY when the node is at its connection bound, PROTOCOL_ERROR for an
                # unreadable call. The node closes the connection after it, so it is
                # every waiting call's answer.
                self._closed_reason = f"the node answered {r.status.name} to the connection: {r.message}"
                return r
            self._done[r.request_id] = r

    def call(self, accelerator: Accelerator, payload: Any = b"", **kw: Any) -> bytes:
        """Runs one call and returns its output; raises :class:`RacError` unless OK."""
        return self.result(self.submit(accelerator, payload, **kw)).raise_for_status().payload

    def call_many(
        self,
        calls: Iterable[Union[Tuple[Accelerator, Any], Dict[str, Any]]],
        *,
        window: int = IN_FLIGHT_MAX_DEFAULT,
    ) -> List[Result]:
        """Pipelines many calls, at most ``window`` in flight; returns their results in
        the order of ``calls`` (statuses not raised: check ``Result.ok``).

        Each call is ``(accelerator, payload)`` or a dict of :meth:`submit` arguments.
        When the connection fails (a send or a receive) it raises
        :class:`CallsInterrupted`, which keeps the answers that arrived and says which
        calls got none.
        """
        if window < 1:
            raise ValueError("window must be at least 1")
        order: List[int] = []
        batch: Set[int] = set()  # ids of this batch still in flight
        results: Dict[int, Result] = {}

        def take_one() -> None:
            while True:
                r = self._read_result()
                if r.request_id in batch:
                    batch.discard(r.request_id)
                    results[r.request_id] = r
                    return
                self._done[r.request_id] = r  # someone else's; result() hands it out

        try:
            for spec in calls:
                if len(batch) >= window:
                    take_one()
                rid = self.submit(**spec) if isinstance(spec, dict) else self.submit(*spec)
                order.append(rid)
                batch.add(rid)
            while batch:
                take_one()
        except (ConnectionError, OSError) as e:
            raise self._interrupted(e, order, batch, results, take_one) from e
        return [results[rid] for rid in order]

    def _interrupted(
        self,
        cause: BaseException,
        order: List[int],
        batch: Set[int],
        results: Dict[int, Result],
        take_one: Callable[[], None],
    ) -> CallsInterrupted:
        """The error of a ``call_many`` whose connection failed: answers the node sent
        before a failed send are still read (at most one per call out), then every call
        still out is given up, since its answer can no longer come."""
        for _ in range(len(batch)):
            try:
                take_one()
            except (ConnectionError, OSError):
                break
        for rid in batch:
            self._in_flight.pop(rid, None)
        assert not (batch & set(results)), "a call both answered and out"
        lost = ConnectionError(f"not answered: the connection failed ({cause})")
        return CallsInterrupted(cause, [results.get(rid, lost) for rid in order])

    # --- control ---------------------------------------------------------------------

    def control(self, op: str, token: Optional[str] = None, **fields: Any) -> Any:
        """Sends a control message and returns its parsed JSON answer; raises
        :class:`RacError` unless OK."""
        self._check_open()
        payload = rac.control_payload(op, token, **fields)
        rid = self._new_request_id(self._id_taken)
        self._in_flight[rid] = Kind.CONTROL
        self._send(CallHeader.control(rid, len(payload)).encode(), memoryview(payload))
        return self.result(rid).raise_for_status().json()

    def catalog(self, token: Optional[str] = None) -> Any:
        return self.control("catalog", token)

    def slots(self, token: Optional[str] = None) -> Any:
        return self.control("slots", token)

    def load(self, slot: int, accelerator: str, token: Optional[str] = None) -> Any:
        return self.control("load", token, slot=slot, accelerator=accelerator)

    def hello(self, tenant: str, token: Optional[str] = None) -> Any:
        return self.control("hello", token, tenant=tenant)

    # --- I/O -------------------------------------------------------------------------

    def _id_taken(self, rid: int) -> bool:
        return rid in self._in_flight or rid in self._done

    def _check_open(self) -> None:
        if self._closed_reason is not None:
            raise ConnectionError(f"connection unusable: {self._closed_reason}")

    def _send(self, header: bytes, payload: memoryview) -> None:
        try:
            if payload.nbytes <= _COALESCE_LEN:
                self._sock.sendall(header + payload.tobytes())
            else:
                self._sock.sendall(header)
                self._sock.sendall(payload)
        except OSError as e:
            # The node may have refused the call (TOO_LARGE) and closed before taking
            # the whole payload. Its answer may still be readable, so the call stays in
            # flight and result() reports it, or the closed connection.
            self._closed_reason = f"send failed: {e}"
            self._send_failed = True

    def _fill(self, n: int) -> None:
        while len(self._buf) < n:
            try:
                chunk = self._sock.recv(max(n - len(self._buf), 65536))
            except OSError as e:
                self._closed_reason = f"receive failed: {e}"
                raise
            if not chunk:
                self._closed_reason = "the node closed the connection"
                raise ConnectionError(
                    f"the node closed the connection with {len(self._in_flight)} call(s) in flight"
                )
            self._buf += chunk

    def _read_result(self) -> Result:
        if not self._send_failed:
            self._check_open()
        self._fill(HEADER_LEN)
        try:
            header = ResultHeader.decode(self._buf, self.max_payload_len)
        except rac.HeaderError as e:
            self._closed_reason = f"bad result header: {e}"
            self._sock.close()
            raise
        assert not isinstance(header, Partial)
        self._fill(HEADER_LEN + header.payload_len)
        payload = bytes(self._buf[HEADER_LEN : HEADER_LEN + header.payload_len])
        del self._buf[: HEADER_LEN + header.payload_len]
        self._in_flight.pop(header.request_id, None)
        r = Result.from_header(header, payload)
        if r.status.closes_connection:
            self._closed_reason = f"the node answered {r.status.name} and closes the connection"
        return r


__all__ = ["CallsInterrupted", "Client", "parse_addr", "as_bytes_view", "DEFAULT_MAX_PAYLOAD_LEN"]
