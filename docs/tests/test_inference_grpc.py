"""docs/inference.md, gRPC: the Open Inference Protocol's GRPCInferenceService on the
node's gRPC port, driven by the unmodified `tritonclient[grpc]` from PyPI.

Every built-in is inferred over gRPC (raw tensors, as tritonclient sends them) and the
output must equal what `/v1/fn` answers for the same input and params. Malformed
requests (sent with the protocol's own messages, which tritonclient exposes, so that
the client's checks do not stop them first) must get the protocol's status codes, and
the node must keep serving.
"""
from __future__ import annotations

import os
import re

import pytest

try:
    import grpc
    import numpy as np
    import tritonclient.grpc as triton
    from tritonclient.grpc import service_pb2, service_pb2_grpc
    from tritonclient.utils import InferenceServerException
except (ImportError, RuntimeError) as e:  # pragma: no cover - a missing prerequisite
    if os.environ.get("CI") == "true":
        raise
    pytest.skip(f"tritonclient[grpc] is not installed ({e})", allow_module_level=True)

from test_inference import CASES, DTYPES, v1_call


@pytest.fixture(scope="module")
def client(node):
    assert node.grpc, "the node did not log a gRPC address"
    with triton.InferenceServerClient(node.grpc) as c:
        yield c


@pytest.fixture(scope="module")
def stub(node):
    """The protocol's own stub, for requests tritonclient would refuse to build."""
    channel = grpc.insecure_channel(node.grpc)
    yield service_pb2_grpc.GRPCInferenceServiceStub(channel)
    channel.close()


def infer(client, model: str, arrays, params: dict):
    inputs = []
    for i, a in enumerate(arrays):
        t = triton.InferInput(f"INPUT{i}", list(a.shape), DTYPES[a.dtype.type])
        t.set_data_from_numpy(a)
        inputs.append(t)
    outputs = [triton.InferRequestedOutput("OUTPUT0")]
    result = client.infer(model, inputs, outputs=outputs, parameters=params or None, client_timeout=30)
    return result.as_numpy("OUTPUT0")


def test_server_health_and_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    meta = client.get_server_metadata(as_json=True)
    assert meta["name"] == "netaccel"
    assert "model_configuration" in meta["extensions"]


@pytest.mark.parametrize("model", sorted(CASES))
def test_model_metadata_and_config(client, model):
    assert client.is_model_ready(model)
    arrays, _ = CASES[model]
    meta = client.get_model_metadata(model, as_json=True)
    dtype = DTYPES[arrays[0].dtype.type]
    assert [i["name"] for i in meta["inputs"]] == [f"INPUT{i}" for i in range(len(arrays))]
    assert all(i["datatype"] == dtype for i in meta["inputs"] + meta["outputs"])
    config = client.get_model_config(model, as_json=True)["config"]
    assert config.get("max_batch_size", 0) == 0
    assert config["input"][0]["data_type"] == "TYPE_" + dtype


@pytest.mark.parametrize("model", sorted(CASES))
def test_infer_equals_v1_fn(client, node, model):
    arrays, params = CASES[model]
    out = infer(client, model, arrays, params)
    payload = b"".join(a.tobytes() for a in arrays)
    assert out.dtype == arrays[0].dtype
    assert out.tobytes() == v1_call(node, model, payload, params)
    if model in ("sobel", "matmul"):
        assert out.shape == arrays[0].shape


def test_grpc_calls_count_in_the_same_metrics_as_v1(client, node):
    def calls() -> float:
        text = node.get("/metrics").decode()
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if re.match(r"\w*accelerator_calls_total\{", line) and "minmax" in line
        )

    before = calls()
    arrays, params = CASES["minmax"]
    infer(client, "minmax", arrays, params)
    assert calls() == before + 1


def request(model: str, inputs, raw=(), **params) -> service_pb2.ModelInferRequest:
    """A ModelInferRequest: `inputs` as (name, datatype, shape), `raw` their bytes."""
    req = service_pb2.ModelInferRequest(model_name=model)
    for name, datatype, shape in inputs:
        t = req.inputs.add()
        t.name, t.datatype = name, datatype
        t.shape.extend(shape)
    req.raw_input_contents.extend(raw)
    for key, value in params.items():
        req.parameters[key].int64_param = value
    return req


