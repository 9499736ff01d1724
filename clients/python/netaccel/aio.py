"""asyncio RAC client: many calls in flight on one connection.

One reader task reads results as they complete and resolves the future of the call
with that request id; callers simply ``await client.call(...)`` from as many tasks as
they like. ``max_in_flight`` bounds the calls outstanding at once (further callers
wait), which also bounds the memory the client holds for results.
"""

from __future__ import annotations

import asyncio
import ssl as _ssl
from typing import Any, Dict, Optional

from . import rac
from .client import DEFAULT_MAX_PAYLOAD_LEN, IN_FLIGHT_MAX_DEFAULT, Accelerator, _Calls, parse_addr
from .rac import DEFAULT_PORT, HEADER_LEN, CallHeader, Partial, Result, ResultHeader


class AsyncClient(_Calls):
    """Create with ``await AsyncClient.connect(host, port)``; close with ``await
    client.close()`` or use ``async with``."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        max_payload_len: int = DEFAULT_MAX_PAYLOAD_LEN,
        max_in_flight: int = IN_FLIGHT_MAX_DEFAULT,
    ):
        super().__init__()
        self.max_payload_len = max_payload_len
        self._reader = reader
        self._writer = writer
        self._pending: Dict[int, asyncio.Future] = {}
        self._slots = asyncio.Semaphore(max_in_flight)
        self._failure: Optional[BaseException] = None
        self._reader_task = asyncio.ensure_future(self._read_loop())

    @classmethod
    async def connect(
        cls,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        *,
        ssl: Optional[_ssl.SSLContext] = None,
        **kw: Any,
    ) -> "AsyncClient":
        """``ssl``: TLS to a node's RAC-over-TLS listener with this context (see
        :class:`netaccel.client.Client`)."""
        reader, writer = await asyncio.open_connection(host, port, ssl=ssl)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            import socket

            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(reader, writer, **kw)

    @classmethod
    async def connect_addr(cls, addr: str, **kw: Any) -> "AsyncClient":
        host, port = parse_addr(addr)
        return await cls.connect(host, port, **kw)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        self._reader_task.cancel()
        try:
            await self._reader_task
        except (asyncio.CancelledError, Exception):
            pass
        self._fail_all(ConnectionError("client closed"))
        self._writer.close()
        try:
            await self._writer.wait_closed()
        except (OSError, RuntimeError):
            pass  # already broken; nothing left to flush

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    # --- calls -----------------------------------------------------------------------

    async def resolve(self, accelerator: Accelerator) -> int:
        """Accelerator id for a name: built-ins directly, others via the node's catalog."""
        known = self._known_id(accelerator)
        if known is None:
            self._learn_catalog(await self.catalog())
            known = self._known_id(accelerator)
        if known is None:
            raise ValueError(f"the node's catalog has no accelerator named {accelerator!r}")
        return known

    async def call_result(
        self,
        accelerator: Accelerator,
        payload: Any = b"",
        *,
        params: Optional[bytes] = None,
        deadline_us: int = 0,
        **named: Any,
    ) -> Result:
        """Runs one call and returns its :class:`Result`, whatever the status."""
        accel_id = await self.resolve(accelerator)
        async with self._slots:
            rid = self._new_request_id(self._pending.__contains__)
            header, view = self._encode_call(accel_id, accelerator, rid, payload, params, deadline_us, named)
            return await self._exchange(rid, header, view)

    async def call(self, accelerator: Accelerator, payload: Any = b"", **kw: Any) -> bytes:
        """Runs one call and returns its output; raises :class:`RacError` unless OK."""
        return (await self.call_result(accelerator, payload, **kw)).raise_for_status().payload

    async def control(self, op: str, token: Optional[str] = None, **fields: Any) -> Any:
        """Sends a control message; returns its parsed JSON answer, raises unless OK."""
        payload = rac.control_payload(op, token, **fields)
        async with self._slots:
            rid = self._new_request_id(self._pending.__contains__)
            header = CallHeader.control(rid, len(payload)).encode()
            result = await self._exchange(rid, header, memoryview(payload))
        return result.raise_for_status().json()

    async def catalog(self, token: Optional[str] = None) -> Any:
        return await self.control("catalog", token)

    async def slots(self, token: Optional[str] = None) -> Any:
        return await self.control("slots", token)

    async def load(self, slot: int, accelerator: str, token: Optional[str] = None) -> Any:
        return await self.control("load", token, slot=slot, accelerator=accelerator)

    async def hello(self, tenant: str, token: Optional[str] = None) -> Any:
        return await self.control("hello", token, tenant=tenant)

    # --- I/O -------------------------------------------------------------------------

    async def _exchange(self, rid: int, header: bytes, payload: memoryview) -> Result:
        if self._failure is not None:
            raise ConnectionError(f"connection unusable: {self._failure}")
        future = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        try:
            # Header and payload go into the transport's buffer back to back, with no
            # await between them, so concurrent calls cannot interleave their bytes.
            self._writer.write(header)
            self._writer.write(payload)
            try:
                await self._writer.drain()
            except OSError:
                # The node may have refused the call (TOO_LARGE) and closed before
                # taking the whole payload; the reader delivers its answer, or fails
                # the call when the connection is gone.
                pass
            return await future
        finally:
            self._pending.pop(rid, None)

    async def _read_loop(self) -> None:
        try:
            while True:
                head = await self._reader.readexactly(HEADER_LEN)
                header = ResultHeader.decode(head, self.max_payload_len)
                assert not isinstance(header, Partial)
                payload = await self._reader.readexactly(header.payload_len)
                result = Result.from_header(header, payload)
                if header.request_id == 0:
                    # An answer to the connection, not to one call (0 is never a call's
                    # id): BUSY at the node's connection bound, PROTOCOL_ERROR for an
                    # unreadable call. The node closes the connection after it, so every
                    # waiting call gets it.
                    for future in self._pending.values():
                        if not future.done():
                            future.set_result(result)
                    raise ConnectionError(f"the node answered {result.status.name} to the connection: {result.message}")
                future = self._pending.get(header.request_id)
                if future is not None and not future.done():
                    future.set_result(result)
                if result.status.closes_connection:
                    # Calls without their own answer will never get one.
                    raise ConnectionError(
                        f"the node answered {result.status.name} to request "
                        f"{result.request_id} and closes the connection"
                    )
        except asyncio.CancelledError:
            raise
        except asyncio.IncompleteReadError:
            self._fail_all(ConnectionError(f"the node closed the connection with {len(self._pending)} call(s) in flight"))
        except Exception as e:  # a bad header, a reset: every waiting call must hear of it
            self._fail_all(e if isinstance(e, (ConnectionError, rac.HeaderError)) else ConnectionError(str(e)))

    def _fail_all(self, error: BaseException) -> None:
        if self._failure is None:
            self._failure = error
        for future in self._pending.values():
            if not future.done():
                future.set_exception(error)


__all__ = ["AsyncClient"]
