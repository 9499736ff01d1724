"""What Triton's image examples (`image_client.py`, `grpc_image_client.py`,
`grpc_client.py`) and `memory_growth_test.py` do, with the unmodified `tritonclient`,
against the examples' models (bench/triton_examples/make_models.py): read
`densenet_onnx`'s configuration as the image clients check it (one input of 3 dims,
FORMAT_NCHW; one FP32 output that is a vector), classify a picture (top classes with
their labels), send `grpc_client.py`'s raw request, and call `custom_identity_int32`
from a new client each time. The scores are checked against the model file's own
weights, computed here with numpy: the model computes, it does not answer a canned
tensor.
"""
from __future__ import annotations

import os

import pytest

try:
    import numpy as np
    import onnx
    from onnx import numpy_helper
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
except (ImportError, RuntimeError) as e:  # pragma: no cover - a missing prerequisite
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        raise
    pytest.skip(f"tritonclient[http,grpc] or onnx is not installed ({e})", allow_module_level=True)

MODEL = "densenet_onnx"
CLASSES = 1000


@pytest.fixture(scope="module")
def http(node):
    with httpclient.InferenceServerClient(node.http) as c:
        yield c


@pytest.fixture(scope="module")
def grpc(node):
    assert node.grpc, "the node did not log a gRPC address"
    with grpcclient.InferenceServerClient(node.grpc) as c:
        yield c


@pytest.fixture(scope="module")
def scores_of(repository):
    """fc6_1 for an image, from the weights in the model file the node serves."""
    model = onnx.load(str(repository / MODEL / "1" / "model.onnx"))
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}

    def scores(image: np.ndarray) -> np.ndarray:
        means = image.astype(np.float64).mean(axis=(1, 2))
        return means @ weights["W"].astype(np.float64) + weights["b"]

    return scores


def picture(seed: int) -> np.ndarray:
    """An image as image_client.py sends one: CHW, INCEPTION-scaled to [-1, 1]; each
    channel around its own level, so that pictures differ in their channel means."""
    rng = np.random.default_rng(seed)
    levels = rng.uniform(-0.8, 0.8, size=(3, 1, 1))
    noise = rng.uniform(-0.2, 0.2, size=(3, 224, 224))
    return (levels + noise).astype(np.float32)


def test_the_image_clients_accept_the_models_configuration(http, grpc):
    config = http.get_model_config(MODEL)
    assert config["max_batch_size"] == 0
    (inp,) = config["input"]
    assert (inp["name"], inp["data_type"], inp["format"]) == ("data_0", "TYPE_FP32", "FORMAT_NCHW")
    assert inp["dims"] == [3, 224, 224]
    (out,) = config["output"]
    assert (out["name"], out["data_type"], out["dims"]) == ("fc6_1", "TYPE_FP32", [CLASSES])
    assert out["label_filename"] == "densenet_labels.txt"
    metadata = grpc.get_model_metadata(MODEL)
    assert [list(t.shape) for t in metadata.inputs] == [[3, 224, 224]]
    assert [(t.name, t.datatype) for t in metadata.outputs] == [("fc6_1", "FP32")]
    grpc_config = grpc.get_model_config(MODEL).config
    # image_client.py compares the enum: 2 is FORMAT_NCHW.
    assert grpc_config.input[0].format == 2


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_picture_is_classified_from_the_models_own_scores(http, grpc, scores_of, protocol):
    client, module = (http, httpclient) if protocol == "http" else (grpc, grpcclient)
    image = picture(7)
    want = scores_of(image)
    inputs = [module.InferInput("data_0", [3, 224, 224], "FP32")]
    inputs[0].set_data_from_numpy(image)
    raw = client.infer(MODEL, inputs, outputs=[module.InferRequestedOutput("fc6_1")])
    np.testing.assert_allclose(raw.as_numpy("fc6_1"), want, rtol=1e-4, atol=1e-4)
    top = client.infer(
        MODEL, inputs, outputs=[module.InferRequestedOutput("fc6_1", class_count=3)]
    ).as_numpy("fc6_1")
    assert top.shape == (3,)
    best = np.argsort(-want)[:3]
    got = [entry.decode().split(":") for entry in top]
    assert [int(idx) for _, idx, _ in got] == list(best)
    assert [label for _, _, label in got] == [f"class_{k}" for k in best]
    for (score, _, _), k in zip(got, best):
        assert abs(float(score) - want[k]) < 1e-3
    # Another picture, another best class: the answer depends on the input.
    inputs[0].set_data_from_numpy(picture(8))
    other = client.infer(
        MODEL, inputs, outputs=[module.InferRequestedOutput("fc6_1", class_count=1)]
    ).as_numpy("fc6_1")
    assert int(other[0].decode().split(":")[1]) == int(np.argmax(scores_of(picture(8))))
    assert np.argmax(scores_of(picture(8))) != best[0]


def test_grpc_client_py_raw_request(grpc, scores_of):
    # grpc_client.py sends 602112 bytes of "a" as data_0's raw contents.
    raw = bytes(602112 * "a", "utf-8")
    inputs = [grpcclient.InferInput("data_0", [3, 224, 224], "FP32")]
    inputs[0].set_data_from_numpy(np.frombuffer(raw, dtype=np.float32).reshape(3, 224, 224))
    got = grpc.infer(MODEL, inputs).as_numpy("fc6_1")
    want = scores_of(np.frombuffer(raw, dtype=np.float32).reshape(3, 224, 224))
    np.testing.assert_allclose(got, want, rtol=1e-4)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_memory_growth_test_calls_from_a_new_client_each_time(node, protocol):
    module, url = (httpclient, node.http) if protocol == "http" else (grpcclient, node.grpc)
    data = np.expand_dims(np.arange(16, dtype=np.int32), axis=0)
    for _ in range(5):
        with module.InferenceServerClient(url) as client:
            inputs = [module.InferInput("INPUT0", [1, 16], "INT32")]
            inputs[0].set_data_from_numpy(data)
            out = client.infer(
                "custom_identity_int32", inputs, outputs=[module.InferRequestedOutput("OUTPUT0")]
            ).as_numpy("OUTPUT0")
            assert out.dtype == data.dtype and out.shape == data.shape
            assert np.array_equal(out, data)
