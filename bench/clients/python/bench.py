"""The Python client's program of bench/clients/run.sh: 64-byte echo calls on one
connection, one at a time (p50), then --inflight submitted at once (calls/s)."""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "clients" / "python"))

from netaccel import Client  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--node", required=True)
p.add_argument("--seconds", type=float, default=2.0)
p.add_argument("--size", type=int, default=64)
p.add_argument("--inflight", type=int, default=32)
a = p.parse_args()
payload = b"x" * a.size
with Client.from_addr(a.node) as c:
    lat = []
    start = time.perf_counter()
    while time.perf_counter() - start < a.seconds:
        t = time.perf_counter()
        c.call("echo", payload)
        lat.append(time.perf_counter() - t)
    lat.sort()
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < a.seconds or c.in_flight:
        while c.in_flight < a.inflight and time.perf_counter() - start < a.seconds:
            c.submit("echo", payload)
        c.result()
        done += 1
    rate = done / (time.perf_counter() - start)
print(json.dumps({"client": "python", "sync_p50_us": round(lat[len(lat) // 2] * 1e6, 2),
                  "sync_calls": len(lat), "pipelined_calls_per_s": round(rate)}))
