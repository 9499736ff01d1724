#!/usr/bin/env python3
"""Slowloris client for bench/slowloris/run.sh (issue 15): what request heads sent one byte
per write cost a node, and what they do to another client's latency.

Phases (each prints one JSON object on stdout):
  whole   --conns connections each send a whole request head of --head-min..--head-max
          bytes one byte per write, round-robin over the connections, --rate bytes/s
          in all (so each write reaches the node on its own), then a 5-byte body, and
          must get it echoed back: the node's CPU time (utime + stime,
          /proc/PID/stat) per head byte.
  steady  --conns connections each send, at connect, the start of a head (a length
          drawn from --head-min..--head-max, less what the run will add), then in
          --rounds alternating pairs of rounds stay quiet or each get one byte per
          write, --rate bytes/s over all of them, while another client (its own
          process) makes sequential echo calls, --probe-rate a second, for --seconds:
          that client's p50/p99 per round, their ratio (beside the bytes / quiet),
          and the node's CPU time per round and per byte.

Loopback only; stops by itself (everything is bounded by --timeout). Standard library
only.
"""

import argparse
import json
import multiprocessing as mp
import os
import random
import resource
import socket
import time

BODY = b"hello"


def cpu_seconds(pid):
    """utime + stime of process pid, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # Fields 14 and 15 of stat(5), counted from 1; [0] here is field 3.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Pacer:
    """Spaces writes to `rate` per second (0: no pacing), in 5 ms ticks."""

    TICK = 0.005

    def __init__(self, rate):
        self.per_tick = max(1, round(rate * self.TICK)) if rate else 0
        self.left = self.per_tick
        self.next_tick = time.monotonic() + self.TICK

    def wrote(self):
        if not self.per_tick:
            return
        self.left -= 1
        if self.left:
            return
        self.left = self.per_tick
        pause = self.next_tick - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        self.next_tick += self.TICK


def head(length):
    """A POST /v1/fn/echo head of exactly `length` bytes (at least 128): padding header
    lines of 160 bytes or more, at most some 50 of them (the node takes 64 fields)."""
    start = b"POST /v1/fn/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
    line = max(160, length // 50)
    out = bytearray(start)
    i = 0
    while True:
        left = length - len(out) - 2  # the blank line
        name = b"X-Pad-%02d: " % i
        if left < 2 * line:
            pad = left - len(name) - 2
            assert pad >= 1, length
            out += name + b"p" * pad + b"\r\n"
            break
        out += name + b"p" * (line - len(name) - 2) + b"\r\n"
        i += 1
    out += b"\r\n"
    assert len(out) == length
    return bytes(out)


def connect(args):
    s = socket.create_connection((args.host, args.http_port), timeout=10)
    # One byte per write must reach the node as one segment.
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_answer(s):
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    top, _, rest = buf.partition(b"\r\n\r\n")
    code = int(top.split(b" ", 2)[1])
    length = 0
    for line in top.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        rest += chunk
    return code, rest[:length]


def pct(values, q):
    v = sorted(values)
    return round(v[min(len(v) - 1, int(q * len(v)))] * 1000, 3) if v else None


def raise_fd_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def phase_whole(args):
    rng = random.Random(1)
    heads = [head(rng.randint(args.head_min, args.head_max)) for _ in range(args.conns)]
    socks = [connect(args) for _ in heads]
    deadline = time.monotonic() + args.timeout
    cpu0, t0 = cpu_seconds(args.node_pid), time.monotonic()
    pacer = Pacer(args.rate)
    sent = 0
    for pos in range(max(len(h) for h in heads)):
        for s, h in zip(socks, heads):
            if pos < len(h):
                s.send(h[pos:pos + 1])
                sent += 1
                pacer.wrote()
        if time.monotonic() > deadline:
            raise SystemExit("whole: out of time")
    cpu1, t1 = cpu_seconds(args.node_pid), time.monotonic()
    ok = 0
    for s in socks:
        s.sendall(BODY)
        code, body = read_answer(s)
        ok += code == 200 and body == BODY
        s.close()
    return {
        "phase": "whole", "connections": len(socks), "head_bytes": sent,
        "head_bytes_mean": round(sent / len(socks)), "seconds": round(t1 - t0, 2),
        "bytes_per_s": round(sent / (t1 - t0)),
        "node_cpu_s": round(cpu1 - cpu0, 3),
        "node_cpu_us_per_byte": round((cpu1 - cpu0) * 1e6 / sent, 3),
        "answers_ok": ok,
    }


def probe(args, seconds, out_q):
    """Sequential echo calls on one connection for `seconds`: their latencies."""
    s = connect(args)
    request = b"POST /v1/fn/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n" + BODY
    lat = []
    end = time.monotonic() + seconds
    errors = 0
    next_call = time.perf_counter()
    while time.monotonic() < end:
        # Paced, so that this client leaves the node (and the host) room.
        next_call += 1 / args.probe_rate
        pause = next_call - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        t = time.perf_counter()
        s.sendall(request)
        code, body = read_answer(s)
        lat.append(time.perf_counter() - t)
        errors += code != 200 or body != BODY
    s.close()
    out_q.put((lat, errors))


def phase_steady(args):
    rng = random.Random(2)
    rounds = args.rounds
    # Bytes each connection gets over all sending rounds, with room to spare: a head
    # never completes (nor passes --head-max) while it is measured.
    added = int(args.rate * args.seconds * rounds / args.conns * 1.5) + 64
    assert added < args.head_min, "too many bytes per connection for the head sizes"
    template = head(args.head_max)
    starts = [rng.randint(args.head_min, args.head_max) - added for _ in range(args.conns)]
    socks = []
    for n in starts:
        s = connect(args)
        s.sendall(template[:n])
        socks.append(s)
    positions = list(starts)
    ctx = mp.get_context("fork")
    results = []
    cursor = 0
    for r in range(2 * rounds):
        sending = r % 2 == 1
        time.sleep(0.3)
        out_q = ctx.Queue()
        p = ctx.Process(target=probe, args=(args, args.seconds, out_q))
        cpu0, t0 = cpu_seconds(args.node_pid), time.monotonic()
        p.start()
        sent = 0
        pacer = Pacer(args.rate)
        while sent % 128 or p.is_alive():
            if not sending:
                time.sleep(0.05)
                continue
            i = cursor % len(socks)
            cursor += 1
            socks[i].send(template[positions[i]:positions[i] + 1])
            positions[i] += 1
            sent += 1
            pacer.wrote()
        lat, errors = out_q.get(timeout=args.timeout)
        p.join()
        cpu1, t1 = cpu_seconds(args.node_pid), time.monotonic()
        results.append({
            "sending": sending, "bytes": sent, "bytes_per_s": round(sent / (t1 - t0)),
            "calls": len(lat), "errors": errors, "p50_ms": pct(lat, 0.5),
            "p99_ms": pct(lat, 0.99), "node_cpu_s": round(cpu1 - cpu0, 3),
            "seconds": round(t1 - t0, 2),
        })
    for s in socks:
        s.close()
    quiet = [x for x in results if not x["sending"]]
    busy = [x for x in results if x["sending"]]
    ratios = [round(b["p99_ms"] / q["p99_ms"], 2) for q, b in zip(quiet, busy)]
    med = lambda v: sorted(v)[len(v) // 2]
    extra_cpu = sum(b["node_cpu_s"] / b["seconds"] - q["node_cpu_s"] / q["seconds"]
                    for q, b in zip(quiet, busy)) / rounds
    rate = sum(b["bytes_per_s"] for b in busy) / rounds
    return {
        "phase": "steady", "connections": len(socks),
        "head_start_bytes": [min(starts), max(starts)], "rounds": results,
        "p99_ratio_per_round": ratios, "p99_ratio_median": med(ratios),
        "p50_quiet_ms": med([q["p50_ms"] for q in quiet]),
        "p50_sending_ms": med([b["p50_ms"] for b in busy]),
        "node_cpu_share_added": round(extra_cpu, 3),
        "node_cpu_us_per_byte": round(extra_cpu * 1e6 / rate, 3) if rate else None,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("phase", choices=["whole", "steady"])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--http-port", type=int, required=True)
    p.add_argument("--node-pid", type=int, required=True)
    p.add_argument("--conns", type=int, default=10000)
    p.add_argument("--head-min", type=int, default=4096)
    p.add_argument("--head-max", type=int, default=8192)
    p.add_argument("--rate", type=float, default=20000, help="bytes/s over all connections")
    p.add_argument("--probe-rate", type=float, default=1000,
                   help="calls/s of the other client (sequential, paced)")
    p.add_argument("--seconds", type=float, default=3.0, help="per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--timeout", type=float, default=300.0)
    args = p.parse_args()
    raise_fd_limit()
    result = phase_whole(args) if args.phase == "whole" else phase_steady(args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
