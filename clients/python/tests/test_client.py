"""Client and AsyncClient against an in-process fake node (tests/fake_node.py)."""

import asyncio
import struct

import pytest

from netaccel import CallsInterrupted, Client, RacError, Status, parse_addr, rac
from netaccel.aio import AsyncClient

from fake_node import FakeNode, answering_then_closing


@pytest.fixture
def node():
    n = FakeNode()
    yield n
    n.close()


def test_parse_addr():
    assert parse_addr("h:1") == ("h", 1)
    assert parse_addr("h") == ("h", 9400)
    assert parse_addr("[::1]:5") == ("::1", 5)
    assert parse_addr("[::1]") == ("::1", 9400)


def test_call_by_name_and_id(node):
    with Client.from_addr(node.addr) as c:
        assert c.call("to_uppercase", b"hello") == b"HELLO"
        assert c.call(1, b"") == b""
        payload = struct.pack("<6i", 5, -3, 9, 9, 0, 2)
        assert c.call("topk", payload, k=3) == struct.pack("<3i", 9, 9, 5)
        assert c.call("topk", payload, params=rac.topk_params(1)) == struct.pack("<i", 9)
        assert c.call("echo", memoryview(b"abc")) == b"abc"


def test_errors_raise_with_status_and_message(node):
    with Client.from_addr(node.addr) as c:
        with pytest.raises(RacError) as e:
            c.call(99, b"x")
        assert e.value.status == Status.UNKNOWN_ACCELERATOR
        assert "no slot hosts accelerator 99" in str(e.value)
        r = c.result(c.submit("topk", b"\x01\x00\x00\x00", k=0))
        assert (r.ok, r.status.name) == (False, "BAD_REQUEST")
        assert c.call("echo", b"still open") == b"still open"
        with pytest.raises(ValueError, match="missing required parameter 'k'"):
            c.submit("topk", b"")
        with pytest.raises(ValueError, match="reserved for control"):
            c.submit(0xFFFF, b"")


def test_pipelined_results_are_matched_by_request_id(node):
    with Client.from_addr(node.addr) as c:
        ids = [c.submit("echo", str(i).encode()) for i in range(20)]
        assert c.in_flight == 20
        # Ask in submission order although the node answers in reverse.
        for i, rid in enumerate(ids):
            r = c.result(rid)
            assert (r.request_id, r.payload, r.slot) == (rid, str(i).encode(), 0)
        assert c.in_flight == 0
        with pytest.raises(ValueError, match="not in flight"):
            c.result(ids[0])


def test_call_many_keeps_order_and_bounds_the_window(node):
    with Client.from_addr(node.addr) as c:
        earlier = c.submit("echo", b"earlier")
        calls = [("to_uppercase", f"x{i}".encode()) for i in range(100)]
        calls.append({"accelerator": "topk", "payload": struct.pack("<2i", 1, 2), "k": 1})
        calls.append((99, b""))
        results = c.call_many(calls, window=2)
        assert [r.payload for r in results[:100]] == [f"X{i}".encode() for i in range(100)]
        assert results[100].payload == struct.pack("<i", 2)
        assert results[101].status == Status.UNKNOWN_ACCELERATOR
        assert c.result(earlier).payload == b"earlier"


def test_catalog_names_resolve_and_control(node):
    with Client.from_addr(node.addr) as c:
        assert c.call("reverse", b"abc") == b"cba"
        assert {"id": 256, "name": "reverse"} in c.catalog()
        assert c.hello("team-a") == {"tenant": "team-a"}
        with pytest.raises(RacError) as e:
            c.load(0, "sobel")
        assert e.value.status == Status.UNAUTHORIZED
        assert c.load(0, "sobel", token="admin") == {"op": "load"}
        with pytest.raises(ValueError, match="no accelerator named 'nope'"):
            c.call("nope", b"")


def test_too_large_closes_the_connection(node):
    with Client.from_addr(node.addr) as c:
        rid = c.submit("echo", bytes((1 << 20) + 1))
        r = c.result(rid)
        assert r.status == Status.TOO_LARGE and r.status.closes_connection
        with pytest.raises(ConnectionError):
            c.submit("echo", b"")


def test_async_many_calls_in_flight(node):
    async def main():
        async with await AsyncClient.connect_addr(node.addr) as c:
            outputs = await asyncio.gather(*(c.call("to_uppercase", f"m{i}".encode()) for i in range(300)))
            assert outputs == [f"M{i}".encode() for i in range(300)]
            assert await c.call("reverse", b"ab") == b"ba"
            r = await c.call_result(99, b"")
            assert r.status == Status.UNKNOWN_ACCELERATOR
            with pytest.raises(RacError, match="UNKNOWN_ACCELERATOR"):
                await c.call(99, b"")
            assert await c.call("topk", struct.pack("<3i", 3, 1, 2), k=2) == struct.pack("<2i", 3, 2)
            assert {"id": 1, "name": "echo"} in await c.catalog()
            assert c.in_flight == 0

    asyncio.run(main())


def test_async_bounded_in_flight(node):
    async def main():
        c = await AsyncClient.connect("127.0.0.1", node.port, max_in_flight=4)
        try:
            outputs = await asyncio.gather(*(c.call("echo", bytes([i])) for i in range(50)))
            assert outputs == [bytes([i]) for i in range(50)]
        finally:
            await c.close()

    asyncio.run(main())


