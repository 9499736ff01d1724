"""Ensembles with the unmodified `tritonclient`, against a node serving the examples'
models and bench/triton_examples/make_models.py's ensembles: `simple_chain` (`simple`
twice, batched) gives 2 * INPUT0 and 2 * INPUT1 over HTTP and gRPC; `sobel_grid` (the
built-in sobel, then the ONNX model `edge_grid`) gives in one call what the client
gets calling the two itself; metadata and configuration say `ensemble` and list the
steps; the statistics count the ensemble's inferences.
"""
from __future__ import annotations

import os

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


@pytest.fixture(scope="module")
def http(node):
    with httpclient.InferenceServerClient(node.http) as c:
        yield c


@pytest.fixture(scope="module")
def grpc(node):
    assert node.grpc, "the node did not log a gRPC address"
    with grpcclient.InferenceServerClient(node.grpc) as c:
        yield c


def chain_inputs(module, batch: int):
    a = np.arange(batch * 16, dtype=np.int32).reshape(batch, 16)
    b = np.full((batch, 16), -3, dtype=np.int32)
    inputs = [module.InferInput("INPUT0", [batch, 16], "INT32"), module.InferInput("INPUT1", [batch, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return a, b, inputs


def inferences(stats) -> int:
    """The ensemble's inference count: a dict over HTTP, a message over gRPC."""
    if isinstance(stats, dict):
        return int(stats["model_stats"][0]["inference_count"])
    return int(stats.model_stats[0].inference_count)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_an_ensemble_of_two_steps_is_one_call(http, grpc, protocol):
    client, module = (http, httpclient) if protocol == "http" else (grpc, grpcclient)
    before = [inferences(client.get_inference_statistics(m)) for m in ("simple_chain", "simple")]
    a, b, inputs = chain_inputs(module, 3)
    result = client.infer("simple_chain", inputs)
    assert (result.as_numpy("OUTPUT0") == 2 * a).all()
    assert (result.as_numpy("OUTPUT1") == 2 * b).all()
    after = [inferences(client.get_inference_statistics(m)) for m in ("simple_chain", "simple")]
    # The ensemble's 3 inferences, and its step's (simple, twice) as Triton counts them.
    assert after == [before[0] + 3, before[1] + 6]


def test_a_builtin_then_a_model_equals_the_two_calls(http):
    image = ((np.arange(256) * 37) % 251).astype(np.uint8).reshape(16, 16)
    one = httpclient.InferInput("IMAGE", [16, 16], "UINT8")
    one.set_data_from_numpy(image, binary_data=True)
    grid = http.infer("sobel_grid", [one]).as_numpy("GRID")
    assert grid.shape == (16,) and grid.dtype == np.float32 and grid.any()
    first = httpclient.InferInput("INPUT0", [16, 16], "UINT8")
    first.set_data_from_numpy(image, binary_data=True)
    edges = http.infer("sobel", [first]).as_numpy("OUTPUT0")
    second = httpclient.InferInput("EDGES", [16, 16], "UINT8")
    second.set_data_from_numpy(edges, binary_data=True)
    assert (http.infer("edge_grid", [second]).as_numpy("GRID") == grid).all()
    # The grid is each 4x4 tile's mean of the edges.
    tiles = edges.astype(np.float32).reshape(4, 4, 4, 4).mean(axis=(1, 3)).reshape(16)
    assert np.allclose(grid, tiles)


def test_metadata_and_config_describe_the_ensemble(http, grpc):
    assert http.is_model_ready("simple_chain") and grpc.is_model_ready("sobel_grid")
    metadata = http.get_model_metadata("simple_chain")
    assert metadata["platform"] == "ensemble"
    assert [i["name"] for i in metadata["inputs"]] == ["INPUT0", "INPUT1"]
    config = http.get_model_config("sobel_grid")
    assert config["platform"] == "ensemble" and config["max_batch_size"] == 0
    steps = config["ensemble_scheduling"]["step"]
    assert [s["model_name"] for s in steps] == ["sobel", "edge_grid"]
    assert steps[0]["input_map"] == {"INPUT0": "IMAGE"}
    assert steps[1]["output_map"] == {"GRID": "GRID"}
    g = grpc.get_model_config("simple_chain").config
    assert g.platform == "ensemble" and g.max_batch_size == 8
    assert [s.model_name for s in g.ensemble_scheduling.step] == ["simple", "simple"]
    assert dict(g.ensemble_scheduling.step[1].input_map) == {"INPUT0": "SUM", "INPUT1": "DIFF"}
    assert grpc.get_model_metadata("sobel_grid").platform == "ensemble"


def test_the_repository_lists_an_ensemble_and_will_not_unload_it(http, grpc):
    index = {m["name"]: m for m in http.get_model_repository_index()}
    assert index["simple_chain"]["state"] == "READY"
    for client in (http, grpc):
        with pytest.raises(InferenceServerException, match="simple_chain is an ensemble"):
            client.unload_model("simple_chain")
    assert http.is_model_ready("simple_chain")
