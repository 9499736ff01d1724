"""Dims a request gives, beyond the batch axis, as `simple_{http,grpc}_string_infer_client`
send them with the unmodified `tritonclient`: `simple_identity` is declared as Triton
declares it (BYTES dims `[-1]`, max_batch_size 8), and a request's width, whatever it
is, comes back as sent — JSON and binary over HTTP, gRPC — while the batch axis and
the declared rank are still checked.
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

MODEL = "simple_identity"


@pytest.fixture(scope="module")
def http(node):
    with httpclient.InferenceServerClient(node.http) as c:
        yield c


@pytest.fixture(scope="module")
def grpc(node):
    assert node.grpc, "the node did not log a gRPC address"
    with grpcclient.InferenceServerClient(node.grpc) as c:
        yield c


def strings(rows: int, width: int) -> np.ndarray:
    values = [f"{r}-{k}".encode() for r in range(rows) for k in range(width)]
    return np.array(values, dtype=np.object_).reshape(rows, width)


def test_the_config_says_minus_one_as_triton_does(http, grpc):
    config = http.get_model_config(MODEL)
    assert config["max_batch_size"] == 8
    assert config["input"][0]["dims"] == [-1]
    assert config["output"][0]["dims"] == [-1]
    assert list(grpc.get_model_metadata(MODEL).inputs[0].shape) == [-1, -1]


@pytest.mark.parametrize("shape", [(1, 16), (1, 1), (3, 5)])
@pytest.mark.parametrize("encoding", ["http-json", "http-binary", "grpc"])
def test_any_width_comes_back_as_sent(http, grpc, shape, encoding):
    data = strings(*shape)
    binary = encoding == "http-binary"
    module, client = (grpcclient, grpc) if encoding == "grpc" else (httpclient, http)
    inputs = [module.InferInput("INPUT0", list(shape), "BYTES")]
    if encoding == "grpc":
        inputs[0].set_data_from_numpy(data)
        outputs = [module.InferRequestedOutput("OUTPUT0")]
    else:
        inputs[0].set_data_from_numpy(data, binary_data=binary)
        outputs = [module.InferRequestedOutput("OUTPUT0", binary_data=binary)]
    got = client.infer(MODEL, inputs, outputs=outputs).as_numpy("OUTPUT0")
    assert got.shape == shape
    # tritonclient gives JSON strings as str, binary and gRPC ones as bytes.
    as_bytes = [x.encode() if isinstance(x, str) else x for x in got.flatten()]
    assert as_bytes == list(data.flatten())


@pytest.mark.parametrize("shape", [[16], [9, 2], [1, 2, 3]])
def test_the_batch_axis_and_the_rank_are_still_checked(http, shape):
    n = int(np.prod(shape))
    inputs = [httpclient.InferInput("INPUT0", shape, "BYTES")]
    inputs[0].set_data_from_numpy(np.array([b"x"] * n, dtype=np.object_).reshape(shape))
    with pytest.raises(InferenceServerException) as refused:
        http.infer(MODEL, inputs)
    assert "takes shape [-1, -1]" in refused.value.message()
