"""Sequences (stateful models) and gRPC streaming, as Triton's sequence examples
call them with the unmodified `tritonclient` (simple_grpc_sequence_sync_infer_client,
simple_http_sequence_sync_infer_client, simple_grpc_sequence_stream_infer_client):
the same values, ids and checks, against `simple_sequence`
(bench/triton_examples/make_models.py); then what the examples do not show: Triton's
refusals, a sequence keeping to one slot, idle release and the bound on live
sequences (on `simple_sequence_bounded`, written by conftest.py), and errors on a
stream that goes on.
"""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from functools import partial
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(ROOT / "docs" / "tests"))
from docblocks import tagged_blocks  # noqa: E402 - the docs' own block reader

try:
    import numpy as np
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException
except (ImportError, RuntimeError) as e:  # pragma: no cover - a missing prerequisite
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        raise
    pytest.skip(f"tritonclient[http,grpc] is not installed ({e})", allow_module_level=True)

MODEL = "simple_sequence"
#: The examples' values: each sequence sends its first value with START, then these.
VALUES = [11, 7, 5, 3, 2, 0, 1]


@pytest.fixture(scope="module")
def http(node):
    with httpclient.InferenceServerClient(node.http) as c:
        yield c


@pytest.fixture(scope="module")
def grpc(node):
    assert node.grpc, "the node did not log a gRPC address"
    with grpcclient.InferenceServerClient(node.grpc) as c:
        yield c


def request(module, value: int):
    data = np.full(shape=[1, 1], fill_value=value, dtype=np.int32)
    inputs = [module.InferInput("INPUT", data.shape, "INT32")]
    inputs[0].set_data_from_numpy(data)
    return inputs, [module.InferRequestedOutput("OUTPUT")]


def expected(first: int, sign: int) -> list[int]:
    """What the examples check: the first value plus one (START), then each value."""
    return [first + 1] + [sign * v for v in VALUES]


def sequences() -> list[tuple[object, int, int]]:
    """The examples' three sequences: (id, first value, sign of the rest)."""
    return [(1000, 0, 1), (1001, 100, -1), (str(uuid.uuid4()), 20, -1)]


def sync_send(client, module, seq_id, first: int, sign: int) -> list[int]:
    values = [first] + [sign * v for v in VALUES]
    got = []
    for count, value in enumerate(values, start=1):
        inputs, outputs = request(module, value)
        result = client.infer(
            MODEL,
            inputs,
            outputs=outputs,
            sequence_id=seq_id,
            sequence_start=count == 1,
            sequence_end=count == len(values),
        )
        got.append(int(result.as_numpy("OUTPUT")[0][0]))
    return got


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_sync_sequence_examples(protocol, http, grpc):
    client, module = (http, httpclient) if protocol == "http" else (grpc, grpcclient)
    for seq_id, first, sign in sequences():
        assert sync_send(client, module, seq_id, first, sign) == expected(first, sign), seq_id


def test_the_stream_sequence_example(grpc):
    answers: queue.Queue = queue.Queue()
    grpc.start_stream(callback=partial(lambda q, result, error: q.put((result, error)), answers))
    try:
        runs = sequences()
        for seq_id, first, sign in runs:
            values = [first] + [sign * v for v in VALUES]
            for count, value in enumerate(values, start=1):
                inputs, outputs = request(grpcclient, value)
                grpc.async_stream_infer(
                    MODEL,
                    inputs,
                    outputs=outputs,
                    request_id=f"{seq_id}_{count}",
                    sequence_id=seq_id,
                    sequence_start=count == 1,
                    sequence_end=count == len(values),
                )
        got: dict[str, dict[int, int]] = {str(s): {} for s, _, _ in runs}
        for _ in range(len(runs) * (len(VALUES) + 1)):
            result, error = answers.get(timeout=30)
            assert error is None, error
            seq_id, count = result.get_response().id.rsplit("_", 1)
            got[seq_id][int(count)] = int(result.as_numpy("OUTPUT")[0][0])
    finally:
        grpc.stop_stream()
    for seq_id, first, sign in runs:
        answered = [got[str(seq_id)][c] for c in sorted(got[str(seq_id)])]
        assert answered == expected(first, sign), seq_id


