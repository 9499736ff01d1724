#!/usr/bin/env python3
"""onnxruntime in process, one thread: the floor bench/cnn compares the node with.

Usage: ort_inproc.py MODEL.onnx BATCH CALLS

Runs CALLS calls of BATCH images one after the other (after a warm-up of CALLS/10)
with one intra-op and one inter-op thread, sequential execution, all graph
optimisations; prints one JSON line with calls/s and the p50/p99 of one call in µs.
The input is netaccel-bench's payload (lower-case letters read as float32), so both
compute on the same bytes. A call's time includes the Python binding's own cost of
session.run (a few µs), which a C++ caller would not pay: the floor is slightly high.
"""

import json
import sys
import time

import numpy as np
import onnxruntime as ort


def main() -> None:
    path, batch, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    letters = b"abcdefghijklmnopqrstuvwxyz"
    size = batch * 64 * 4
    raw = (letters * (size // len(letters) + 1))[:size]
    x = np.frombuffer(raw, dtype=np.float32).reshape(batch, 1, 8, 8)
    feed = {"image": x}
    for _ in range(calls // 10):
        session.run(None, feed)
    took = np.empty(calls, dtype=np.int64)
    start = time.perf_counter_ns()
    for i in range(calls):
        t = time.perf_counter_ns()
        session.run(None, feed)
        took[i] = time.perf_counter_ns() - t
    secs = (time.perf_counter_ns() - start) / 1e9
    took.sort()
    pct = lambda p: took[int((calls - 1) * p)] / 1000.0  # noqa: E731
    print(json.dumps({
        "engine": "onnxruntime",
        "batch": batch,
        "calls": calls,
        "calls_per_s": round(calls / secs, 1),
        "p50_us": round(pct(0.5), 2),
        "p99_us": round(pct(0.99), 2),
    }))


if __name__ == "__main__":
    main()
