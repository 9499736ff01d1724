#!/usr/bin/env python3
"""Helpers of bench/sim/validate.sh: figures of a real node's run out of
netaccel-bench's JSON reports, the network's calibration, the simulator's scenario,
and the side-by-side table.

  validate.py merged FILE...           p50 µs, p99 µs, calls/s of the streams together
  validate.py calibrate DEVICE_US FILE...  latency µs, Gbit/s, jitter median µs, sigma
  validate.py scenario DEVICE_US LOAD LATENCY_US GBPS JITTER_US SIGMA SECONDS STREAM...
  validate.py windows SIM SCENARIO WARMUP_S DURATION_S N OUT
                                       the simulator's p50 µs, p99 µs, calls/s
  validate.py table ROWS_TSV           the markdown table (and ratios) of the rows
  validate.py chart ROWS_TSV LINK_ROWS_TSV SVG   measured against simulated p50, p99

A run is several netaccel-bench processes (one per stream: accelerator, tenant,
size), each open loop with Poisson arrivals. Their latencies are merged by their
CDFs, weighted by the calls each answered, so the percentiles are those of all the
calls together, as the simulator reports them.
"""
import json
import math
import sys


def load(paths):
    """The one scenario of each report (netaccel-bench run --json)."""
    reports = [json.load(open(p))["scenarios"] for p in paths]
    assert all(len(r) == 1 for r in reports), "one run per report"
    return [r[0] for r in reports]


def cdf_at(cdf, x):
    """Fraction of a stream's calls at or below x ns (linear between points)."""
    if not cdf or x < cdf[0][0]:
        return 0.0
    lo = 0
    hi = len(cdf) - 1
    if x >= cdf[hi][0]:
        return 1.0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if cdf[mid][0] <= x:
            lo = mid
        else:
            hi = mid
    (x0, f0), (x1, f1) = cdf[lo], cdf[hi]
    return f0 + (f1 - f0) * (x - x0) / max(x1 - x0, 1)


def merged_quantile(reports, q):
    """The latency (ns) at quantile q of all the reports' calls together."""
    total = sum(r["ok"] for r in reports)
    lo = 0.0
    hi = float(max(r["cdf"][-1][0] for r in reports if r["cdf"]))
    for _ in range(60):
        mid = (lo + hi) / 2
        below = sum(r["ok"] * cdf_at(r["cdf"], mid) for r in reports) / total
        if below >= q:
            hi = mid
        else:
            lo = mid
    return hi


def merged(paths):
    reports = load(paths)
    assert all(r["ok"] > 0 for r in reports), "every stream answered calls"
    p50 = merged_quantile(reports, 0.5) / 1000
    p99 = merged_quantile(reports, 0.99) / 1000
    rate = sum(r["calls_per_s"] for r in reports)
    errors = sum(sum(r["errors"].values()) for r in reports)
    print(f"{p50:.1f}\t{p99:.1f}\t{rate:.1f}\t{errors}")


def calibrate(device_us, paths):
    """Fits each stream's p50 at light load, less the device time, to
    2 × latency + bytes × 8 / bandwidth (the simulator's link: the latency each way,
    the bytes once, on the way in). A slope that is not positive: no bandwidth term.
    Also the spread of the time outside the node's queue and device (the reports'
    `network_protocol`) as a lognormal's sigma, fitted to its p90 and p99 against
    its p50."""
    reports = load(paths)
    points = [(r["size_bytes"], r["latency"]["p50_ns"] / 1000 - device_us) for r in reports]
    n = len(points)
    mx = sum(b for b, _ in points) / n
    my = sum(o for _, o in points) / n
    sxx = sum((b - mx) ** 2 for b, _ in points)
    slope = sum((b - mx) * (o - my) for b, o in points) / sxx if sxx > 0 else 0.0
    if slope <= 0:
        slope = 0.0
    intercept = max(my - slope * mx, 0.0)
    # slope is µs per byte; bandwidth in Gbit/s is bits per ns.
    gbps = 8.0 / (slope * 1000) if slope > 0 else 0.0
    # ln(q / p50) = sigma × z at p90 and p99, least squares through the origin over
    # every stream's two points.
    z = {"p90_ns": 1.2816, "p99_ns": 2.3263}
    num = den = 0.0
    for r in reports:
        np = r["network_protocol"]
        for q, zq in z.items():
            num += zq * math.log(max(np[q] / np["p50_ns"], 1.0))
            den += zq * zq
    sigma = num / den
    print(f"{intercept / 2:.2f}\t{gbps:.3f}\t{intercept:.2f}\t{sigma:.3f}")


