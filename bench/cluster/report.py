#!/usr/bin/env python3
"""The tables of bench/cluster/run.sh, from its run directory (runs.tsv and the JSON
reports of netaccel-bench), as markdown on standard output.

runs.tsv has one record per line, tab-separated:

    capacity  ACCELERATOR  CALLS_PER_S
    level     LEVEL        FRACTION
    run       LEVEL  DEPLOYMENT  FUNCTION  ACCELERATOR  NODE|-  SLOT|-  RATE  JSON|-
    busy      LEVEL  DEPLOYMENT  NODE  UTILISATION

A function with no device (JSON `-`) offered RATE calls/s for the measured window like
the others, and none of them was processed: they count as sent and dropped.

Aggregate latency percentiles merge the functions' latency CDFs weighted by their
processed calls (netaccel-bench keeps 400 points of each CDF, so they are exact to
those points).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional


@dataclass
class Run:
    level: str
    deployment: str
    function: str
    accelerator: str
    node: Optional[str]
    rate: float
    sent: int
    ok: int
    p50_ns: Optional[int]
    p99_ns: Optional[int]
    utilisation: Optional[float]
    cdf: List[tuple]

    @property
    def dropped(self) -> int:
        return self.sent - self.ok


def load(run_dir: Path, duration_s: float):
    capacity: Dict[str, float] = {}
    fractions: Dict[str, float] = {}
    runs: List[Run] = []
    busy: Dict[tuple, Dict[str, float]] = {}
    for line in (run_dir / "runs.tsv").read_text().splitlines():
        f = line.split("\t")
        if f[0] == "capacity":
            capacity[f[1]] = float(f[2])
        elif f[0] == "level":
            fractions[f[1]] = float(f[2])
        elif f[0] == "busy":
            busy.setdefault((f[1], f[2]), {})[f[3]] = float(f[4])
        elif f[0] == "run":
            level, deployment, fn, accel, node, _slot, rate, js = f[1:9]
            rate = float(rate)
            if js == "-":
                runs.append(Run(level, deployment, fn, accel, None, rate, round(rate * duration_s), 0, None, None, None, []))
                continue
            s = json.loads((run_dir / js).read_text())["scenarios"][0]
            exec_mean = (s.get("server_exec") or {}).get("mean_ns") or 0.0
            runs.append(
                Run(
                    level,
                    deployment,
                    fn,
                    accel,
                    node,
                    rate,
                    s["sent"],
                    s["ok"],
                    s["latency"]["p50_ns"] if s["ok"] else None,
                    s["latency"]["p99_ns"] if s["ok"] else None,
                    s["ok"] * exec_mean / 1e9 / s["duration_s"],
                    [tuple(p) for p in s["cdf"]],
                )
            )
    return capacity, fractions, runs, busy


def merged_quantile(runs: List[Run], q: float) -> Optional[int]:
    """The q-quantile of all processed calls of `runs`, from their CDFs."""
    parts = [(r.ok, r.cdf) for r in runs if r.ok and r.cdf]
    total = sum(n for n, _ in parts)
    if not total:
        return None
    xs = sorted({x for _, cdf in parts for x, _ in cdf})

    def below(cdf, x):
        f = 0.0
        for lx, lf in cdf:
            if lx > x:
                break
            f = lf
        return f

    for x in xs:
        if sum(n * below(cdf, x) for n, cdf in parts) / total >= q - 1e-12:
            return x
    return xs[-1]


def ms(ns: Optional[int]) -> str:
    return "–" if ns is None else f"{ns / 1e6:.2f}"


def pct(a: int, b: int) -> str:
    return "–" if b == 0 else f"{100 * a / b:.2f} %"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--command", default="bench/cluster/run.sh")
    ap.add_argument("--machine", default="")
    ap.add_argument("--cores", default="")
    ap.add_argument("--commit", default="?")
    ap.add_argument("--settings", default="")
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--ratio-min", type=float, default=1.5)
    ap.add_argument("--drop-max-pct", type=float, default=1.0)
    a = ap.parse_args()
    capacity, fractions, runs, busy = load(a.run_dir, a.duration)
    out = []
    w = out.append
    w(f"Run of {a.run_dir.name.removeprefix('cluster-')}, `{a.command}`, commit {a.commit}.")
    w("")
    w(f"- machine: {a.machine}")
    w(f"- core split: {a.cores}")
    w(f"- settings: {a.settings}")
    w(
        "- a slot's capacity, closed loop, the three at once: "
        + ", ".join(f"{k} {v:.0f} calls/s" for k, v in sorted(capacity.items()))
    )
    w("")
    w("Aggregate (all five functions; the dedicated deployment serves three of them):")
    w("")
    w("| load | per function | deployment | offered calls/s | sent | processed | dropped | p50 ms | p99 ms | slot utilisation (mean of 3) | processed, shared ÷ dedicated |")
    w("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    ratios: Dict[str, float] = {}
    drops: Dict[str, float] = {}
    for level, fraction in fractions.items():
        processed = {}
        for dep in ("dedicated", "shared"):
            rs = [r for r in runs if r.level == level and r.deployment == dep]
            if not rs:
                continue
            sent, ok = sum(r.sent for r in rs), sum(r.ok for r in rs)
            processed[dep] = ok
            util = busy.get((level, dep), {})
            mean_util = sum(util.values()) / len(util) if util else None
            ratio = ""
            if dep == "shared" and processed.get("dedicated"):
                ratios[level] = ok / processed["dedicated"]
                ratio = f"{ratios[level]:.2f}"
            if dep == "shared":
                drops[level] = 100 * (sent - ok) / sent if sent else 0.0
            w(
                f"| {level} | {fraction:g} × capacity | {dep} | {sum(r.rate for r in rs):.0f} | {sent} | {ok} | "
                f"{pct(sent - ok, sent)} | {ms(merged_quantile(rs, 0.5))} | {ms(merged_quantile(rs, 0.99))} | "
                f"{'–' if mean_util is None else f'{mean_util:.2f}'} | {ratio} |"
            )
    w("")
    w("Per function (device: the node whose slot served it; utilisation: its calls × their mean execution time over the window):")
    w("")
    w("| load | function | accelerator | calls/s offered | dedicated: device | sent | processed | dropped | p50 ms | p99 ms | util | shared: device | sent | processed | dropped | p50 ms | p99 ms | util |")
    w("|---|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for level in fractions:
        fns = sorted({r.function for r in runs if r.level == level})
        for fn in fns:
            cells = []
            rate = accel = None
            for dep in ("dedicated", "shared"):
                r = next((r for r in runs if r.level == level and r.deployment == dep and r.function == fn), None)
                if r is None:
                    cells.append("| – " * 7)
                    continue
                rate, accel = r.rate, r.accelerator
                util = "–" if r.utilisation is None else f"{r.utilisation:.2f}"
                cells.append(
                    f"| {r.node or 'none'} | {r.sent} | {r.ok} | {pct(r.dropped, r.sent)} | {ms(r.p50_ns)} | {ms(r.p99_ns)} | {util} "
                )
            w(f"| {level} | {fn} | {accel} | {rate:.0f} " + "".join(cells) + "|")
    w("")
    w("Slot utilisation (busy seconds over the measured window, from each node's /metrics):")
    w("")
    nodes = sorted({n for u in busy.values() for n in u})
    w("| load | deployment | " + " | ".join(nodes) + " |")
    w("|---|---|" + "---:|" * len(nodes))
    for (level, dep), u in busy.items():
        w(f"| {level} | {dep} | " + " | ".join(f"{u.get(n, 0):.2f}" for n in nodes) + " |")
    w("")
    w("| criterion | measured | limit | result |")
    w("|---|---:|---:|---|")
    if "medium" in ratios:
        r = ratios["medium"]
        w(f"| medium load: processed, shared ÷ dedicated | {r:.2f} | ≥ {a.ratio_min:g} | {'PASS' if r >= a.ratio_min else 'FAIL'} |")
    if "medium" in drops:
        d = drops["medium"]
        w(f"| medium load: dropped, shared | {d:.2f} % | ≤ {a.drop_max_pct:g} % | {'PASS' if d <= a.drop_max_pct else 'FAIL'} |")
    print("\n".join(out))


if __name__ == "__main__":
    main()
