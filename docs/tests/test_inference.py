"""docs/inference.md: the Open Inference Protocol v2 on the node's HTTP port, driven by
the unmodified `tritonclient[http]` from PyPI and by hand-made requests.

Every built-in is inferred over JSON and over binary tensors, and the output must equal
what `/v1/fn` answers for the same input and params. Malformed requests must get the
protocol's `{"error": ...}` with a 4xx status, and the node must keep serving.
"""
from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from docblocks import tagged_blocks

try:
    import numpy as np
    import tritonclient.http as triton
    from tritonclient.utils import InferenceServerException
except ImportError as e:  # pragma: no cover - a missing prerequisite
    if os.environ.get("CI") == "true":
        raise
    pytest.skip(f"tritonclient[http] is not installed ({e})", allow_module_level=True)

RNG = np.random.default_rng(14)

# model -> (inputs as numpy arrays, request parameters)
CASES = {
    "echo": ([RNG.integers(0, 256, 64, dtype=np.uint8)], {}),
    "to_uppercase": ([np.frombuffer(b"netaccel speaks v2, {ok}?", dtype=np.uint8)], {}),
    "topk": ([RNG.integers(-1000, 1000, 50, dtype=np.int32)], {"k": 7}),
    "logit": ([RNG.random(33, dtype=np.float32)], {"eps": 0.01}),
    "minmax": ([(RNG.random(40, dtype=np.float32) * 9 - 3).astype(np.float32)], {}),
    "sobel": ([RNG.integers(0, 256, (6, 9), dtype=np.uint8)], {}),
    "matmul": ([RNG.random((5, 5), dtype=np.float32), RNG.random((5, 5), dtype=np.float32)], {}),
}
# The query string /v1/fn needs for the same call (v2 derives shape params).
V1_QUERY = {"sobel": {"width": 9, "height": 6}, "matmul": {"n": 5}}
DTYPES = {np.uint8: "UINT8", np.int32: "INT32", np.float32: "FP32"}


@pytest.fixture(scope="module")
def client(node):
    with triton.InferenceServerClient(node.http, network_timeout=30) as c:
        yield c


def v1_call(node, model: str, payload: bytes, params: dict) -> bytes:
    query = urllib.parse.urlencode({**params, **V1_QUERY.get(model, {})})
    req = urllib.request.Request(
        f"{node.url}/v1/fn/{model}?{query}", data=payload, method="POST"
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read()


def infer(client, model: str, arrays, params: dict, binary: bool):
    inputs = []
    for i, a in enumerate(arrays):
        t = triton.InferInput(f"INPUT{i}", list(a.shape), DTYPES[a.dtype.type])
        t.set_data_from_numpy(a, binary_data=binary)
        inputs.append(t)
    outputs = [triton.InferRequestedOutput("OUTPUT0", binary_data=binary)]
    result = client.infer(model, inputs, outputs=outputs, parameters=params or None)
    return result.as_numpy("OUTPUT0")


def test_server_health_and_metadata(client, node):
    assert client.is_server_live()
    assert client.is_server_ready()
    meta = client.get_server_metadata()
    assert meta["name"] == "netaccel"
    assert "binary_tensor_data" in meta["extensions"]
    catalog = {a["name"] for a in node.get_json("/v1/accelerators")}
    assert set(CASES) <= catalog


@pytest.mark.parametrize("model", sorted(CASES))
def test_model_metadata_and_config(client, model):
    assert client.is_model_ready(model)
    arrays, _ = CASES[model]
    meta = client.get_model_metadata(model)
    dtype = DTYPES[arrays[0].dtype.type]
    assert [i["name"] for i in meta["inputs"]] == [f"INPUT{i}" for i in range(len(arrays))]
    assert all(i["datatype"] == dtype for i in meta["inputs"] + meta["outputs"])
    assert all(len(i["shape"]) == arrays[0].ndim for i in meta["inputs"])
    config = client.get_model_config(model)
    assert config["max_batch_size"] == 0
    assert config["input"][0]["data_type"] == "TYPE_" + dtype


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
@pytest.mark.parametrize("model", sorted(CASES))
def test_infer_equals_v1_fn(client, node, model, binary):
    arrays, params = CASES[model]
    out = infer(client, model, arrays, params, binary)
    payload = b"".join(a.tobytes() for a in arrays)
    want = v1_call(node, model, payload, params)
    assert out.dtype == arrays[0].dtype
    assert out.tobytes() == want
    if model in ("sobel", "matmul"):
        assert out.shape == arrays[0].shape


def test_v2_calls_count_in_the_same_metrics_as_v1(client, node):
    def calls() -> float:
        text = node.get("/metrics").decode()
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if re.match(r"\w*accelerator_calls_total\{", line) and 'minmax' in line
        )

    before = calls()
    arrays, params = CASES["minmax"]
    infer(client, "minmax", arrays, params, True)
    assert calls() == before + 1


