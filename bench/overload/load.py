#!/usr/bin/env python3
"""Overload figures for one node (issue 15), driven from threads of this process.

Phases (each prints one JSON object on stdout):
  capacity   closed loop, many RAC connections: the echo slot's calls/s
  overload   RATE calls/s spread over CLIENTS connections per front end (http, v2, rac):
             OK / BUSY / other / lost, exactly-once by request id, accepted p50/p99,
             unloaded p50/p99 before, node RSS
  slowloris  one client's p50/p99 alone, then beside N connections that send a
             request head one byte per second
  hung       echo p99 alone, then while the fault slot runs a `hang` call, and the
             time until the node answers that call UNAVAILABLE
  drain      RATE calls/s, SIGTERM to the node mid-run: exit time, answers by fate

Loopback only; every phase stops by itself.
"""
import argparse
import json
import os
import socket
import struct
import threading
import time

ECHO_ID, FAULT_ID = 1, 0xFFF0
MAGIC = b"RAC1"


def rac_header(accel, req_id, payload_len):
    # 64-byte call header: magic, kind 0x01, flags 0, accelerator, payload length,
    # request id, deadline 0 (none), 44 bytes of params (docs/protocol.md).
    return MAGIC + struct.pack("<BBHIII", 1, 0, accel, payload_len, req_id, 0) + bytes(44)


def read_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return bytes(buf)


RAC_STATUS = {0: "OK", 3: "BUSY", 6: "UNAVAILABLE"}


class Rac:
    def __init__(self, addr):
        self.s = socket.create_connection(addr, timeout=30)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self, accel, req_id, payload):
        self.s.sendall(rac_header(accel, req_id, len(payload)) + payload)
        head = read_exact(self.s, 64)
        (status,) = struct.unpack_from("<H", head, 6)
        plen, rid = struct.unpack_from("<II", head, 8)
        body = read_exact(self.s, plen)
        if rid != req_id:
            return "WRONG-ID", body, True
        name = RAC_STATUS.get(status, "STATUS-%d" % status)
        if name == "OK" and body != payload and accel == ECHO_ID:
            name = "WRONG-OUTPUT"
        return name, body, True


class Http:
    def __init__(self, addr, v2=False):
        self.s = socket.create_connection(addr, timeout=30)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.v2 = v2
        self.buf = b""

    def call(self, accel, req_id, payload):
        name = "echo" if accel == ECHO_ID else "fault"
        if self.v2:
            js = ('{"inputs":[{"name":"INPUT0","shape":[%d],"datatype":"UINT8",'
                  '"parameters":{"binary_data_size":%d}}],"outputs":[{"name":"OUTPUT0",'
                  '"parameters":{"binary_data":true}}]}' % (len(payload), len(payload))).encode()
            body = js + payload
            head = ("POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
                    "Inference-Header-Content-Length: %d\r\n\r\n" % (name, len(body), len(js)))
        else:
            body = payload
            head = "POST /v1/fn/%s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (name, len(body))
        self.s.sendall(head.encode() + body)
        while b"\r\n\r\n" not in self.buf:
            chunk = self.s.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        head, _, rest = self.buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        code = int(lines[0].split(" ")[1])
        hdrs = {k.strip().lower(): v.strip() for k, v in (l.split(":", 1) for l in lines[1:] if ":" in l)}
        n = int(hdrs.get("content-length", "0"))
        while len(rest) < n:
            chunk = self.s.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            rest += chunk
        body, self.buf = rest[:n], rest[n:]
        keep = hdrs.get("connection", "") != "close"
        if code == 200:
            ok = body.endswith(payload) if self.v2 else body == payload
            return ("OK" if ok or accel != ECHO_ID else "WRONG-OUTPUT"), body, keep
        if code == 503:
            if "retry-after" not in hdrs:
                return "503-WITHOUT-RETRY-AFTER", body, keep
            try:
                return json.loads(body).get("code", "503"), body, keep
            except ValueError:
                return "503", body, keep
        return "HTTP-%d" % code, body, keep


def connect(front, args):
    if front == "rac":
        return Rac((args.host, args.rac_port))
    return Http((args.host, args.http_port), v2=(front == "v2"))


