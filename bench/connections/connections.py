#!/usr/bin/env python3
"""Connection-scale client for bench/connections/run.sh (and its CI-sized test).

Opens N connections to a running node (half HTTP, half RAC, alternating) from several
processes and loopback source addresses (127.0.0.2, 127.0.0.3, ...: each source address
has its own ephemeral port range, so tens of thousands of connections do not run out of
ports), keeps them open and idle, drives a few of them with real calls, and reports as
JSON on stdout:

  opened, accepted, refused_http_503, refused_rac_busy, refused_closed, errors,
  accept_rate (connections/s while opening), rss_before_kib, rss_idle_kib,
  rss_per_idle_conn_bytes ((rss_idle - rss_before) / accepted), active_ok,
  active_failed.

A connection counts as refused when the node sends its refusal within --settle seconds
of the connect (HTTP 503 + Connection: close, or a RAC BUSY result) or closes it. The
node's RSS is read from /proc/PID/status. Everything is bounded by --timeout: workers
exit on their own, and the parent kills any that do not.

Standard library only, so it runs wherever python3 does.
"""

import argparse
import json
import multiprocessing as mp
import os
import selectors
import socket
import struct
import sys
import time

RAC_MAGIC = b"RAC1"
ECHO_ID = 1
BUSY = 3


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def rac_call(request_id, payload):
    head = RAC_MAGIC + bytes([1, 0]) + struct.pack("<HII", ECHO_ID, len(payload), request_id)
    return head + bytes(64 - len(head)) + payload


def recv_exact(sock, n, deadline):
    out = b""
    while len(out) < n:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def classify(sock, proto):
    """What a connection that became readable right after connect said."""
    try:
        data = sock.recv(4096)
    except OSError:
        return "closed"
    if not data:
        return "closed"
    if proto == "http" and data.startswith(b"HTTP/1.1 503") and b"Connection: close" in data:
        return "http_503"
    if proto == "rac" and len(data) >= 8 and data[:4] == RAC_MAGIC and data[4] == 2:
        if struct.unpack_from("<H", data, 6)[0] == BUSY:
            return "rac_busy"
    return "unexpected"


def drive(sock, proto, n, deadline):
    """n sequential calls on an open connection; True if every answer was right."""
    for i in range(n):
        body = b"x%d" % i
        if proto == "http":
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            buf = b""
            while b"\r\n\r\n" not in buf or not buf.endswith(b'{"status":"ok"}'):
                sock.settimeout(max(0.01, deadline - time.monotonic()))
                chunk = sock.recv(4096)
                if not chunk:
                    return False
                buf += chunk
            if not buf.startswith(b"HTTP/1.1 200"):
                return False
        else:
            sock.sendall(rac_call(i + 1, body))
            head = recv_exact(sock, 64, deadline)
            status, plen, rid = struct.unpack_from("<HII", head, 6)
            out = recv_exact(sock, plen, deadline) if plen else b""
            if status != 0 or rid != i + 1 or out != body:
                return False
    return True