def scenario(device_us, load_share, latency_us, gbps, jitter_us, sigma, seconds, streams):
    """The simulator's scenario of one load level: every stream a Poisson client at
    its share of the load on its accelerator's slot. A jitter median above zero adds
    a lognormal delay to every answer."""
    device_us = float(device_us)
    accels = []
    for s in streams:
        a = s.split(":")[0]
        if a not in accels:
            accels.append(a)
    per_slot = float(load_share) / (device_us / 1e6)
    out = [
        f'name = "validate-{int(round(float(load_share) * 100))}"',
        f"duration_s = {float(seconds)}",
        "seed = 1",
        "[node]",
        "slots = [" + ", ".join(f'{{ accelerator = "{a}" }}' for a in accels) + "]",
        "[network]",
        f"latency_us = {float(latency_us)}",
        f"bandwidth_gbps = {float(gbps)}",
    ]
    if float(jitter_us) > 0:
        out.append(
            f'jitter = {{ kind = "lognormal", median_us = {float(jitter_us)}, sigma = {float(sigma)} }}'
        )
    for a in accels:
        out += [
            "[[accelerators]]",
            f'name = "{a}"',
            f'service = {{ kind = "constant", us = {device_us} }}',
        ]
    for s in streams:
        a, tenant, size = s.split(":")
        share = sum(1 for t in streams if t.split(":")[0] == a)
        out += [
            "[[clients]]",
            'kind = "poisson"',
            f"rate_per_s = {per_slot / share}",
            f'tenant = "{tenant}"',
            f'mix = [{{ accelerator = "{a}", bytes = {size} }}]',
        ]
    print("\n".join(out))


