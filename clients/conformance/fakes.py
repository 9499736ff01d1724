"""Stand-ins the conformance harness starts beside the real node: a fake RAC node that
misbehaves in one chosen way (to prove a client turns a broken reply into a typed error,
never a hang), and a fake registry that serves the contract's bodies
(spec/registry/*.json shapes) for binding, leader failover and migration.

Not for: anything a real node or registry can show; those cases run against the real
binaries.
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Optional

HEADER_LEN = 64
#: How long a fake node keeps a misbehaving connection open after its reply, so that a
#: client that waits for more bytes is seen to hang (the harness times it out).
LINGER_S = 30.0


def _result(request_id: int, accel_id: int, payload: bytes, status: int = 0, reserved: int = 0,
            kind: int = 0x02) -> bytes:
    head = bytearray(HEADER_LEN)
    head[0:4] = b"RAC1"
    head[4] = kind
    struct.pack_into("<HII HH", head, 6, status, len(payload), request_id, accel_id, 0xFFFF)
    head[20] = reserved
    return bytes(head) + payload


def _read_exact(conn: socket.socket, n: int) -> Optional[bytes]:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


class FakeNode:
    """A RAC listener that answers every call in the way `mode` names:

    - ``bad_magic``: a result whose first four bytes are not ``RAC1``;
    - ``bad_status``: a result with status 42 (undefined in v1);
    - ``reserved_nonzero``: a result with byte 20 set;
    - ``truncated_header``: 30 bytes of a result, then close;
    - ``truncated_payload``: a header announcing 100 bytes, 10 of them, then close;
    - ``close_mid_call``: reads the call, closes without answering.

    Control messages (a client asking for the catalog) are answered as a node would,
    so that a client reaches the call under test.
    """

    MODES = ("bad_magic", "bad_status", "reserved_nonzero", "truncated_header",
             "truncated_payload", "close_mid_call")

    def __init__(self, mode: str):
        assert mode in self.MODES, mode
        self.mode = mode
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.addr = "127.0.0.1:%d" % self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while True:
                head = _read_exact(conn, HEADER_LEN)
                if head is None:
                    return
                (accel_id, payload_len, request_id) = struct.unpack_from("<HII", head, 6)
                if _read_exact(conn, payload_len) is None:
                    return
                if head[4] == 0x03:
                    catalog = json.dumps([{"id": 1, "name": "echo"}]).encode()
                    conn.sendall(_result(request_id, 0xFFFF, catalog, kind=0x04))
                    continue
                self._misbehave(conn, request_id, accel_id)
                return

    def _misbehave(self, conn: socket.socket, request_id: int, accel_id: int) -> None:
        good = _result(request_id, accel_id, b"\x01\x02")
        if self.mode == "close_mid_call":
            return
        if self.mode == "bad_magic":
            conn.sendall(b"XAC1" + good[4:])
        elif self.mode == "bad_status":
            conn.sendall(_result(request_id, accel_id, b"", status=42))
        elif self.mode == "reserved_nonzero":
            conn.sendall(_result(request_id, accel_id, b"\x01\x02", reserved=1))
        elif self.mode == "truncated_header":
            conn.sendall(good[:30])
            return
        elif self.mode == "truncated_payload":
            head = bytearray(_result(request_id, accel_id, b""))
            struct.pack_into("<I", head, 8, 100)
            conn.sendall(bytes(head) + b"0123456789")
            return
        # A client that does not refuse what it got waits for more: keep the
        # connection open so that such a client hangs visibly instead of passing.
        time.sleep(LINGER_S)


def binding(instance: str, function: str, generation: int, rac: Optional[str], http: Optional[str]) -> Dict:
    """A binding body in the shape of spec/registry/binding.json."""
    bound = rac is not None
    return {
        "id": instance, "function": function, "node": "conformance-node" if bound else None,
        "device": "cpu0" if bound else None, "slot": 0 if bound else None,
        "http": http, "rac": rac, "opencl": None, "https": None, "rac_tls": None,
        "grpc": None, "grpc_tls": None, "generation": generation,
    }


class FakeRegistry:
    """One registry replica on a free port.

    As a leader it knows one function, `function` (accelerator `accelerator`), and binds
    every new instance: to `first_rac` (generation 1), and, once a client has seen that
    binding, to `then_rac` (generation 2) when `then_rac` is given — a migration off a
    node that is gone. As a follower (`leader` given) it answers every request
    ``503 NOT_LEADER`` with ``Location`` at the leader, as spec/registry-api.md says.
    """

    def __init__(self, function: str, accelerator: str, first_rac: Optional[str] = None,
                 then_rac: Optional[str] = None, leader: Optional[str] = None):
        self.function, self.accelerator = function, accelerator
        self.first_rac, self.then_rac, self.leader = first_rac, then_rac, leader
        self.instances: Dict[str, Dict] = {}
        self.requests: List[str] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self):
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet: the harness reports failures
                pass

            def do_GET(self) -> None:
                registry.answer(self, "GET")

            def do_POST(self) -> None:
                registry.answer(self, "POST")

            def do_DELETE(self) -> None:
                registry.answer(self, "DELETE")

        return Handler

    def answer(self, h: BaseHTTPRequestHandler, method: str) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        with self.lock:
            self.requests.append(f"{method} {h.path}")
        if self.leader is not None:
            self.send(h, 503, {"error": f"this registry replica does not lead; write to {self.leader}",
                               "code": "NOT_LEADER"}, {"Location": self.leader + h.path, "Retry-After": "1"})
            return
        path, _, query = h.path.partition("?")
        parts = path.strip("/").split("/")
        if parts[:3] != ["v1", "functions", self.function]:
            self.send(h, 404, {"error": f"no route {path}", "code": "NOT_FOUND"})
            return
        if len(parts) == 3 and method == "GET":
            self.send(h, 200, {"name": self.function, "accelerator": self.accelerator, "hash": None,
                               "query": {"backend": None, "vendor": None, "node": None},
                               "instances": list(self.instances.values())})
        elif len(parts) == 4 and parts[3] == "instances" and method == "POST":
            spec = json.loads(body or b"{}")
            instance = spec.get("id") or f"{self.function}-1"
            with self.lock:
                self.instances[instance] = binding(instance, self.function, 1, self.first_rac, None)
                doc = self.instances[instance]
            self.send(h, 201, doc)
        elif len(parts) == 5 and method == "GET":
            self.send_instance(h, parts[4], query)
        elif len(parts) == 5 and method == "DELETE":
            with self.lock:
                self.instances.pop(parts[4], None)
            h.send_response(204)
            h.end_headers()
        else:
            self.send(h, 404, {"error": f"no route {method} {path}", "code": "NOT_FOUND"})

    def send_instance(self, h: BaseHTTPRequestHandler, instance: str, query: str) -> None:
        with self.lock:
            doc = self.instances.get(instance)
            if doc is not None and self.then_rac is not None and doc["generation"] == 1:
                # The node of generation 1 is gone: the instance moves.
                doc = self.instances[instance] = binding(instance, self.function, 2, self.then_rac, None)
        if doc is None:
            self.send(h, 404, {"error": f"no instance {instance}", "code": "NOT_FOUND"})
            return
        self.send(h, 200, doc)

    @staticmethod
    def send(h: BaseHTTPRequestHandler, status: int, doc: Dict, headers: Optional[Dict] = None) -> None:
        data = json.dumps(doc).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)