def worker(index, args, count, first, out_q, go_evt, stop_evt):
    deadline = time.monotonic() + args.timeout
    source = f"127.0.0.{2 + index % 250}"
    socks = []
    errors = 0
    t0 = time.monotonic()
    for i in range(count):
        proto = args.only or ("http" if (first + i) % 2 == 0 else "rac")
        port = args.http_port if proto == "http" else args.rac_port
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind((source, 0))
            s.settimeout(5)
            s.connect((args.host, port))
            s.setblocking(False)
            socks.append((s, proto))
        except OSError:
            errors += 1
            s.close()
        if time.monotonic() > deadline:
            break
    elapsed = time.monotonic() - t0
    # Refusals arrive right after the accept: wait a little for them.
    sel = selectors.DefaultSelector()
    for s, proto in socks:
        sel.register(s, selectors.EVENT_READ, proto)
    verdicts = {}
    settle_end = time.monotonic() + args.settle
    while time.monotonic() < settle_end:
        for key, _ in sel.select(timeout=max(0, settle_end - time.monotonic())):
            verdicts[key.fileobj] = classify(key.fileobj, key.data)
            sel.unregister(key.fileobj)
    sel.close()
    alive = [(s, p) for s, p in socks if s not in verdicts]
    counts = {}
    for v in verdicts.values():
        counts[v] = counts.get(v, 0) + 1
    out_q.put(("opened", index, {
        "opened": len(socks), "errors": errors, "alive": len(alive),
        "open_seconds": elapsed, "verdicts": counts,
    }))
    # Idle until the parent has measured (and, with --hold-until, until the active
    # load of bench/connections/run.sh is over), then drive a few connections.
    go_evt.wait(max(0.1, deadline - time.monotonic()))
    ok = failed = 0
    active = [(s, p) for s, p in alive][: args.active_per_worker]
    for s, proto in active:
        s.setblocking(True)
        try:
            if drive(s, proto, args.calls, deadline):
                ok += 1
            else:
                failed += 1
        except OSError:
            failed += 1
    # Still-idle connections must still be open (not closed by the node meanwhile).
    closed_meanwhile = 0
    for s, _ in alive[args.active_per_worker:]:
        try:
            if s.recv(1) == b"":
                closed_meanwhile += 1
        except BlockingIOError:
            pass
        except OSError:
            closed_meanwhile += 1
    out_q.put(("driven", index, {"active_ok": ok, "active_failed": failed,
                                 "closed_meanwhile": closed_meanwhile}))
    stop_evt.wait(max(0.1, deadline - time.monotonic()))
    for s, _ in socks:
        s.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--http-port", type=int, required=True)
    p.add_argument("--rac-port", type=int, required=True)
    p.add_argument("--node-pid", type=int, required=True)
    p.add_argument("--conns", type=int, default=18000)
    p.add_argument("--procs", type=int, default=8)
    p.add_argument("--active-per-worker", type=int, default=8)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--only", choices=["http", "rac"], help="one protocol instead of half each")
    p.add_argument("--settle", type=float, default=1.0)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--ready-file", help="written (JSON: RSS, accepted) once the idle "
                   "connections are open and the node's RSS measured")
    p.add_argument("--hold-until", help="keep the connections idle until this file "
                   "exists (or --timeout), then drive and check them")
    args = p.parse_args()

    rss_before = rss_kib(args.node_pid)
    ctx = mp.get_context("fork")
    out_q = ctx.Queue()
    go_evt, stop_evt = ctx.Event(), ctx.Event()
    per = [args.conns // args.procs + (1 if i < args.conns % args.procs else 0)
           for i in range(args.procs)]
    procs, first = [], 0
    t0 = time.monotonic()
    for i, n in enumerate(per):
        pr = ctx.Process(target=worker, args=(i, args, n, first, out_q, go_evt, stop_evt))
        pr.start()
        procs.append(pr)
        first += n
    deadline = time.monotonic() + args.timeout + 5
    opened = {}
    while len(opened) < len(procs):
        kind, i, r = out_q.get(timeout=max(0.1, deadline - time.monotonic()))
        opened[i] = r
    open_wall = time.monotonic() - t0 - args.settle
    # Let the node settle its accepts, then measure idle RSS.
    time.sleep(0.5)
    rss_idle = rss_kib(args.node_pid)
    if args.ready_file:
        # The idle connections are open and measured: the caller may start its load
        # now, and says it is over by creating --hold-until.
        with open(args.ready_file + ".tmp", "w") as f:
            json.dump({"rss_before_kib": rss_before, "rss_idle_kib": rss_idle,
                       "accepted": sum(r["alive"] for r in opened.values())}, f)
        os.rename(args.ready_file + ".tmp", args.ready_file)
    if args.hold_until:
        while not os.path.exists(args.hold_until) and time.monotonic() < deadline:
            time.sleep(0.1)
    go_evt.set()
    driven = {}
    while len(driven) < len(procs):
        kind, i, r = out_q.get(timeout=max(0.1, deadline - time.monotonic()))
        driven[i] = r
    rss_after = rss_kib(args.node_pid)
    stop_evt.set()
    for pr in procs:
        pr.join(timeout=5)
        if pr.is_alive():
            pr.kill()

    verdicts = {}
    for r in opened.values():
        for k, v in r["verdicts"].items():
            verdicts[k] = verdicts.get(k, 0) + v
    total_opened = sum(r["opened"] for r in opened.values())
    accepted = sum(r["alive"] for r in opened.values())
    result = {
        "requested": args.conns,
        "opened": total_opened,
        "accepted": accepted,
        "refused_http_503": verdicts.get("http_503", 0),
        "refused_rac_busy": verdicts.get("rac_busy", 0),
        "refused_closed": verdicts.get("closed", 0),
        "unexpected": verdicts.get("unexpected", 0),
        "errors": sum(r["errors"] for r in opened.values()),
        "accept_rate": round(total_opened / max(open_wall, 1e-6)),
        "rss_before_kib": rss_before,
        "rss_idle_kib": rss_idle,
        "rss_after_active_kib": rss_after,
        "rss_per_idle_conn_bytes": round((rss_idle - rss_before) * 1024 / max(accepted, 1)),
        "active_ok": sum(r["active_ok"] for r in driven.values()),
        "active_failed": sum(r["active_failed"] for r in driven.values()),
        "idle_closed_meanwhile": sum(r["closed_meanwhile"] for r in driven.values()),
    }
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
