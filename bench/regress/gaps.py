#!/usr/bin/env python3
"""The gaps of a bench/regress run, base build against working tree.

Usage: gaps.py RUN_DIR PASSES EXPERIMENT...

Reads RUN_DIR/EXPERIMENT-BUILD-passN.txt (the experiments' own reports, as
bench/regress/run.sh keeps them) and prints one Markdown table: for each criterion an
experiment decides (its rows ending in PASS or FAIL: the node's gap to its floor, the
median of the experiment's per-round gaps, or a ratio), the median over passes for
each build, and the median over passes of the per-pass difference tree - base. For
bench/http it adds the node's CPU per request at the fixed rate over the C responder's,
from the server table. Prints "-" where a build's run gave no figure.
"""

import re
import statistics
import sys

VALUE = re.compile(r"^[+\-−]?[\d.,]+( µs| ?x| ×)?$")
NUMBER = re.compile(r"[+\-−]?\d+(?:\.\d+)?")


def number(text):
    """The first number in a table cell ("+1.5 µs", "1.10", "−0.8 µs"), or None."""
    m = NUMBER.search(text.replace(",", "").replace("−", "-"))
    return float(m.group()) if m else None


def cells(line):
    return [c.strip() for c in line.strip().strip("|").split("|")]


def criteria(text):
    """{criterion: measured} from the rows that end in a verdict."""
    found = {}
    for line in text.splitlines():
        if not line.startswith("|"):
            continue
        row = cells(line)
        if len(row) < 4 or row[-1].split(" ")[0] not in ("PASS", "FAIL", "-"):
            continue
        key = " / ".join(c for c in row[:-3] if not VALUE.match(c))
        value = number(row[-3])
        if value is not None:
            found[key] = value
    found.update(cpu_ratio(text))
    return found


def cpu_ratio(text):
    """bench/http: the node's CPU per request at the fixed rate ÷ the C responder's."""
    header, rows = None, {}
    for line in text.splitlines():
        if line.startswith("| server |"):
            header = cells(line)
        elif header and line.startswith("|") and not line.startswith("|---"):
            row = cells(line)
            rows.setdefault(row[0], row)
    if not header:
        return {}
    column = next((i for i, h in enumerate(header) if "µs/req @" in h), None)
    node, c = rows.get("netaccel-node"), rows.get("C epoll responder")
    if column is None or not node or not c:
        return {}
    mine, floor = number(node[column]), number(c[column])
    if not mine or not floor:
        return {}
    return {f"{header[column]}: node ÷ C responder": mine / floor}


def main():
    run_dir, passes, experiments = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    print("| experiment | criterion | base (median over passes) | tree | tree − base (median of per-pass differences) |")
    print("|---|---|---:|---:|---:|")
    for experiment in experiments:
        runs = {}
        for build in ("base", "tree"):
            for p in range(1, passes + 1):
                path = f"{run_dir}/{experiment}-{build}-pass{p}.txt"
                try:
                    with open(path, encoding="utf-8") as f:
                        runs[build, p] = criteria(f.read())
                except FileNotFoundError:
                    runs[build, p] = {}
        keys = []
        for found in runs.values():
            keys += [k for k in found if k not in keys]
        for key in keys:
            per = {b: [runs[b, p][key] for p in range(1, passes + 1) if key in runs[b, p]]
                   for b in ("base", "tree")}
            diffs = [runs["tree", p][key] - runs["base", p][key]
                     for p in range(1, passes + 1)
                     if key in runs["tree", p] and key in runs["base", p]]
            shown = [f"{statistics.median(v):.2f}" if v else "-" for v in (per["base"], per["tree"])]
            diff = f"{statistics.median(diffs):+.2f}" if diffs else "-"
            print(f"| {experiment} | {key} | {shown[0]} | {shown[1]} | {diff} |")


if __name__ == "__main__":
    main()
