"""RAC v1 wire format: the 64-byte headers, status codes and parameter blocks.

Pure functions over bytes, no I/O; this module mirrors the Rust crate ``rac-proto``
and the byte layout in ``docs/protocol.md``. Decoders take the bytes received so far
and return a header, or a :class:`Partial` saying how many more bytes are needed, or
raise :class:`HeaderError` when the bytes can never become a valid header.
"""

from __future__ import annotations

import enum
import json
import struct
from dataclasses import dataclass, field
from typing import Any, Dict, NamedTuple, Optional, Union

MAGIC = b"RAC1"
HEADER_LEN = 64
PARAMS_LEN = 44
CONTROL_ACCEL_ID = 0xFFFF
NO_SLOT = 0xFFFF
DEFAULT_PORT = 9400
#: Upper bound on a control message's JSON payload; the node refuses longer ones.
CONTROL_PAYLOAD_LEN_MAX = 4096

# magic, kind, flags, accel id, payload len, request id, deadline us; params follow.
_CALL = struct.Struct("<4sBBHIII")
# magic, kind, flags, status, payload len, request id, accel id, slot id, reserved,
# queue_ns, exec_ns; 24 reserved bytes follow.
_RESULT = struct.Struct("<4sBBHIIHHIQQ")
_RESERVED_TAIL = bytes(HEADER_LEN - _RESULT.size)


class Kind(enum.IntEnum):
    """Byte 4 of every header."""

    CALL = 1
    RESULT = 2
    CONTROL = 3
    CONTROL_RESULT = 4

    @property
    def is_request(self) -> bool:
        return self in (Kind.CALL, Kind.CONTROL)


class Status(enum.IntEnum):
    """Result status; ``Status.BUSY.name == "BUSY"`` is the protocol's spelling."""

    OK = 0
    BAD_REQUEST = 1
    UNKNOWN_ACCELERATOR = 2
    BUSY = 3
    TOO_LARGE = 4
    DEADLINE_EXCEEDED = 5
    UNAVAILABLE = 6
    UNAUTHORIZED = 7
    INTERNAL = 8
    PROTOCOL_ERROR = 9

    @property
    def closes_connection(self) -> bool:
        """True when the node closes the connection right after this result."""
        return self in (Status.TOO_LARGE, Status.PROTOCOL_ERROR)

    @property
    def retryable(self) -> bool:
        """True for the statuses the protocol says to retry later (BUSY, UNAVAILABLE)."""
        return self in (Status.BUSY, Status.UNAVAILABLE)


#: Ids of the built-in accelerators; ids from 256 on come from a node's catalog.
BUILTIN_IDS: Dict[str, int] = {
    "echo": 1,
    "to_uppercase": 2,
    "topk": 3,
    "logit": 4,
    "minmax": 5,
    "sobel": 6,
    "matmul": 7,
}


class Partial(NamedTuple):
    """Not a whole header yet: ``needed`` more bytes (at least one) complete it."""

    needed: int


class HeaderError(ValueError):
    """A header that was refused.

    ``reason`` is one of ``bad_magic``, ``unknown_kind``, ``wrong_direction``,
    ``non_zero_flags``, ``accelerator_id_mismatch``, ``payload_too_large``,
    ``unknown_status``, ``non_zero_reserved``. ``status`` is what a node answers it
    with (TOO_LARGE or PROTOCOL_ERROR: both close the connection) and ``request_id``
    the id to answer with (0 when magic or kind were unreadable).
    """

    def __init__(self, reason: str, message: str, request_id: int = 0):
        super().__init__(message)
        self.reason = reason
        self.request_id = request_id
        self.status = Status.TOO_LARGE if reason == "payload_too_large" else Status.PROTOCOL_ERROR


def _check_start(buf: bytes, want_request: bool) -> Optional[Kind]:
    """Magic once four bytes are present, kind once five are (as the Rust decoder)."""
    if len(buf) >= 4 and bytes(buf[:4]) != MAGIC:
        raise HeaderError("bad_magic", f"bad magic {bytes(buf[:4]).hex(' ')}: not a RAC1 message")
    if len(buf) < 5:
        return None
    try:
        kind = Kind(buf[4])
    except ValueError:
        raise HeaderError("unknown_kind", f"unknown message kind {buf[4]}") from None
    if kind.is_request != want_request:
        side = "client" if kind.is_request else "node"
        raise HeaderError(
            "wrong_direction", f"message kind {int(kind)} ({kind.name}) is sent by a {side}, not to one"
        )
    return kind


