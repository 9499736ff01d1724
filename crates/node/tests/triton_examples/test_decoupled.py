"""A decoupled model on a gRPC stream, as Triton's simple_grpc_custom_repeat example
calls it with the unmodified `tritonclient`: `repeat_int32`
(bench/triton_examples/make_models.py) answers one request with 10 responses, each
one slice of its outputs, the last flagged final (or an empty final response when the
client asks for one); ModelInfer and HTTP refuse it in Triton's words.
"""
from __future__ import annotations

import os
import queue
from functools import partial

import pytest

try:
    import numpy as np
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException
except (ImportError, RuntimeError) as e:  # pragma: no cover - a missing prerequisite
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        raise
    pytest.skip(f"tritonclient[http,grpc] is not installed ({e})", allow_module_level=True)

MODEL = "repeat_int32"
COUNT = 10


def inputs(module):
    tensors = [
        (module.InferInput("IN", [COUNT], "INT32"), np.arange(100, 100 + COUNT, dtype=np.int32)),
        (module.InferInput("DELAY", [COUNT], "UINT32"), np.ones([COUNT], dtype=np.uint32)),
        (module.InferInput("WAIT", [1], "UINT32"), np.array([1], dtype=np.uint32)),
    ]
    for tensor, data in tensors:
        tensor.set_data_from_numpy(data)
    return [t for t, _ in tensors]


@pytest.mark.parametrize("empty_final", [False, True])
def test_one_request_gets_its_responses_then_the_final_flag(node, empty_final):
    answers: queue.Queue = queue.Queue()
    with grpcclient.InferenceServerClient(node.grpc) as client:
        client.start_stream(callback=partial(lambda q, result, error: q.put((result, error)), answers))
        try:
            client.async_stream_infer(
                MODEL, inputs(grpcclient), request_id="r", enable_empty_final_response=empty_final
            )
            got = [answers.get(timeout=30) for _ in range(COUNT + int(empty_final))]
        finally:
            client.stop_stream()
    assert all(error is None for _, error in got), [str(e) for _, e in got]
    responses = [result.get_response() for result, _ in got]
    assert all(r.id == "r" for r in responses)
    finals = [r.parameters["triton_final_response"].bool_param for r in responses]
    assert finals == [False] * (len(responses) - 1) + [True]
    data = [result for result, _ in got[:COUNT]]
    assert [int(r.as_numpy("OUT")[0]) for r in data] == list(range(100, 100 + COUNT))
    assert [int(r.as_numpy("IDX")[0]) for r in data] == list(range(COUNT))
    assert all(r.as_numpy("OUT").shape == (1,) for r in data)
    if empty_final:
        assert not responses[-1].outputs


def test_unary_calls_are_refused_in_tritons_words(node):
    with grpcclient.InferenceServerClient(node.grpc) as client:
        with pytest.raises(InferenceServerException, match="doesn't support models with decoupled"):
            client.infer(MODEL, inputs(grpcclient))
    with httpclient.InferenceServerClient(node.http) as client:
        with pytest.raises(InferenceServerException, match="doesn't support models with decoupled"):
            client.infer(MODEL, inputs(httpclient))
