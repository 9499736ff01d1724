"""Reference models of the RTL accelerators: Python equivalents of the CPU kernels
(crates/accel/src/reference.rs) and of the RAC call header the shell sends first.

Each model takes (params block, payload bytes) and returns (status, output bytes),
status 0 OK or 1 BAD_REQUEST, with the limits of the RTL designs (topk's K_MAX, minmax's
buffer) where they are narrower than the CPU kernels'.
"""

import math
import struct

OK = 0
BAD_REQUEST = 1

# The designs' documented limits (docs/rtl.md).
TOPK_K_MAX = 64
MINMAX_MAX_BYTES = 64 * 1024

ACCELERATOR_IDS = {"echo": 1, "to_uppercase": 2, "topk": 3, "minmax": 5}


def call_header(accel_id: int, payload_len: int, request_id: int = 1, params: bytes = b"") -> bytes:
    """The 64-byte RAC v1 call header (spec/rac-v1.md)."""
    assert len(params) <= 44
    head = b"RAC1" + struct.pack("<BBHIII", 1, 0, accel_id, payload_len, request_id, 0)
    return head + params.ljust(44, b"\0")


def echo(params: bytes, payload: bytes):
    return OK, payload


def to_uppercase(params: bytes, payload: bytes):
    return OK, bytes(b - 0x20 if 0x61 <= b <= 0x7A else b for b in payload)


def topk(params: bytes, payload: bytes):
    (k,) = struct.unpack_from("<I", params, 0)
    if k == 0 or k > TOPK_K_MAX or len(payload) % 4:
        return BAD_REQUEST, b""
    values = sorted(struct.unpack(f"<{len(payload) // 4}i", payload), reverse=True)[:k]
    return OK, struct.pack(f"<{len(values)}i", *values)


def minmax_exact(payload: bytes):
    """(status, list of float64 results), the float64 oracle of the CPU kernel's tests."""
    if len(payload) % 4 or len(payload) > MINMAX_MAX_BYTES:
        return BAD_REQUEST, []
    values = struct.unpack(f"<{len(payload) // 4}f", payload)
    if any(not math.isfinite(v) for v in values):
        return BAD_REQUEST, []
    if not values:
        return OK, []
    lo, hi = min(values), max(values)
    if lo == hi:
        return OK, [0.0] * len(values)
    return OK, [(v - lo) / (hi - lo) for v in values]


MODELS = {"echo": echo, "to_uppercase": to_uppercase, "topk": topk}