def test_async_by_default_at_most_32_calls_are_out_the_nodes_own_bound():
    # A node that reads every call and answers none: what is out stops at the bound.
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def swallow():
        conn, _ = server.accept()
        with conn:
            while conn.recv(1 << 16):
                pass

    threading.Thread(target=swallow, daemon=True).start()

    async def main():
        c = await AsyncClient.connect("127.0.0.1", server.getsockname()[1])
        calls = [asyncio.ensure_future(c.call("echo", bytes([i]))) for i in range(40)]
        try:
            await asyncio.sleep(0.3)
            assert c.in_flight == 32
        finally:
            for call in calls:
                call.cancel()
            await c.close()

    try:
        asyncio.run(main())
    finally:
        server.close()


def test_async_calls_fail_when_the_node_closes(node):
    async def main():
        async with await AsyncClient.connect_addr(node.addr) as c:
            big = c.call_result("echo", bytes((1 << 20) + 1))
            r = await big
            assert r.status == Status.TOO_LARGE
            with pytest.raises(ConnectionError):
                await c.call("echo", b"after")

    asyncio.run(main())


def test_numpy_arrays_are_payloads(node):
    np = pytest.importorskip("numpy")
    with Client.from_addr(node.addr) as c:
        x = np.arange(12, dtype=np.float32).reshape(3, 4)
        y = np.frombuffer(c.call("echo", x), dtype="<f4").reshape(3, 4)
        assert (x == y).all()
        with pytest.raises(ValueError, match="C-contiguous"):
            c.submit("echo", x.T)
        values = np.array([5, -3, 9, 9, 0, 2], dtype="<i4")
        assert np.frombuffer(c.call("topk", values, k=3), dtype="<i4").tolist() == [9, 9, 5]


def _refusing_node(message):
    """A node at its connection bound, for one connection: one BUSY result with request
    id 0 (an answer to the connection) once a call has arrived, then the close."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def refuse():
        conn, _ = server.accept()
        conn.recv(64)
        head = rac.ResultHeader(status=Status.BUSY, payload_len=len(message), request_id=0, accel_id=0)
        conn.sendall(head.encode() + message)
        conn.close()

    threading.Thread(target=refuse, daemon=True).start()
    return server


BOUND_MESSAGE = b"the node is at its connection bound (connections_max = 4)"


def test_a_node_at_its_connection_bound_answers_busy_to_the_waiting_call():
    # The waiting call gets that BUSY and its message, not a bare "connection closed".
    server = _refusing_node(BOUND_MESSAGE)
    try:
        with Client("127.0.0.1", server.getsockname()[1], timeout=10) as c:
            with pytest.raises(RacError) as e:
                c.call("echo", b"hello")
            assert e.value.status == Status.BUSY
            assert "connection bound" in str(e.value)
            with pytest.raises(ConnectionError):
                c.call("echo", b"again")
    finally:
        server.close()


def test_async_a_node_at_its_connection_bound_answers_busy_to_the_waiting_call():
    server = _refusing_node(BOUND_MESSAGE)

    async def main():
        async with await AsyncClient.connect_addr(f"127.0.0.1:{server.getsockname()[1]}") as c:
            r = await asyncio.wait_for(c.call_result("echo", b"hello"), 10)
            assert r.status == Status.BUSY
            assert "connection bound" in r.message
            with pytest.raises(ConnectionError):
                await c.call("echo", b"again")

    try:
        asyncio.run(main())
    finally:
        server.close()


# Payloads of several segments, so that calls are still being sent when the node stops.
_BIG = 200_000


def test_call_many_keeps_the_answers_and_names_the_unanswered_when_the_node_closes():
    server = answering_then_closing(3)
    try:
        with Client("127.0.0.1", server.getsockname()[1], timeout=10) as c:
            calls = [("echo", bytes([i]) * _BIG) for i in range(8)]
            with pytest.raises(CallsInterrupted) as e:
                c.call_many(calls, window=2)
            outcomes = e.value.outcomes
            assert isinstance(e.value, ConnectionError)
            assert len(outcomes) >= 4, outcomes
            # Every call taken ends with its answer or an error that says it got none.
            answered = [o for o in outcomes if not isinstance(o, ConnectionError)]
            assert [r.payload for r in answered] == [bytes([i]) * _BIG for i in range(3)]
            assert e.value.unanswered == list(range(3, len(outcomes)))
            for i in e.value.unanswered:
                assert "not answered" in str(outcomes[i])
            assert c.in_flight == 0, "calls that can get no answer are not left in flight"
            with pytest.raises(ConnectionError):
                c.submit("echo", b"after")
    finally:
        server.close()


def test_async_every_call_out_ends_when_the_node_closes_mid_stream():
    server = answering_then_closing(3)

    async def main():
        c = await AsyncClient.connect("127.0.0.1", server.getsockname()[1])
        try:

            async def one(i):
                await asyncio.sleep(0.02 * i)
                return await c.call_result("echo", bytes([i]) * _BIG)

            outcomes = await asyncio.wait_for(
                asyncio.gather(*(one(i) for i in range(8)), return_exceptions=True), 10
            )
        finally:
            await c.close()
        assert [o.payload for o in outcomes[:3]] == [bytes([i]) * _BIG for i in range(3)]
        assert all(isinstance(o, ConnectionError) for o in outcomes[3:]), outcomes[3:]
        assert c.in_flight == 0

    try:
        asyncio.run(main())
    finally:
        server.close()
