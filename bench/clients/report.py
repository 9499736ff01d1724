"""The table of bench/clients/run.sh from its JSON lines (one per client per round):
per client the medians over rounds of sync calls/s, sync p50 and pipelined calls/s
(with their range when there are several rounds), and the medians of the per-round
ratios to the Rust client (p50: the difference in µs). Not for measuring: run.sh does.

Usage: report.py LINES SECONDS INFLIGHT SIZE ROUNDS
"""

import json
import sys
from statistics import median


def fmt_range(values, spec):
    mid = format(median(values), spec)
    if len(values) == 1:
        return mid
    return f"{mid} ({format(min(values), spec)}–{format(max(values), spec)})"


def main():
    path, seconds, inflight, size, rounds = sys.argv[1:6]
    lines = [json.loads(l) for l in open(path) if l.strip()]
    clients = list(dict.fromkeys(l["client"] for l in lines))
    runs = {c: [l for l in lines if l["client"] == c and not l.get("not_built")] for c in clients}
    rust = {l["round"]: l for l in runs.get("rust", [])}
    seconds = float(seconds)

    def sync_rate(l):
        return l["sync_calls"] / seconds

    print(f"RAC clients, {size} B echo, 1 connection, {seconds:g} s per measurement, "
          f"{inflight} in flight, {rounds} round(s); medians (range)\n")
    print("| client | sync calls/s | vs Rust | sync p50 (µs) | vs Rust | pipelined calls/s | vs Rust | allocated/call |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for c in clients:
        ls = runs[c]
        if not ls:
            print(f"| {c} | not built | | | | | | |")
            continue
        paired = [(l, rust[l["round"]]) for l in ls if l["round"] in rust]
        sync_ratio = median(sync_rate(l) / sync_rate(r) for l, r in paired) if paired else float("nan")
        p50_diff = median(l["sync_p50_us"] - r["sync_p50_us"] for l, r in paired) if paired else float("nan")
        pipe_ratio = (median(l["pipelined_calls_per_s"] / r["pipelined_calls_per_s"] for l, r in paired)
                      if paired else float("nan"))
        # What the language can show: Go counts allocations, Java bytes allocated.
        allocs = [l["allocs_per_call"] for l in ls if l.get("allocs_per_call") is not None]
        alloc_bytes = [l["allocated_bytes_per_call"] for l in ls if l.get("allocated_bytes_per_call") is not None]
        shown = (format(median(allocs), ".1f") if allocs
                 else f"{median(alloc_bytes):,.0f} B" if alloc_bytes else "")
        print(f"| {c} | {fmt_range([sync_rate(l) for l in ls], ',.0f')} | {sync_ratio:.2f}x "
              f"| {fmt_range([l['sync_p50_us'] for l in ls], '.1f')} | {p50_diff:+.1f} µs "
              f"| {fmt_range([l['pipelined_calls_per_s'] for l in ls], ',.0f')} | {pipe_ratio:.2f}x "
              f"| {shown} |")


if __name__ == "__main__":
    main()
