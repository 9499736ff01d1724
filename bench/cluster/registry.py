#!/usr/bin/env python3
"""The registry calls bench/cluster/run.sh makes, as one-line commands (standard library only).

    registry.py URL wait-nodes N [TIMEOUT_S]   until N nodes are ready, each slot idle
    registry.py URL settle [TIMEOUT_S]          until every slot's utilisation is below 0.05
    registry.py URL create FUNCTION ACCELERATOR [NODE]
                                                creates the function with one instance
                                                (pinned to NODE when given) and prints
                                                its binding: node, device, slot, http
    registry.py URL delete FUNCTION             deletes it (absent is fine)
    registry.py URL slots                       prints node, slot, accelerator, instances

Every wait polls until a deadline and fails with what it last saw; nothing sleeps a
fixed time and hopes.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request


def call(url: str, method: str = "GET", body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read()
            return r.status, (json.loads(text) if text else None)
    except urllib.error.HTTPError as e:
        text = e.read()
        try:
            return e.code, json.loads(text)
        except ValueError:
            return e.code, text.decode(errors="replace")


def slots(base: str):
    status, nodes = call(base + "/v1/nodes")
    if status != 200:
        raise SystemExit(f"GET /v1/nodes answered {status}: {nodes}")
    for n in nodes:
        for d in n["devices"]:
            for s in d["slots"]:
                yield n, d, s


def wait(what: str, timeout_s: float, check) -> None:
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        ok, last = check()
        if ok:
            return
        time.sleep(0.2)
    raise SystemExit(f"{what} not reached within {timeout_s} s; last seen: {last}")


def main(argv) -> None:
    if len(argv) < 3:
        raise SystemExit(__doc__)
    base, cmd, args = argv[1].rstrip("/"), argv[2], argv[3:]
    if cmd == "wait-nodes":
        want, timeout_s = int(args[0]), float(args[1]) if len(args) > 1 else 30

        def ready():
            status, nodes = call(base + "/v1/nodes")
            names = sorted(n["name"] for n in nodes if n["state"] == "ready") if status == 200 else []
            return len(names) >= want, names

        wait(f"{want} ready nodes", timeout_s, ready)
    elif cmd == "settle":
        timeout_s = float(args[0]) if args else 30

        def idle():
            busy = [(n["name"], s["id"], s["utilization"]) for n, _, s in slots(base) if s["utilization"] >= 0.05]
            return not busy, busy

        wait("idle slots", timeout_s, idle)
    elif cmd == "create":
        name, accel = args[0], args[1]
        query = {"node": args[2]} if len(args) > 2 else {}
        status, doc = call(f"{base}/v1/functions/{name}", "PUT", {"accelerator": accel, "query": query, "instances": 1})
        if status != 200:
            raise SystemExit(f"creating {name}: {status} {doc}")
        inst = doc["instances"][0]
        if inst["slot"] is None:
            raise SystemExit(f"{name}: no slot for its instance: {doc}")
        print(inst["node"], inst["device"], inst["slot"], inst["http"])
    elif cmd == "delete":
        status, doc = call(f"{base}/v1/functions/{args[0]}", "DELETE")
        if status not in (204, 404):
            raise SystemExit(f"deleting {args[0]}: {status} {doc}")
    elif cmd == "slots":
        for n, d, s in slots(base):
            print(n["name"], d["id"], s["id"], s["accelerator"], ",".join(s["instances"]) or "-")
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
