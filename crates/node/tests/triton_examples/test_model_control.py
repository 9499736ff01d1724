"""What Triton's model control examples (`simple_http_model_control.py`,
`simple_grpc_model_control.py`) do, with the unmodified `tritonclient`, against a node
serving the repository they count (bench/triton_examples/make_models.py --control:
7 models for the HTTP one, 8 for the gRPC one) with `repository_index = "models"`:
count the index, load `simple`, refuse a config override that is not JSON with
Triton's words, load it with `max_batch_size` "16" and read 16 back, infer a batch
the old configuration refused, unload it, refuse model files sent with the load
(gRPC: INTERNAL, "failed to poll from model repository") and an unknown model; then
what the examples do not show: a load without the override builds it as its file
says again.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT, docs_conftest, require

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


@pytest.fixture(scope="module", params=[("http", 7), ("grpc", 8)], ids=["http-7", "grpc-8"])
def control(request, tmp_path_factory):
    """(protocol, client module, client, models in the repository) of a node of its own."""
    protocol, count = request.param
    out = tmp_path_factory.mktemp(f"control-{count}")
    script = ROOT / "bench" / "triton_examples" / "make_models.py"
    done = subprocess.run(
        [sys.executable, str(script), "--control", str(count), str(out)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        require(False, f"the control repository could not be generated: {done.stderr.strip()}")
    config = f'models_dir = "{out}"\nrepository_index = "models"\n'
    with docs_conftest.running_node(tmp_path_factory.mktemp("control-node"), config) as n:
        if protocol == "http":
            with httpclient.InferenceServerClient(n.http) as c:
                yield protocol, httpclient, c, count
        else:
            assert n.grpc, "the node did not log a gRPC address"
            with grpcclient.InferenceServerClient(n.grpc) as c:
                yield protocol, grpcclient, c, count


def infer(module, client, batch: int) -> np.ndarray:
    a = np.arange(16 * batch, dtype=np.int32).reshape(batch, 16)
    inputs = [module.InferInput(f"INPUT{i}", [batch, 16], "INT32") for i in range(2)]
    for i in inputs:
        i.set_data_from_numpy(a)
    return client.infer(MODEL, inputs).as_numpy("OUTPUT0")


def max_batch_size(protocol, client) -> int:
    if protocol == "http":
        return client.get_model_config(MODEL)["max_batch_size"]
    return client.get_model_config(MODEL).config.max_batch_size


def test_the_model_control_examples_steps(control):
    protocol, module, client, count = control
    index = client.get_model_repository_index()
    if protocol == "grpc":
        index = index.models
    assert len(index) == count, index
    client.load_model(MODEL)
    assert client.is_model_ready(MODEL)
    with pytest.raises(InferenceServerException, match="failed to load"):
        client.load_model(MODEL, config='"parameters": {"config": {{"max_batch_size": "16"}}}')
    assert max_batch_size(protocol, client) == 8
    with pytest.raises(InferenceServerException, match="1 to 8"):
        infer(module, client, 12)
    client.load_model(MODEL, config='{"max_batch_size":"16"}')
    assert max_batch_size(protocol, client) == 16
    np.testing.assert_array_equal(infer(module, client, 12), 2 * np.arange(192).reshape(12, 16))
    client.unload_model(MODEL)
    assert not client.is_model_ready(MODEL)
    if protocol == "grpc":
        with pytest.raises(InferenceServerException) as e:
            client.load_model(MODEL, config="{}", files={"file:" + "A" * 256: b"a"})
        assert e.value.status() == "StatusCode.INTERNAL"
        assert "failed to poll from model repository" in e.value.message()
        assert client.is_server_live()
    with pytest.raises(InferenceServerException, match="failed to load"):
        client.load_model("wrong_model_name")
    # Loaded again without an override, it is as its file says.
    client.load_model(MODEL)
    assert client.is_model_ready(MODEL) and max_batch_size(protocol, client) == 8
    with pytest.raises(InferenceServerException, match="1 to 8"):
        infer(module, client, 12)
