"""Cancellation as Triton's clients do it, with the unmodified `tritonclient`: a node
whose one `echo` slot holds each call a second (`simulated_exec_us`), one call
running, more queued behind it; the clients cancel the queued ones — gRPC
`async_infer(...).cancel()`, an `aio` task cancelled — and the queue empties at once
without running them (`netaccel_slot_cancelled_calls_total{stage="queued"}`), while
the call in progress and a later client's call are answered. The Rust black-box test
(crates/node/tests/cancellation.rs) covers closed HTTP connections and gRPC streams.
"""
from __future__ import annotations

import asyncio
import json
import os
import queue
import sys
import time
import urllib.request

import pytest

try:
    import numpy as np
    import tritonclient.grpc as grpcclient
    import tritonclient.grpc.aio as aioclient
except (ImportError, RuntimeError) as e:  # pragma: no cover - a missing prerequisite
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        raise
    pytest.skip(f"tritonclient[grpc] is not installed ({e})", allow_module_level=True)

# The documentation tests' node starter, which this folder's conftest.py loads.
docs_conftest = sys.modules["netaccel_docs_conftest"]

HOLD_US = 1_000_000
LEAVING = 4
QUEUED = 'netaccel_slot_cancelled_calls_total{slot="0",stage="queued"}'
RAN = 'netaccel_slot_calls_total{slot="0"}'


@pytest.fixture()
def held_node(tmp_path):
    config = f'simulated_exec_us = {HOLD_US}\n[[slots]]\naccelerator = "echo"\n'
    with docs_conftest.running_node(tmp_path, config) as n:
        yield n


def metric(node, name: str) -> float:
    text = urllib.request.urlopen(f"{node.url}/metrics").read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"no metric {name}")


def slot(node) -> dict:
    return json.loads(urllib.request.urlopen(f"{node.url}/v1/slots/0").read())


def wait_for(what: str, ok, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not ok():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


def echo_input(module, value: int):
    inp = module.InferInput("INPUT0", [1], "UINT8")
    inp.set_data_from_numpy(np.array([value], dtype=np.uint8))
    return [inp]


def busy_with(node, queued: int) -> None:
    wait_for(
        f"slot busy with {queued} queued: {slot(node)}",
        lambda: (s := slot(node))["state"] == "busy" and s["queue_depth"] == queued,
    )


def withdrawn(node, count: int) -> None:
    wait_for(f"{count} calls withdrawn", lambda: metric(node, QUEUED) >= count)
    assert metric(node, QUEUED) == count
    s = slot(node)
    assert s["queue_depth"] == 0, s
    assert s["state"] == "busy", f"withdrawn only once the slot was free: {s}"


def test_async_infer_cancel_takes_queued_calls_out(held_node):
    answers: queue.Queue = queue.Queue()

    def answered(result, error) -> None:
        answers.put((result, error))

    with grpcclient.InferenceServerClient(held_node.grpc) as client:
        client.async_infer("echo", echo_input(grpcclient, 1), answered)
        busy_with(held_node, 0)
        leaving = [
            client.async_infer("echo", echo_input(grpcclient, 10 + i), answered)
            for i in range(LEAVING)
        ]
        busy_with(held_node, LEAVING)
        for ctx in leaving:
            ctx.cancel()
        withdrawn(held_node, LEAVING)
        later = client.infer("echo", echo_input(grpcclient, 7)).as_numpy("OUTPUT0")
        assert list(later) == [7]
        results = [answers.get(timeout=10) for _ in range(LEAVING + 1)]
    ran = [r.as_numpy("OUTPUT0").tolist() for r, e in results if e is None]
    assert ran == [[1]], "only the call in progress is answered with an output"
    assert all("CANCELLED" in str(e) for r, e in results if e is not None)
    assert metric(held_node, RAN) == 2


def test_cancelling_aio_tasks_takes_their_calls_out(held_node):
    async def run() -> None:
        async with aioclient.InferenceServerClient(held_node.grpc) as client:
            holder = asyncio.create_task(client.infer("echo", echo_input(aioclient, 1)))
            await asyncio.to_thread(busy_with, held_node, 0)
            tasks = [
                asyncio.create_task(client.infer("echo", echo_input(aioclient, 10 + i)))
                for i in range(LEAVING)
            ]
            await asyncio.to_thread(busy_with, held_node, LEAVING)
            for t in tasks:
                t.cancel()
            await asyncio.to_thread(withdrawn, held_node, LEAVING)
            assert (await holder).as_numpy("OUTPUT0").tolist() == [1]
            for t in tasks:
                with pytest.raises(asyncio.CancelledError):
                    await t

    asyncio.run(run())
    assert metric(held_node, RAN) == 1
