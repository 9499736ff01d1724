"""What Triton's Python client examples do, with the unmodified `tritonclient` from
PyPI, against a node serving the examples' models (bench/triton_examples/make_models.py): infer
with `simple` over HTTP (JSON and binary tensors) and gRPC, the statistics extension
(counts rise by exactly the calls made, on both protocols), and the model repository
(index, unload, load back, Triton's error words). The examples themselves cannot be
downloaded in CI; bench/triton_examples/run.sh runs them where they can be.
"""
from __future__ import annotations

import os
import queue

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

MODEL = "simple"


@pytest.fixture(scope="module")
def http(node):
    with httpclient.InferenceServerClient(node.http) as c:
        yield c


@pytest.fixture(scope="module")
def grpc(node):
    assert node.grpc, "the node did not log a gRPC address"
    with grpcclient.InferenceServerClient(node.grpc) as c:
        yield c


def operands(batch: int = 1):
    a = np.arange(16 * batch, dtype=np.int32).reshape(batch, 16)
    b = np.ones((batch, 16), dtype=np.int32) * 3
    return a, b


def infer(client, module, binary: bool = True, batch: int = 1):
    a, b = operands(batch)
    inputs = [module.InferInput("INPUT0", [batch, 16], "INT32"), module.InferInput("INPUT1", [batch, 16], "INT32")]
    if module is httpclient:
        inputs[0].set_data_from_numpy(a, binary_data=binary)
        inputs[1].set_data_from_numpy(b, binary_data=binary)
        outputs = [module.InferRequestedOutput(f"OUTPUT{i}", binary_data=binary) for i in range(2)]
    else:
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        outputs = [module.InferRequestedOutput(f"OUTPUT{i}") for i in range(2)]
    result = client.infer(MODEL, inputs, outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


def test_simple_is_ready_and_infers_over_http_and_grpc(http, grpc):
    assert http.is_model_ready(MODEL) and grpc.is_model_ready(MODEL)
    config = http.get_model_config(MODEL)
    assert config["max_batch_size"] == 8
    infer(http, httpclient, binary=False)
    infer(http, httpclient, binary=True, batch=3)
    infer(grpc, grpcclient, batch=2)


def http_stats(http) -> dict:
    stats = http.get_inference_statistics(model_name=MODEL)["model_stats"]
    assert [s["name"] for s in stats] == [MODEL]
    return stats[0]


def grpc_stats(grpc):
    stats = grpc.get_inference_statistics(model_name=MODEL).model_stats
    assert [s.name for s in stats] == [MODEL]
    return stats[0]


def test_statistics_rise_by_exactly_the_calls_made(http, grpc):
    before = http_stats(http)
    for _ in range(3):
        infer(http, httpclient)
    infer(http, httpclient, batch=4)
    for _ in range(2):
        infer(grpc, grpcclient)
    after = http_stats(http)
    # 6 calls, 9 inferences (one batch of 4).
    assert after["execution_count"] - before["execution_count"] == 6
    assert after["inference_count"] - before["inference_count"] == 9
    for phase in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        counted = after["inference_stats"][phase]["count"] - before["inference_stats"][phase]["count"]
        assert counted == 6, (phase, after)
        assert after["inference_stats"][phase]["ns"] > before["inference_stats"][phase]["ns"]
    sizes = {b["batch_size"] for b in after["batch_stats"]}
    assert {1, 4} <= sizes
    # gRPC's document says the same.
    g = grpc_stats(grpc)
    assert g.inference_count == after["inference_count"]
    assert g.execution_count == after["execution_count"]
    assert g.inference_stats.compute_infer.count == after["inference_stats"]["compute_infer"]["count"]
    # A failed request counts as a failure, not as an inference.
    with pytest.raises(InferenceServerException):
        bad = httpclient.InferInput("INPUT0", [1, 15], "INT32")
        bad.set_data_from_numpy(np.zeros((1, 15), dtype=np.int32))
        http.infer(MODEL, [bad])
    last = http_stats(http)
    assert last["inference_stats"]["fail"]["count"] == after["inference_stats"]["fail"]["count"] + 1
    assert last["inference_count"] == after["inference_count"]
    # Every model, and the extension listed.
    assert MODEL in {s["name"] for s in http.get_inference_statistics()["model_stats"]}
    assert "statistics" in http.get_server_metadata()["extensions"]
    assert "statistics" in grpc.get_server_metadata().extensions


def states(index) -> dict:
    return {m["name"]: m["state"] for m in index}


def test_the_repository_unloads_and_loads_over_http_and_grpc(http, grpc):
    assert states(http.get_model_repository_index())[MODEL] == "READY"
    http.unload_model(MODEL)
    assert not http.is_model_ready(MODEL)
    assert states(http.get_model_repository_index())[MODEL] == "UNAVAILABLE"
    http.load_model(MODEL)
    assert http.is_model_ready(MODEL)
    infer(http, httpclient)

    grpc.unload_model(MODEL)
    assert not grpc.is_model_ready(MODEL)
    index = grpc.get_model_repository_index(as_json=True)["models"]
    assert states(index)[MODEL] == "UNAVAILABLE"
    grpc.load_model(MODEL)
    assert grpc.is_model_ready(MODEL)
    infer(grpc, grpcclient)

    # Triton's words, which its examples match.
    for client in (http, grpc):
        with pytest.raises(InferenceServerException, match="failed to load"):
            client.load_model("wrong_model_name")
    # A configuration override sets the instance count, and the batch the model is
    # rebuilt with (as Triton's model control examples send it: a string); what the
    # model cannot take is refused with Triton's words.
    http.load_model(MODEL, config='{"instance_group": [{"kind": "KIND_CPU", "count": 1}]}')
    assert http.is_model_ready(MODEL)
    with pytest.raises(InferenceServerException, match="failed to load"):
        http.load_model(MODEL, config='"parameters": {"config": {{"max_batch_size": "16"}}}')
    with pytest.raises(InferenceServerException, match="max_batch_size: 5000 is more than 4096"):
        grpc.load_model(MODEL, config='{"max_batch_size": "5000"}')
    grpc.load_model(MODEL, config='{"max_batch_size":"16"}')
    assert http.get_model_config(MODEL)["max_batch_size"] == 16
    assert grpc.get_model_config(MODEL).config.max_batch_size == 16
    infer(http, httpclient)
    http.load_model(MODEL, config='{"max_batch_size": 8}')
    assert grpc.get_model_config(MODEL).config.max_batch_size == 8
    # Model files sent with a load are not read: Triton's words and status.
    with pytest.raises(InferenceServerException, match="failed to poll from model repository") as e:
        grpc.load_model(MODEL, config="{}", files={"file:" + "A" * 256: b"a"})
    assert e.value.status() == "StatusCode.INTERNAL"
    assert grpc.is_server_live() and grpc.is_model_ready(MODEL)


def test_system_shared_memory_carries_inputs_and_outputs(http, grpc):
    shm = pytest.importorskip("tritonclient.utils.shared_memory")
    a, b = operands()
    size = a.nbytes
    tag = os.getpid()
    http.unregister_system_shared_memory()
    http.unregister_cuda_shared_memory()
    ip = shm.create_shared_memory_region("input_data", f"/na_in_{tag}", size * 2)
    op = shm.create_shared_memory_region("output_data", f"/na_out_{tag}", size * 2)
    try:
        shm.set_shared_memory_region(ip, [a])
        shm.set_shared_memory_region(ip, [b], offset=size)
        http.register_system_shared_memory("input_data", f"/na_in_{tag}", size * 2)
        grpc.register_system_shared_memory("output_data", f"/na_out_{tag}", size * 2)
        status = {r["name"]: r for r in http.get_system_shared_memory_status()}
        assert status["output_data"]["byte_size"] == size * 2
        assert set(grpc.get_system_shared_memory_status(as_json=True)["regions"]) == {"input_data", "output_data"}

        inputs = [httpclient.InferInput(f"INPUT{i}", [1, 16], "INT32") for i in range(2)]
        inputs[0].set_shared_memory("input_data", size)
        inputs[1].set_shared_memory("input_data", size, offset=size)
        outputs = [httpclient.InferRequestedOutput(f"OUTPUT{i}", binary_data=True) for i in range(2)]
        outputs[0].set_shared_memory("output_data", size)
        outputs[1].set_shared_memory("output_data", size, offset=size)
        result = http.infer(MODEL, inputs, outputs=outputs)
        out0 = result.get_output("OUTPUT0")
        assert out0["parameters"]["shared_memory_region"] == "output_data"
        got0 = shm.get_contents_as_numpy(op, np.int32, [1, 16])
        got1 = shm.get_contents_as_numpy(op, np.int32, [1, 16], offset=size)
        np.testing.assert_array_equal(got0, a + b)
        np.testing.assert_array_equal(got1, a - b)

        # Outside the region, an unknown region, a region past the object: refused, and
        # the node serves on.
        bad = httpclient.InferInput("INPUT0", [1, 16], "INT32")
        bad.set_shared_memory("input_data", size, offset=size + 8)
        with pytest.raises(InferenceServerException, match="outside"):
            http.infer(MODEL, [bad, inputs[1]])
        bad.set_shared_memory("no_such_region", size)
        with pytest.raises(InferenceServerException, match="Unable to find"):
            http.infer(MODEL, [bad, inputs[1]])
        with pytest.raises(InferenceServerException, match="not inside"):
            http.register_system_shared_memory("big", f"/na_in_{tag}", size * 4)
        for client in (http, grpc):
            client.unregister_cuda_shared_memory()
            with pytest.raises(InferenceServerException, match="not supported"):
                client.register_cuda_shared_memory("cuda", b"aGFuZGxl", 0, 64)
        assert http.get_cuda_shared_memory_status() == []
        infer(http, httpclient)
    finally:
        http.unregister_system_shared_memory()
        assert http.get_system_shared_memory_status() == []
        shm.destroy_shared_memory_region(ip)
        shm.destroy_shared_memory_region(op)


def test_system_shared_memory_over_grpc(grpc):
    """What simple_grpc_shm_client does: inputs read from a region, outputs written to
    one, an input beside them sent in band, and the refusals Triton's clients match."""
    shm = pytest.importorskip("tritonclient.utils.shared_memory")
    a, b = operands()
    size = a.nbytes
    tag = os.getpid()
    grpc.unregister_system_shared_memory()
    ip = shm.create_shared_memory_region("g_input", f"/na_gin_{tag}", size * 2)
    op = shm.create_shared_memory_region("g_output", f"/na_gout_{tag}", size * 2)
    try:
        shm.set_shared_memory_region(ip, [a])
        shm.set_shared_memory_region(ip, [b], offset=size)
        grpc.register_system_shared_memory("g_input", f"/na_gin_{tag}", size * 2)
        grpc.register_system_shared_memory("g_output", f"/na_gout_{tag}", size * 2)

        inputs = [grpcclient.InferInput(f"INPUT{i}", [1, 16], "INT32") for i in range(2)]
        inputs[0].set_shared_memory("g_input", size)
        inputs[1].set_shared_memory("g_input", size, offset=size)
        outputs = [grpcclient.InferRequestedOutput(f"OUTPUT{i}") for i in range(2)]
        outputs[0].set_shared_memory("g_output", size)
        outputs[1].set_shared_memory("g_output", size, offset=size)
        result = grpc.infer(MODEL, inputs, outputs=outputs)
        out0 = result.get_output("OUTPUT0")
        assert out0.parameters["shared_memory_region"].string_param == "g_output"
        assert out0.parameters["shared_memory_byte_size"].int64_param == size
        np.testing.assert_array_equal(shm.get_contents_as_numpy(op, np.int32, [1, 16]), a + b)
        np.testing.assert_array_equal(shm.get_contents_as_numpy(op, np.int32, [1, 16], offset=size), a - b)

        # The same on a stream (ModelStreamInfer), into a cleared region.
        shm.set_shared_memory_region(op, [np.zeros((2, 16), dtype=np.int32)])
        answers = queue.Queue()
        grpc.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            grpc.async_stream_infer(MODEL, inputs, outputs=outputs)
            result, error = answers.get(timeout=10)
        finally:
            grpc.stop_stream()
        assert error is None, error
        assert result.get_output("OUTPUT1").parameters["shared_memory_region"].string_param == "g_output"
        np.testing.assert_array_equal(shm.get_contents_as_numpy(op, np.int32, [1, 16]), a + b)
        np.testing.assert_array_equal(shm.get_contents_as_numpy(op, np.int32, [1, 16], offset=size), a - b)

        # One input in band beside one in shared memory, the outputs in band.
        mixed = [grpcclient.InferInput("INPUT0", [1, 16], "INT32"), inputs[1]]
        mixed[0].set_data_from_numpy(a * 2)
        result = grpc.infer(MODEL, mixed)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a * 2 + b)

        # Outside the region, an unknown region, an output region too small: refused,
        # and the node serves on.
        bad = grpcclient.InferInput("INPUT0", [1, 16], "INT32")
        bad.set_shared_memory("g_input", size, offset=size + 8)
        with pytest.raises(InferenceServerException, match="outside"):
            grpc.infer(MODEL, [bad, inputs[1]])
        bad.set_shared_memory("no_such_region", size)
        with pytest.raises(InferenceServerException, match="Unable to find"):
            grpc.infer(MODEL, [bad, inputs[1]])
        small = grpcclient.InferRequestedOutput("OUTPUT0")
        small.set_shared_memory("g_output", size // 2)
        with pytest.raises(InferenceServerException, match="shared_memory_byte_size"):
            grpc.infer(MODEL, inputs, outputs=[small])
        infer(grpc, grpcclient)
    finally:
        grpc.unregister_system_shared_memory()
        assert grpc.get_system_shared_memory_status(as_json=True).get("regions", {}) == {}
        shm.destroy_shared_memory_region(ip)
        shm.destroy_shared_memory_region(op)