def windows(sim, scenario_path, warmup_s, duration_s, n, out):
    """Runs the scenario N times (seeds 1..N) for the measurement's warm-up and
    window, and prints the medians over runs of each window's p50 and p99 (calls
    issued after the warm-up, answered OK) and calls/s: the figures a measurement of
    that length gives, whose p99 is lower and more spread than the steady state's."""
    import csv
    import statistics
    import subprocess

    warm_ns = float(warmup_s) * 1e9
    p50s, p99s, rates = [], [], []
    name = None
    for seed in range(1, int(n) + 1):
        subprocess.run(
            [sim, "run", scenario_path, "--out", out, "--seed", str(seed)],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if name is None:
            name = json.load(open(f"{out}/" + scenario_path.rsplit("/", 1)[-1].replace(".toml", ".summary.json")))["name"]
        rows = csv.DictReader(open(f"{out}/{name}.calls.csv"))
        lat = sorted(
            int(r["reply_ns"]) - int(r["issued_ns"])
            for r in rows
            if r["outcome"] == "ok" and int(r["issued_ns"]) >= warm_ns
        )
        assert lat, "the window has calls"
        p50s.append(lat[(len(lat) - 1) // 2] / 1000)
        p99s.append(lat[min(len(lat) - 1, int(0.99 * len(lat)))] / 1000)
        rates.append(len(lat) / float(duration_s))
    med = statistics.median
    print(f"{med(p50s):.1f}\t{med(p99s):.1f}\t{med(rates):.1f}")


def table(rows_path):
    """Rows: load, then measured p50 p99 calls/s and simulated p50 p99 calls/s."""
    print()
    print("| load | measured p50 µs | simulated p50 µs | ratio | measured p99 µs | simulated p99 µs | ratio | measured calls/s | simulated calls/s | ratio |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for line in open(rows_path):
        f = line.split()
        load_share, m50, m99, mr, s50, s99, sr = f[0], *map(float, f[1:7])
        print(
            f"| {load_share} % | {m50:.0f} | {s50:.0f} | {s50 / m50:.3f} | {m99:.0f} | {s99:.0f} | "
            f"{s99 / m99:.3f} | {mr:.0f} | {sr:.0f} | {sr / mr:.3f} |"
        )


def chart(rows_path, link_rows_path, svg_path):
    """Latency against load: measured (solid), simulated with the link and jitter
    (dashed) and with the link alone (dotted), p50 and p99."""
    rows = [line.split() for line in open(rows_path) if line.strip()]
    link = [line.split() for line in open(link_rows_path) if line.strip()]
    loads = [float(r[0]) for r in rows]
    series = [
        ("measured p50", [float(r[1]) for r in rows], "#1f77b4", ""),
        ("sim p50, jitter", [float(r[4]) for r in rows], "#1f77b4", "6 4"),
        ("sim p50, link", [float(r[4]) for r in link], "#1f77b4", "2 3"),
        ("measured p99", [float(r[2]) for r in rows], "#d62728", ""),
        ("sim p99, jitter", [float(r[5]) for r in rows], "#d62728", "6 4"),
        ("sim p99, link", [float(r[5]) for r in link], "#d62728", "2 3"),
    ]
    w, h, left, right, top, bottom = 640, 400, 70, 170, 40, 50
    ymax = max(max(v) for _, v, _, _ in series) * 1.1 / 1000
    x = lambda l: left + (l - 0) / 100 * (w - left - right)
    y = lambda us: h - bottom - us / 1000 / ymax * (h - top - bottom)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<text x="{w / 2 - 60}" y="20" font-size="14">latency against load: real node and simulator</text>',
        f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>',
        f'<text x="{(left + w - right) / 2 - 60}" y="{h - 12}">load (% of each slot)</text>',
        f'<text x="14" y="{top - 10}">latency ms</text>',
    ]
    for l in range(0, 101, 10):
        out.append(f'<text x="{x(l) - 8}" y="{h - bottom + 16}">{l}</text>')
    steps = 5
    for i in range(steps + 1):
        v = ymax * i / steps
        out.append(f'<text x="{left - 40}" y="{y(v * 1000) + 4}">{v:.1f}</text>')
        out.append(f'<line x1="{left}" y1="{y(v * 1000)}" x2="{w - right}" y2="{y(v * 1000)}" stroke="#ddd"/>')
    for i, (name, values, colour, dash) in enumerate(series):
        pts = " ".join(f"{x(l):.1f},{y(v):.1f}" for l, v in zip(loads, values))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}"/>')
        for l, v in zip(loads, values):
            out.append(f'<circle cx="{x(l):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}"/>')
        ly = top + 20 * i
        out.append(f'<line x1="{w - right + 10}" y1="{ly}" x2="{w - right + 40}" y2="{ly}" stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}"/>')
        out.append(f'<text x="{w - right + 46}" y="{ly + 4}">{name}</text>')
    out.append("</svg>")
    open(svg_path, "w").write("\n".join(out) + "\n")


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "merged":
        merged(args)
    elif cmd == "calibrate":
        calibrate(float(args[0]), args[1:])
    elif cmd == "scenario":
        scenario(*args[:7], args[7:])
    elif cmd == "windows":
        windows(*args[:6])
    elif cmd == "table":
        table(args[0])
    elif cmd == "chart":
        chart(args[0], args[1], args[2])
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
