"""Against a running node: set NETACCEL_RAC_ADDR=host:port (its RAC listener, 9400 by
default) to run these; they are skipped otherwise."""

import asyncio
import json
import math
import os
import pathlib
import socket
import struct

import pytest

from netaccel import Client, RacError, Status, parse_addr, rac
from netaccel.aio import AsyncClient

ADDR = os.environ.get("NETACCEL_RAC_ADDR")
pytestmark = pytest.mark.skipif(not ADDR, reason="set NETACCEL_RAC_ADDR=host:port to test a live node")

VECTORS = json.loads(
    (pathlib.Path(__file__).resolve().parents[3] / "spec" / "rac-v1-vectors.json").read_text()
)
CALL_VECTORS = [v for v in VECTORS if "expect_output_hex" in v]


@pytest.fixture
def client():
    with Client.from_addr(ADDR, timeout=30) as c:
        yield c


def recv_exactly(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


@pytest.mark.parametrize("vector", CALL_VECTORS, ids=lambda v: v["name"])
def test_vector_bytes_on_the_wire(vector):
    header = bytes.fromhex(vector["header_hex"])
    with socket.create_connection(parse_addr(ADDR), timeout=30) as s:
        s.sendall(header + bytes.fromhex(vector["payload_hex"]))
        r = rac.ResultHeader.decode(recv_exactly(s, rac.HEADER_LEN))
        output = recv_exactly(s, r.payload_len)
    call = rac.CallHeader.decode(header)
    assert (r.kind, r.status, r.request_id, r.accel_id) == (rac.Kind.RESULT, Status.OK, call.request_id, call.accel_id)
    assert output.hex() == vector["expect_output_hex"]


def test_builtins_by_name(client):
    assert client.call("echo", b"") == b""
    assert client.call("to_uppercase", b"abc-xyz{") == b"ABC-XYZ{"
    assert client.call("topk", struct.pack("<4i", 4, 8, -1, 8), k=2) == struct.pack("<2i", 8, 8)
    xs = [0.5, 0.25, 1.0]
    out = struct.unpack("<3f", client.call("logit", struct.pack("<3f", *xs), eps=0.01))
    for x, y in zip(xs, out):
        c = min(max(x, 0.01), 0.99)
        assert abs(y - math.log(c / (1 - c))) < 1e-4
    assert struct.unpack("<3f", client.call("minmax", struct.pack("<3f", 2, 4, 3))) == (0.0, 1.0, 0.5)
    a, b = (1, 2, 3, 4), (5, 6, 7, 8)
    c = struct.unpack("<4f", client.call("matmul", struct.pack("<8f", *a, *b), n=2))
    assert c == (19.0, 22.0, 43.0, 50.0)


def test_errors_keep_the_connection(client):
    with pytest.raises(RacError) as e:
        client.call(60000, b"")
    assert e.value.status == Status.UNKNOWN_ACCELERATOR
    with pytest.raises(RacError) as e:
        client.call("topk", b"\x01\x00\x00", k=1)
    assert e.value.status == Status.BAD_REQUEST
    assert client.call("echo", b"still open") == b"still open"


def test_pipelined_calls(client):
    results = client.call_many([("to_uppercase", f"p{i}".encode()) for i in range(500)], window=64)
    assert [r.payload for r in results] == [f"P{i}".encode() for i in range(500)]


def test_catalog_lists_the_builtins(client):
    text = json.dumps(client.catalog())
    for name in rac.BUILTIN_IDS:
        assert name in text


def test_bad_magic_is_a_protocol_error_and_closes():
    with socket.create_connection(parse_addr(ADDR), timeout=30) as s:
        s.sendall(b"XXXX" + bytes(60))
        r = rac.ResultHeader.decode(recv_exactly(s, rac.HEADER_LEN))
        assert (r.status, r.request_id) == (Status.PROTOCOL_ERROR, 0)
        recv_exactly(s, r.payload_len)
        assert s.recv(1) == b""


def test_async_many_in_flight():
    async def main():
        async with await AsyncClient.connect_addr(ADDR) as c:
            outs = await asyncio.gather(*(c.call("echo", i.to_bytes(4, "little")) for i in range(500)))
            assert outs == [i.to_bytes(4, "little") for i in range(500)]

    asyncio.run(main())