def test_v2_calls_take_the_deadline_header_of_v1(node):
    doc = {"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "UINT8", "data": [1, 2, 3, 4]}]}
    body = json.dumps(doc).encode()
    code, answer = raw_post(node, "/v2/models/echo/infer", body, {"X-Netaccel-Deadline-Us": "soon"})
    assert code == 400 and "error" in json.loads(answer)
    code, answer = raw_post(node, "/v2/models/echo/infer", body, {"X-Netaccel-Deadline-Us": "5000000"})
    assert code == 200 and json.loads(answer)["outputs"][0]["data"] == [1, 2, 3, 4]


def raw_post(node, path: str, body: bytes, headers: dict | None = None):
    conn = http.client.HTTPConnection(node.http, timeout=30)
    try:
        conn.request("POST", path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def one_input(dtype: str, shape, data=None, size=None) -> dict:
    t = {"name": "INPUT0", "shape": shape, "datatype": dtype}
    if data is not None:
        t["data"] = data
    if size is not None:
        t["parameters"] = {"binary_data_size": size}
    return t


MALFORMED = {
    "wrong-datatype": ("topk", {"parameters": {"k": 1}, "inputs": [one_input("FP32", [1], [1.0])]}, b"", 400),
    "shape-mismatch": ("echo", {"inputs": [one_input("UINT8", [4], [1, 2])]}, b"", 400),
    "missing-input": ("matmul", {"inputs": [one_input("FP32", [1, 1], [1.0])]}, b"", 400),
    "missing-param": ("topk", {"inputs": [one_input("INT32", [1], [1])]}, b"", 400),
    "bad-binary-size": ("minmax", {"inputs": [one_input("FP32", [2], size=7)]}, b"\0" * 7, 400),
    "short-binary": ("minmax", {"inputs": [one_input("FP32", [2], size=8)]}, b"\0" * 4, 400),
    "huge-declared": (
        "echo",
        {"inputs": [one_input("UINT8", [2**62], size=2**62)]},
        b"\0" * 16,
        400,
    ),
    "not-json": ("echo", None, b"", 400),
    "unknown-model": ("nope", {"inputs": []}, b"", 404),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_requests_get_the_protocols_error(client, node, case):
    model, doc, tail, status = MALFORMED[case]
    head = b"{not json" if doc is None else json.dumps(doc).encode()
    headers = {"Inference-Header-Content-Length": str(len(head))} if tail else {}
    code, body = raw_post(node, f"/v2/models/{model}/infer", head + tail, headers)
    assert code == status, body
    assert isinstance(json.loads(body)["error"], str)
    # The node keeps serving, on new connections and through tritonclient.
    assert client.is_server_ready()
    assert infer(client, "echo", [np.arange(5, dtype=np.uint8)], {}, True).tolist() == list(range(5))


def test_tritonclient_sees_protocol_errors(client):
    t = triton.InferInput("INPUT0", [2], "FP32")
    t.set_data_from_numpy(np.zeros(2, dtype=np.float32))
    with pytest.raises(InferenceServerException, match="datatype FP32"):
        client.infer("topk", [t], parameters={"k": 1})
    with pytest.raises(InferenceServerException, match="unknown model"):
        client.get_model_metadata("no_such_model")
    assert not client.is_model_ready("no_such_model")


# The recipes of docs/inference.md print what the page says (tagged blocks, as in
# test_recipes.py: `<!-- recipe: NAME LANG -->` and `<!-- output: NAME -->`).
PAGE = Path(__file__).resolve().parents[1] / "inference.md"
BLOCKS = tagged_blocks(PAGE)
OUTPUTS = {b.name: b.text for b in BLOCKS if b.kind == "output"}
RECIPES = [b for b in BLOCKS if b.kind == "recipe"]


def test_the_page_has_recipes_with_outputs():
    assert len(RECIPES) >= 3
    for b in RECIPES:
        assert b.name.rsplit(" ", 1)[0] in OUTPUTS, f"{PAGE}:{b.line}: no output for {b.name}"


@pytest.mark.parametrize("block", RECIPES, ids=lambda b: b.name)
def test_recipe_prints_the_documented_output(node, block, tmp_path):
    script = tmp_path / ("recipe.sh" if block.lang == "sh" else "recipe.py")
    script.write_text(block.text)
    env = {
        **os.environ,
        "NETACCEL_NODE": node.url,
        "NETACCEL_GRPC": node.grpc or "",
        "NETACCEL_BIN": str(node.bin_dir),
    }
    cmd = ["bash", str(script)] if block.lang == "sh" else [sys.executable, str(script)]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout == OUTPUTS[block.name.rsplit(" ", 1)[0]]


@pytest.mark.parametrize(
    "method, path, status",
    [
        ("GET", "/v2/models/echo/versions/1", 200),
        ("GET", "/v2/models/echo/versions/1/ready", 200),
        ("GET", "/v2/models/echo/versions/2", 404),
        ("GET", "/v2/models/echo/nothing", 404),
        ("POST", "/v2/models/echo", 405),
        ("GET", "/v2/models/echo/infer", 405),
        ("DELETE", "/v2/health/live", 405),
        ("HEAD", "/v2/health/ready", 200),
    ],
)
def test_routes_answer_with_the_protocols_statuses(node, method, path, status):
    conn = http.client.HTTPConnection(node.http, timeout=30)
    try:
        conn.request(method, path)
        r = conn.getresponse()
        body = r.read()
    finally:
        conn.close()
    assert r.status == status, body
    if status >= 400:
        assert isinstance(json.loads(body)["error"], str)