@dataclass(frozen=True)
class CallHeader:
    """Header of a call (kind 1) or control message (kind 3), client to node."""

    accel_id: int
    payload_len: int
    request_id: int
    deadline_us: int = 0
    params: bytes = bytes(PARAMS_LEN)
    kind: Kind = Kind.CALL

    @classmethod
    def control(cls, request_id: int, payload_len: int) -> "CallHeader":
        return cls(CONTROL_ACCEL_ID, payload_len, request_id, kind=Kind.CONTROL)

    def encode(self) -> bytes:
        if len(self.params) != PARAMS_LEN:
            raise ValueError(f"params must be {PARAMS_LEN} bytes, got {len(self.params)}")
        head = _CALL.pack(
            MAGIC, self.kind, 0, self.accel_id, self.payload_len, self.request_id, self.deadline_us
        )
        return head + bytes(self.params)

    @classmethod
    def decode(cls, buf: bytes, max_payload_len: int = 0xFFFFFFFF) -> Union["CallHeader", Partial]:
        """Decodes from the start of ``buf`` (bytes past 64 are ignored).

        Same checks, in the same order, as ``rac_proto::CallHeader::decode``.
        """
        kind = _check_start(buf, True)
        if len(buf) < HEADER_LEN:
            return Partial(HEADER_LEN - len(buf))
        assert kind is not None
        _, _, flags, accel_id, payload_len, request_id, deadline_us = _CALL.unpack_from(buf)
        if flags != 0:
            raise HeaderError("non_zero_flags", f"flags byte is {flags:#04x}; v1 requires 0", request_id)
        if (accel_id == CONTROL_ACCEL_ID) != (kind == Kind.CONTROL):
            raise HeaderError(
                "accelerator_id_mismatch",
                f"kind {int(kind)} with accelerator id {accel_id:#06x}: control messages and only "
                "they use 0xffff",
                request_id,
            )
        if kind == Kind.CONTROL:
            max_payload_len = min(max_payload_len, CONTROL_PAYLOAD_LEN_MAX)
        if payload_len > max_payload_len:
            raise HeaderError(
                "payload_too_large",
                f"payload of {payload_len} bytes is above the limit of {max_payload_len} bytes",
                request_id,
            )
        params = bytes(buf[_CALL.size : HEADER_LEN])
        return cls(accel_id, payload_len, request_id, deadline_us, params, kind)


@dataclass(frozen=True)
class ResultHeader:
    """Header of a result (kind 2) or control result (kind 4), node to client."""

    status: Status
    payload_len: int
    request_id: int
    accel_id: int
    slot_id: int = NO_SLOT
    queue_ns: int = 0
    exec_ns: int = 0
    kind: Kind = Kind.RESULT

    @property
    def slot(self) -> Optional[int]:
        """The slot that ran the call, ``None`` if none did."""
        return None if self.slot_id == NO_SLOT else self.slot_id

    def encode(self) -> bytes:
        head = _RESULT.pack(
            MAGIC,
            self.kind,
            0,
            self.status,
            self.payload_len,
            self.request_id,
            self.accel_id,
            self.slot_id,
            0,
            self.queue_ns,
            self.exec_ns,
        )
        return head + _RESERVED_TAIL

    @classmethod
    def decode(cls, buf: bytes, max_payload_len: int = 0xFFFFFFFF) -> Union["ResultHeader", Partial]:
        """Decodes from the start of ``buf``; checks as ``rac_proto::ResultHeader::decode``."""
        kind = _check_start(buf, False)
        if len(buf) < HEADER_LEN:
            return Partial(HEADER_LEN - len(buf))
        assert kind is not None
        (_, _, flags, code, payload_len, request_id, accel_id, slot_id, reserved, queue_ns, exec_ns) = (
            _RESULT.unpack_from(buf)
        )
        if flags != 0:
            raise HeaderError("non_zero_flags", f"flags byte is {flags:#04x}; v1 requires 0", request_id)
        try:
            status = Status(code)
        except ValueError:
            raise HeaderError("unknown_status", f"unknown status code {code}", request_id) from None
        tail = bytes(buf[_RESULT.size : HEADER_LEN])
        if reserved != 0 or tail != _RESERVED_TAIL:
            offset = next(
                i for i in [*range(20, 24), *range(40, 64)] if buf[i] != 0
            )
            raise HeaderError("non_zero_reserved", f"reserved byte at offset {offset} is not zero", request_id)
        if payload_len > max_payload_len:
            raise HeaderError(
                "payload_too_large",
                f"payload of {payload_len} bytes is above the limit of {max_payload_len} bytes",
                request_id,
            )
        return cls(status, payload_len, request_id, accel_id, slot_id, queue_ns, exec_ns, kind)


# --- parameter blocks --------------------------------------------------------------


@dataclass(frozen=True)
class ParamSpec:
    name: str
    fmt: str  # struct code: "I" (u32) or "f" (f32)
    offset: int
    default: Optional[float] = None  # None: required