def rss_kib(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def pct(values, q):
    if not values:
        return None
    v = sorted(values)
    return round(v[min(len(v) - 1, int(round((len(v) - 1) * q)))] * 1e3, 3)


def sequential(front, args, n, accel=ECHO_ID, tag="seq"):
    """n calls one after the other on one connection; latencies of the OK ones (s)."""
    c = connect(front, args)
    lat = []
    for i in range(n):
        p = ("%s-%d" % (tag, i)).encode()
        t = time.perf_counter()
        fate, _, _ = c.call(accel, i + 1, p)
        if fate == "OK":
            lat.append(time.perf_counter() - t)
    return lat


def paced(front, args, clients, rate, seconds, stop=None):
    """clients connections sending rate calls/s in all, one call in flight each.
    Returns per-call records (fate, latency, sent time)."""
    interval = clients / rate
    out, lock = [], threading.Lock()
    start = time.perf_counter()
    end = start + seconds
    seen_ids = set()

    def worker(k):
        mine, conn, seq = [], None, 0
        while time.perf_counter() < end and not (stop and stop.is_set()):
            due = start + k * interval / clients + seq * interval
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            seq += 1
            rid = k * 1_000_000 + seq
            if conn is None:
                try:
                    conn = connect(front, args)
                except OSError:
                    mine.append(("REFUSED-CONNECT", 0.0, time.perf_counter()))
                    break
            t = time.perf_counter()
            try:
                fate, _, keep = conn.call(ECHO_ID, rid, b"%s-%d" % (front.encode(), rid))
            except (OSError, ConnectionError):
                fate, keep = "LOST", False
            mine.append((fate, time.perf_counter() - t, t, rid))
            if not keep:
                conn = None
        with lock:
            out.extend(mine)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dup = len([r for r in out if len(r) == 4]) - len({r[3] for r in out if len(r) == 4})
    return out, dup


def summarize(records, seconds):
    fates = {}
    for r in records:
        fates[r[0]] = fates.get(r[0], 0) + 1
    ok = [r[1] for r in records if r[0] == "OK"]
    return {
        "calls": len(records),
        "fates": fates,
        "accepted_per_s": round(len(ok) / seconds, 1),
        "refused_share": round(fates.get("BUSY", 0) / max(1, len(records)), 3),
        "accepted_p50_ms": pct(ok, 0.5),
        "accepted_p99_ms": pct(ok, 0.99),
    }


def phase_capacity(args):
    res, dup = paced("rac", args, args.clients, 1e9, args.seconds)
    ok = sum(1 for r in res if r[0] == "OK")
    return {"phase": "capacity", "calls_per_s": round(ok / args.seconds, 1), "duplicates": dup}


def phase_overload(args):
    result = {"phase": "overload", "rate": args.rate, "clients": args.clients, "fronts": {}}
    for front in args.fronts.split(","):
        unloaded = sequential(front, args, args.unloaded_calls, tag="unloaded")
        rss0 = rss_kib(args.node_pid)
        rss_max = [rss0]
        done = threading.Event()

        def sample():
            while not done.is_set():
                rss_max[0] = max(rss_max[0], rss_kib(args.node_pid))
                time.sleep(0.05)

        sampler = threading.Thread(target=sample)
        sampler.start()
        res, dup = paced(front, args, args.clients, args.rate, args.seconds)
        done.set()
        sampler.join()
        s = summarize(res, args.seconds)
        s.update({
            "duplicates": dup,
            "unloaded_p50_ms": pct(unloaded, 0.5),
            "unloaded_p99_ms": pct(unloaded, 0.99),
            "p99_vs_unloaded": round(s["accepted_p99_ms"] / pct(unloaded, 0.99), 1) if s["accepted_p99_ms"] else None,
            "rss_before_kib": rss0,
            "rss_max_kib": rss_max[0],
        })
        result["fronts"][front] = s
    return result


def trickle(host, port, n, ready, sending, stop):
    """Opens n connections and, while sending is set, sends each a request head one
    byte a second, spread evenly over the second, until stop is set. Runs in its own
    process, so that the measuring client does not share an interpreter lock with it."""
    socks = []
    for _ in range(n):
        try:
            socks.append(socket.create_connection((host, port), timeout=5))
        except OSError:
            break
    ready.value = len(socks)
    head = b"POST /v1/fn/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
    slices, i = 20, 0
    while not stop.is_set():
        if sending.is_set():
            k = i % slices
            byte = head[(i // slices) % len(head):][:1]
            for s in socks[k::slices]:
                try:
                    s.send(byte)
                except OSError:
                    pass
            i += 1
        stop.wait(1.0 / slices)
    for s in socks:
        s.close()


def phase_slowloris(args):
    """Rounds of one client's calls with the slow connections quiet, then sending,
    alternately (three of each), so that a drifting load on the host hits both alike;
    the figure is the median of the rounds' p99 ratios."""
    import multiprocessing as mp
    alone = sequential("http", args, args.unloaded_calls, tag="alone")
    ready, sending, stop = mp.Value("i", -1), mp.Event(), mp.Event()
    proc = mp.Process(target=trickle, args=(args.host, args.http_port, args.slowloris, ready, sending, stop))
    proc.start()
    while ready.value < 0 and proc.is_alive():
        time.sleep(0.05)
    quiet_p99, beside_p99 = [], []
    for r in range(3):
        sending.clear()
        time.sleep(0.2)
        quiet_p99.append(pct(sequential("http", args, args.unloaded_calls, tag="quiet%d" % r), 0.99))
        sending.set()
        time.sleep(1.0)
        beside_p99.append(pct(sequential("http", args, args.unloaded_calls, tag="beside%d" % r), 0.99))
    stop.set()
    proc.join()
    med = lambda v: sorted(v)[len(v) // 2]
    return {
        "phase": "slowloris", "connections": ready.value,
        "no_connections_p50_ms": pct(alone, 0.5), "no_connections_p99_ms": pct(alone, 0.99),
        "quiet_p99_ms": quiet_p99, "sending_p99_ms": beside_p99,
        "p99_ratio_per_round": [round(b / q, 2) for b, q in zip(beside_p99, quiet_p99)],
        "p99_ratio_median": round(med([b / q for b, q in zip(beside_p99, quiet_p99)]), 2),
    }


def phase_hung(args):
    alone = sequential("http", args, args.unloaded_calls, tag="alone")
    answer = {}

    def hang():
        c = Http((args.host, args.http_port))
        t = time.perf_counter()
        fate, _, _ = c.call(FAULT_ID, 1, b"hang")
        answer.update(fate=fate, after_s=round(time.perf_counter() - t, 3))

    t = threading.Thread(target=hang)
    t.start()
    time.sleep(0.1)
    during = sequential("http", args, args.unloaded_calls, tag="during")
    t.join()
    return {
        "phase": "hung", "hung_call": answer,
        "alone_p50_ms": pct(alone, 0.5), "alone_p99_ms": pct(alone, 0.99),
        "during_p50_ms": pct(during, 0.5), "during_p99_ms": pct(during, 0.99),
        "p99_ratio": round(pct(during, 0.99) / pct(alone, 0.99), 2),
    }


def phase_drain(args):
    stop = threading.Event()
    results = {}

    def run(front):
        results[front] = paced(front, args, args.clients, args.rate / 3, args.seconds, stop)[0]

    threads = [threading.Thread(target=run, args=(f,)) for f in ("http", "v2", "rac")]
    for t in threads:
        t.start()
    time.sleep(args.seconds / 2)
    term = time.perf_counter()
    os.kill(args.node_pid, 15)
    while os.path.exists("/proc/%d" % args.node_pid) and time.perf_counter() - term < 120:
        try:
            with open("/proc/%d/stat" % args.node_pid) as f:
                if f.read().split()[2] == "Z":
                    break
        except OSError:
            break
        time.sleep(0.005)
    exited = time.perf_counter() - term
    stop.set()
    for t in threads:
        t.join()
    out = {"phase": "drain", "exit_after_s": round(exited, 3), "fronts": {}}
    for front, recs in results.items():
        fates = {}
        for r in recs:
            key = r[0] if r[0] != "LOST" else ("LOST-before-SIGTERM" if r[2] < term - 0.1 else "LOST-after")
            fates[key] = fates.get(key, 0) + 1
        out["fronts"][front] = fates
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("phase", choices=["capacity", "overload", "slowloris", "hung", "drain"])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--http-port", type=int, required=True)
    ap.add_argument("--rac-port", type=int, required=True)
    ap.add_argument("--node-pid", type=int, default=0)
    ap.add_argument("--rate", type=float, default=2000)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--fronts", default="http,v2,rac")
    ap.add_argument("--unloaded-calls", type=int, default=300)
    ap.add_argument("--slowloris", type=int, default=10000)
    args = ap.parse_args()
    phase = globals()["phase_" + args.phase]
    print(json.dumps(phase(args)), flush=True)


if __name__ == "__main__":
    main()