def test_triton_refusals_in_its_words(http, grpc):
    inputs, outputs = request(httpclient, 1)
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        http.infer(MODEL, inputs, outputs=outputs, sequence_id=4242)
    with pytest.raises(InferenceServerException, match="non-zero or non-empty correlation ID"):
        http.infer(MODEL, inputs, outputs=outputs)
    inputs, outputs = request(grpcclient, 1)
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        grpc.infer(MODEL, inputs, outputs=outputs, sequence_id="never-started")
    # An ended sequence is gone: its id must START again.
    assert sync_send(grpc, grpcclient, 77, 5, 1) == expected(5, 1)
    with pytest.raises(InferenceServerException, match="must specify the START flag"):
        grpc.infer(MODEL, inputs, outputs=outputs, sequence_id=77)


def test_stream_errors_answer_their_request_and_the_stream_goes_on(grpc):
    answers: queue.Queue = queue.Queue()
    grpc.start_stream(callback=partial(lambda q, result, error: q.put((result, error)), answers))
    try:
        inputs, outputs = request(grpcclient, 3)
        grpc.async_stream_infer(MODEL, inputs, outputs=outputs, request_id="lost", sequence_id=31337)
        grpc.async_stream_infer(
            MODEL, inputs, outputs=outputs, request_id="fine", sequence_id=31338,
            sequence_start=True, sequence_end=True,
        )
        got = [answers.get(timeout=30) for _ in range(2)]
    finally:
        grpc.stop_stream()
    errors = [str(error) for result, error in got if error is not None]
    results = [result for result, error in got if error is None]
    assert len(errors) == 1 and "must specify the START flag" in errors[0], errors
    assert [r.get_response().id for r in results] == ["fine"]
    assert int(results[0].as_numpy("OUTPUT")[0][0]) == 4