MALFORMED = {
    "wrong-datatype": (request("topk", [("INPUT0", "FP32", [1])], [b"\0" * 4], k=1), "INVALID_ARGUMENT"),
    "shape-mismatch": (request("echo", [("INPUT0", "UINT8", [4])], [b"ab"]), "INVALID_ARGUMENT"),
    "missing-input": (request("matmul", [("INPUT0", "FP32", [1, 1])], [b"\0" * 4]), "INVALID_ARGUMENT"),
    "missing-param": (request("topk", [("INPUT0", "INT32", [1])], [b"\0" * 4]), "INVALID_ARGUMENT"),
    "raw-size-mismatch": (request("minmax", [("INPUT0", "FP32", [2])], [b"\0" * 7]), "INVALID_ARGUMENT"),
    "raw-count-mismatch": (request("echo", [("INPUT0", "UINT8", [1])], [b"a", b"b"]), "INVALID_ARGUMENT"),
    "huge-shape": (request("echo", [("INPUT0", "UINT8", [2**62])], [b"\0" * 16]), "INVALID_ARGUMENT"),
    "huge-elements": (request("sobel", [("INPUT0", "UINT8", [2**40, 2**40])], [b"\0" * 16]), "INVALID_ARGUMENT"),
    "unknown-model": (request("nope", []), "NOT_FOUND"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_requests_get_the_protocols_status(client, stub, case):
    req, code = MALFORMED[case]
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(req, timeout=30)
    assert info.value.code().name == code
    assert info.value.details()
    # The node keeps serving, through tritonclient.
    assert client.is_server_ready()
    assert infer(client, "echo", [np.arange(5, dtype=np.uint8)], {}).tolist() == list(range(5))


def test_tritonclient_sees_protocol_errors(client):
    t = triton.InferInput("INPUT0", [2], "FP32")
    t.set_data_from_numpy(np.zeros(2, dtype=np.float32))
    with pytest.raises(InferenceServerException, match="datatype FP32") as info:
        client.infer("topk", [t], parameters={"k": 1})
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    with pytest.raises(InferenceServerException, match="unknown model"):
        client.get_model_metadata("no_such_model")
    assert not client.is_model_ready("no_such_model")


def test_a_stream_answers_every_request_by_id(node):
    """tritonclient's streaming API (ModelStreamInfer): every request answered once,
    results equal to /v1/fn's, an error answering its own request only."""
    import queue

    answers: "queue.Queue" = queue.Queue()
    with triton.InferenceServerClient(node.grpc) as c:
        c.start_stream(callback=lambda result, error: answers.put((result, error)))
        want = {}
        for i in range(40):
            text = f"stream call {i}".encode()
            array = np.frombuffer(text, dtype=np.uint8)
            t = triton.InferInput("INPUT0", [len(text)], "UINT8")
            t.set_data_from_numpy(array)
            c.async_stream_infer("to_uppercase", [t], request_id=f"s{i}")
            want[f"s{i}"] = v1_call(node, "to_uppercase", text, {})
        bad = triton.InferInput("INPUT0", [1], "FP32")
        bad.set_data_from_numpy(np.zeros(1, dtype=np.float32))
        c.async_stream_infer("topk", [bad], request_id="bad", parameters={"k": 1})
        got, errors = {}, []
        for _ in range(41):
            result, error = answers.get(timeout=30)
            if error is not None:
                errors.append(str(error))
            else:
                rid = result.get_response().id
                assert rid not in got, f"{rid} answered twice"
                got[rid] = result.as_numpy("OUTPUT0").tobytes()
        c.stop_stream()
    assert got == want
    assert len(errors) == 1 and "datatype FP32" in errors[0], errors


def test_rpcs_the_node_does_not_serve_are_unimplemented(stub):
    with pytest.raises(grpc.RpcError) as info:
        stub.TraceSetting(service_pb2.TraceSettingRequest(), timeout=30)
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_a_connection_over_the_bound_is_unavailable(tmp_path):
    """A gRPC connection refused at connections_max gets an HTTP/2 GOAWAY that accepted
    no stream (REFUSED_STREAM): tritonclient reports UNAVAILABLE at once, and the open
    connection serves on."""
    import time

    from conftest import running_node

    # Channels of their own (grpcio otherwise shares one connection per target).
    own = [("grpc.use_local_subchannel_pool", 1)]
    with running_node(tmp_path, "connections_max = 1\n") as n:
        first = triton.InferenceServerClient(n.grpc, channel_args=own)
        assert first.is_server_live()
        second = triton.InferenceServerClient(n.grpc, channel_args=own)
        started = time.monotonic()
        with pytest.raises(InferenceServerException) as refused:
            second.is_server_live(client_timeout=10)
        assert refused.value.status() == "StatusCode.UNAVAILABLE", refused.value
        assert "connections_max" in refused.value.message()
        assert time.monotonic() - started < 5
        assert first.is_server_live()
        second.close()
        first.close()
