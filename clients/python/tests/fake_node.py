"""A small in-process stand-in for a node's RAC listener, for the client tests.

It answers echo (1), to_uppercase (2), topk (3) and a catalog-only accelerator
"reverse" (256); anything else is UNKNOWN_ACCELERATOR. Calls that arrive together are
answered in reverse order, so clients must match results by request id. Refused
headers get PROTOCOL_ERROR or TOO_LARGE and the connection is closed, as a node does.
"""

import json
import select
import socket
import struct
import threading

from netaccel import rac
from netaccel.rac import CallHeader, Kind, Partial, ResultHeader, Status

MAX_PAYLOAD_LEN = 1 << 20
CATALOG = [{"id": i, "name": n} for n, i in rac.BUILTIN_IDS.items()] + [{"id": 256, "name": "reverse"}]


def run(header, payload):
    """(status, output) for one call."""
    if header.kind == Kind.CONTROL:
        req = json.loads(payload)
        if req["op"] == "catalog":
            return Status.OK, json.dumps(CATALOG).encode()
        if req["op"] == "hello":
            return Status.OK, json.dumps({"tenant": req["tenant"]}).encode()
        if req["op"] == "load" and req.get("token") != "admin":
            return Status.UNAUTHORIZED, b"load needs the admin token"
        return Status.OK, json.dumps({"op": req["op"]}).encode()
    if header.accel_id == 1:
        return Status.OK, payload
    if header.accel_id == 2:
        return Status.OK, payload.upper()
    if header.accel_id == 3:
        (k,) = struct.unpack_from("<I", header.params)
        if k < 1 or len(payload) % 4:
            return Status.BAD_REQUEST, b"k must be >= 1 and the payload a multiple of 4 bytes"
        values = sorted(struct.unpack(f"<{len(payload) // 4}i", payload), reverse=True)[:k]
        return Status.OK, struct.pack(f"<{len(values)}i", *values)
    if header.accel_id == 256:
        return Status.OK, payload[::-1]
    return Status.UNKNOWN_ACCELERATOR, f"no slot hosts accelerator {header.accel_id}".encode()


class FakeNode:
    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.calls_seen = 0
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def addr(self):
        return f"127.0.0.1:{self.port}"

    def close(self):
        self._stop = True
        self.listener.close()

    def _accept(self):
        while not self._stop:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        buf = bytearray()
        with conn:
            while True:
                ready = []
                # Collect what arrives together (20 ms of quiet ends a batch).
                while True:
                    r, _, _ = select.select([conn], [], [], 0.02 if ready or buf else None)
                    if not r:
                        break
                    chunk = conn.recv(1 << 16)
                    if not chunk:
                        self._answer(conn, ready)
                        return
                    buf += chunk
                    while True:
                        try:
                            h = CallHeader.decode(buf, MAX_PAYLOAD_LEN)
                        except rac.HeaderError as e:
                            self._answer(conn, ready)
                            err = ResultHeader(e.status, len(str(e)), e.request_id, 0)
                            conn.sendall(err.encode() + str(e).encode())
                            self._linger(conn)
                            return
                        if isinstance(h, Partial) or len(buf) < 64 + h.payload_len:
                            break
                        ready.append((h, bytes(buf[64 : 64 + h.payload_len])))
                        del buf[: 64 + h.payload_len]
                if not ready and not buf:
                    return
                self._answer(conn, ready)
                ready = []

    @staticmethod
    def _linger(conn):
        """Close as a node should after TOO_LARGE or PROTOCOL_ERROR: stop writing, then
        discard what the client still sends for a while, so that closing with unread
        input does not reset the connection and destroy the answer in flight."""
        conn.shutdown(socket.SHUT_WR)
        conn.settimeout(2)
        try:
            while conn.recv(1 << 16):
                pass
        except OSError:
            pass

    def _answer(self, conn, ready):
        out = bytearray()
        for h, payload in reversed(ready):
            self.calls_seen += 1
            status, output = run(h, payload)
            kind = Kind.CONTROL_RESULT if h.kind == Kind.CONTROL else Kind.RESULT
            slot = 0 if status == Status.OK else rac.NO_SLOT
            r = ResultHeader(status, len(output), h.request_id, h.accel_id, slot, 10, 20, kind)
            out += r.encode() + output
        if out:
            conn.sendall(out)


def answering_then_closing(answers):
    """A node for one connection that answers its first ``answers`` calls (echo), then
    closes mid-stream (it stops writing and discards what still comes, as a node that
    gives up on a connection does): the calls after those never get an answer.
    Returns the listening socket (close it when done)."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve():
        conn, _ = server.accept()
        buf = bytearray()
        answered = 0
        with conn:
            while answered < answers:
                chunk = conn.recv(1 << 16)
                if not chunk:
                    return
                buf += chunk
                while answered < answers:
                    h = CallHeader.decode(buf, MAX_PAYLOAD_LEN)
                    if isinstance(h, Partial) or len(buf) < 64 + h.payload_len:
                        break
                    payload = bytes(buf[64 : 64 + h.payload_len])
                    del buf[: 64 + h.payload_len]
                    head = ResultHeader(Status.OK, len(payload), h.request_id, h.accel_id, 0)
                    conn.sendall(head.encode() + payload)
                    answered += 1
            FakeNode._linger(conn)

    threading.Thread(target=serve, daemon=True).start()
    return server