#: Parameters of the built-ins (docs/accelerators.md), by accelerator name.
BUILTIN_PARAMS: Dict[str, tuple] = {
    "echo": (),
    "to_uppercase": (),
    "topk": (ParamSpec("k", "I", 0),),
    "logit": (ParamSpec("eps", "f", 0, 0.0),),
    "minmax": (),
    "sobel": (ParamSpec("width", "I", 0), ParamSpec("height", "I", 4)),
    "matmul": (ParamSpec("n", "I", 0),),
}

NO_PARAMS = bytes(PARAMS_LEN)


def pack_params(specs, values: Dict[str, Any], accelerator: str = "this accelerator") -> bytes:
    """Builds a 44-byte block from ``values`` by ``specs``; unknown or missing names raise."""
    known = {s.name for s in specs}
    unknown = sorted(set(values) - known)
    if unknown:
        takes = ", ".join(s.name for s in specs) or "none"
        raise ValueError(f"unknown parameter {unknown[0]!r} for {accelerator}; it takes {takes}")
    block = bytearray(PARAMS_LEN)
    for s in specs:
        value = values.get(s.name, s.default)
        if value is None:
            raise ValueError(f"missing required parameter {s.name!r} for {accelerator}")
        struct.pack_into("<" + s.fmt, block, s.offset, value)
    return bytes(block)


def params_for(accelerator: str, **values: Any) -> bytes:
    """The block for a built-in accelerator by name: ``params_for("sobel", width=4, height=4)``."""
    try:
        specs = BUILTIN_PARAMS[accelerator]
    except KeyError:
        raise ValueError(f"no built-in accelerator named {accelerator!r}") from None
    return pack_params(specs, values, accelerator)


def topk_params(k: int) -> bytes:
    """``topk``: k (u32 at 0, k >= 1)."""
    return params_for("topk", k=k)


def logit_params(eps: float = 0.0) -> bytes:
    """``logit``: eps (f32 at 0; 0 means 1e-6)."""
    return params_for("logit", eps=eps)


def sobel_params(width: int, height: int) -> bytes:
    """``sobel``: width (u32 at 0), height (u32 at 4)."""
    return params_for("sobel", width=width, height=height)


def matmul_params(n: int) -> bytes:
    """``matmul``: n (u32 at 0); the payload is A then B, n x n f32 each."""
    return params_for("matmul", n=n)


# --- control messages --------------------------------------------------------------

_CONTROL_FIELDS = {
    "catalog": ((), ()),
    "slots": ((), ()),
    "load": (("slot", "accelerator"), ()),
    "hello": (("tenant",), ()),
}


def control_payload(op: str, token: Optional[str] = None, **fields: Any) -> bytes:
    """The JSON payload of a control message, byte-identical to the Rust encoder's:
    ``op`` first, then the op's fields, ``token`` last and only when given."""
    if op not in _CONTROL_FIELDS:
        raise ValueError(f"unknown control op {op!r}; expected one of catalog, slots, load, hello")
    required, _ = _CONTROL_FIELDS[op]
    extra = sorted(set(fields) - set(required))
    if extra:
        raise ValueError(f"control op {op!r} does not take field {extra[0]!r}")
    obj: Dict[str, Any] = {"op": op}
    for name in required:
        if name not in fields:
            raise ValueError(f"control op {op!r} requires field {name!r}")
        obj[name] = fields[name]
    if token is not None:
        obj["token"] = token
    payload = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    if len(payload) > CONTROL_PAYLOAD_LEN_MAX:
        raise ValueError(f"control payload of {len(payload)} bytes is above {CONTROL_PAYLOAD_LEN_MAX}")
    return payload


@dataclass(frozen=True)
class Result:
    """A result as the clients hand it out: header fields plus the payload."""

    status: Status
    payload: bytes
    request_id: int
    accel_id: int
    slot_id: int = NO_SLOT
    queue_ns: int = 0
    exec_ns: int = 0
    kind: Kind = field(default=Kind.RESULT, repr=False)

    @classmethod
    def from_header(cls, header: ResultHeader, payload: bytes) -> "Result":
        return cls(
            header.status,
            payload,
            header.request_id,
            header.accel_id,
            header.slot_id,
            header.queue_ns,
            header.exec_ns,
            header.kind,
        )

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    @property
    def slot(self) -> Optional[int]:
        """The slot that ran the call, ``None`` if none did."""
        return None if self.slot_id == NO_SLOT else self.slot_id

    @property
    def message(self) -> str:
        """The error message of a non-OK result (its payload as UTF-8)."""
        return self.payload.decode("utf-8", "replace")

    def raise_for_status(self) -> "Result":
        if not self.ok:
            raise RacError(self)
        return self

    def json(self) -> Any:
        """The payload parsed as JSON (control results)."""
        return json.loads(self.payload)


class RacError(Exception):
    """A call answered with a status other than OK."""

    def __init__(self, result: Result):
        self.result = result
        self.status = result.status
        self.request_id = result.request_id
        detail = f": {result.message}" if result.payload else ""
        super().__init__(f"{result.status.name} (request {result.request_id}){detail}")