def post(node, model: str, value: int, seq_id, start=False, end=False):
    """One call over HTTP/JSON: (status, body, the slot that ran it)."""
    body = {
        "parameters": {"sequence_id": seq_id, "sequence_start": start, "sequence_end": end},
        "inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [value]}],
    }
    req = urllib.request.Request(
        f"http://{node.http}/v2/models/{model}/infer",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.load(r), r.headers.get("X-Netaccel-Slot")
    except urllib.error.HTTPError as e:
        return e.code, json.load(e), None


def test_a_sequence_keeps_to_one_slot_and_sequences_spread(node, bounded_sequence):
    model = bounded_sequence[0]
    slots: dict[int, set] = {1: set(), 2: set()}
    for step in range(6):
        for seq_id in slots:
            status, body, slot = post(node, model, step, seq_id, start=step == 0, end=step == 5)
            assert status == 200, body
            assert body["outputs"][0]["data"] == [step + (step == 0)]
            slots[seq_id].add(slot)
    assert all(len(s) == 1 for s in slots.values()), slots
    assert slots[1] != slots[2], "two live sequences on two slots go one to each"


def test_idle_sequences_are_released_and_live_ones_bounded(node, bounded_sequence):
    model, idle_s, sequences_max = bounded_sequence
    for seq_id in range(100, 100 + sequences_max):
        assert post(node, model, 1, seq_id, start=True)[0] == 200
    status, body, _ = post(node, model, 1, 999, start=True)
    assert status == 503, body
    assert "max_sequences" in body["error"]
    time.sleep(idle_s * 2)
    # Idle past the bound: released, so a new sequence starts and an old one's next
    # call without START is refused.
    assert post(node, model, 1, 999, start=True)[0] == 200
    status, body, _ = post(node, model, 1, 100)
    assert status == 400 and "must specify the START flag" in body["error"], body
    assert post(node, model, 1, 999, end=True)[0] == 200


def reconfigure(node, slot: str, accelerator: str) -> None:
    req = urllib.request.Request(
        f"http://{node.http}/v1/slots/{slot}",
        data=json.dumps({"accelerator": accelerator}).encode(),
        method="PUT",
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200


def test_a_sequence_whose_slot_is_reconfigured_moves_to_another(node, bounded_sequence):
    model = bounded_sequence[0]
    status, body, first = post(node, model, 5, 777, start=True)
    assert status == 200, body
    reconfigure(node, first, "echo")
    try:
        status, body, moved = post(node, model, 6, 777)
        assert status == 200, body
        assert body["outputs"][0]["data"] == [6]
        assert moved != first, "the sequence left the slot that no longer hosts the model"
        status, body, _ = post(node, model, 7, 777, end=True)
        assert status == 200, body
    finally:
        reconfigure(node, first, model)


def test_the_oldest_strategy_batches_calls_of_different_sequences(grpc, http, oldest_sequence):
    """16 sequences of 2 calls on one stream: every answer right, and the STARTs,
    queued within the model's 20 ms delay, run in batches of up to 8."""
    answers: queue.Queue = queue.Queue()
    grpc.start_stream(callback=partial(lambda q, result, error: q.put((result, error)), answers))
    try:
        for step in range(2):
            for seq_id in range(500, 516):
                inputs, outputs = request(grpcclient, seq_id)
                grpc.async_stream_infer(
                    oldest_sequence, inputs, outputs=outputs, request_id=f"{seq_id}_{step}",
                    sequence_id=seq_id, sequence_start=step == 0, sequence_end=step == 1,
                )
        got = [answers.get(timeout=30) for _ in range(32)]
    finally:
        grpc.stop_stream()
    for result, error in got:
        assert error is None, str(error)
        seq_id, step = map(int, result.get_response().id.split("_"))
        assert int(result.as_numpy("OUTPUT")[0][0]) == seq_id + (step == 0)
    stats = http.get_inference_statistics(model_name=oldest_sequence)["model_stats"][0]
    sizes = {b["batch_size"] for b in stats["batch_stats"]}
    assert max(sizes) > 1 and max(sizes) <= 8, sizes
    assert http.get_model_config(oldest_sequence)["sequence_batching"]["oldest"] == {}


ACCUMULATOR = "simple_accumulator"


def sums(values):
    out, total = [], 0
    for v in values:
        total += v
        out.append(total)
    return out


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_implicit_state_gives_each_sequence_its_running_sum(protocol, http, grpc):
    client, module = (http, httpclient) if protocol == "http" else (grpc, grpcclient)
    runs = {71: [3, 4, 5, -2], "seventy-two": [10, 20, 30, 40]}
    got = {seq_id: [] for seq_id in runs}
    for step in range(4):  # the two sequences interleaved
        for seq_id, values in runs.items():
            inputs, _ = request(module, values[step])
            result = client.infer(
                ACCUMULATOR, inputs, sequence_id=seq_id,
                sequence_start=step == 0, sequence_end=step == 3,
            )
            got[seq_id].append(int(result.as_numpy("OUTPUT")[0][0]))
            assert result.as_numpy("STATE_OUT") is None, "the state is the node's"
    assert got == {seq_id: sums(values) for seq_id, values in runs.items()}


def test_implicit_state_on_a_stream_runs_each_sequence_in_order(grpc):
    """Two sequences of 12 calls each, all sent at once on one stream: each call
    reads the state the one before it left."""
    answers: queue.Queue = queue.Queue()
    runs = {81: list(range(1, 13)), 82: [(-1) ** i * i for i in range(12)]}
    grpc.start_stream(callback=partial(lambda q, result, error: q.put((result, error)), answers))
    try:
        for step in range(12):
            for seq_id, values in runs.items():
                inputs, outputs = request(grpcclient, values[step])
                grpc.async_stream_infer(
                    ACCUMULATOR, inputs, outputs=outputs, request_id=f"{seq_id}_{step}",
                    sequence_id=seq_id, sequence_start=step == 0, sequence_end=step == 11,
                )
        got = [answers.get(timeout=30) for _ in range(24)]
    finally:
        grpc.stop_stream()
    by_seq: dict[int, dict[int, int]] = {seq_id: {} for seq_id in runs}
    for result, error in got:
        assert error is None, str(error)
        seq_id, step = map(int, result.get_response().id.split("_"))
        by_seq[seq_id][step] = int(result.as_numpy("OUTPUT")[0][0])
    for seq_id, values in runs.items():
        assert [by_seq[seq_id][s] for s in range(12)] == sums(values), seq_id


def test_the_state_is_neither_sent_nor_requested(http):
    inputs, _ = request(httpclient, 1)
    with pytest.raises(InferenceServerException, match="has no output STATE_OUT"):
        http.infer(
            ACCUMULATOR, inputs, outputs=[httpclient.InferRequestedOutput("STATE_OUT")],
            sequence_id=90, sequence_start=True,
        )
    data = np.ones([2, 1], dtype=np.int32)
    two = httpclient.InferInput("INPUT", [2, 1], "INT32")
    two.set_data_from_numpy(data)
    with pytest.raises(InferenceServerException, match="carries one item"):
        http.infer(ACCUMULATOR, [two], sequence_id=91, sequence_start=True)
    metadata = http.get_model_metadata(ACCUMULATOR)
    assert [t["name"] for t in metadata["inputs"]] == ["INPUT"]
    assert [t["name"] for t in metadata["outputs"]] == ["OUTPUT"]


def test_config_shows_the_sequence_batching_and_hides_the_controls(http, grpc):
    config = http.get_model_config(MODEL)
    assert [i["name"] for i in config["input"]] == ["INPUT"]
    controls = config["sequence_batching"]["control_input"]
    assert [c["name"] for c in controls] == ["START", "READY"]
    assert controls[0]["control"][0]["kind"] == "CONTROL_SEQUENCE_START"
    metadata = grpc.get_model_metadata(MODEL)
    assert [i.name for i in metadata.inputs] == ["INPUT"]
    grpc_config = grpc.get_model_config(MODEL).config
    assert [i.name for i in grpc_config.input] == ["INPUT"]
    assert [c.name for c in grpc_config.sequence_batching.control_input] == ["START", "READY"]
    assert list(grpc_config.sequence_batching.control_input[0].control[0].int32_false_true) == [0, 1]


# docs/inference.md's "Sequences and streaming" recipes need the examples' models, so
# they are tagged `examples-recipe` (docs/tests runs `recipe` blocks against a node
# without models) and run here, each printing its `examples-output` block.
PAGE = ROOT / "docs" / "inference.md"
BLOCKS = tagged_blocks(PAGE)
PAGE_OUTPUTS = {b.name: b.text for b in BLOCKS if b.kind == "examples-output"}
PAGE_RECIPES = [b for b in BLOCKS if b.kind == "examples-recipe"]


def test_the_page_has_sequence_recipes():
    assert PAGE_RECIPES, "docs/inference.md lost its examples-recipe blocks"
    for b in PAGE_RECIPES:
        assert b.name.rsplit(" ", 1)[0] in PAGE_OUTPUTS, f"{PAGE}:{b.line}: no output"


@pytest.mark.parametrize("block", PAGE_RECIPES, ids=lambda b: b.name)
def test_page_recipe_prints_the_documented_output(node, block, tmp_path):
    script = tmp_path / "recipe.py"
    script.write_text(block.text)
    env = {**os.environ, "NETACCEL_NODE": node.url, "NETACCEL_GRPC": node.grpc or ""}
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout == PAGE_OUTPUTS[block.name.rsplit(" ", 1)[0]]
