"""ONNX models in slots (docs/inference.md, "ONNX models"): the digits CNN of
models/ served by a node from a model repository, over /v1/fn, RAC and the v2
protocol (tritonclient), against onnxruntime on the same file.

- the node's logits over the whole held-out set equal onnxruntime's (to float
  rounding) and so do its predictions, over each transport, in batches and alone;
- a model that cannot be served (not an ONNX file; a config whose tensors are not the
  model's) is refused at start with its folder and reason, and the rest is served;
- the same over gRPC (the unmodified tritonclient[grpc]), plain and over TLS;
- a wrong input size or shape gets each protocol's error, and the node keeps serving;
- a slot can be reconfigured to the model at runtime like to any accelerator.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT, require, running_node
from docblocks import tagged_blocks

try:
    import numpy as np
    import onnxruntime
    import tritonclient.http as triton
    from tritonclient.utils import InferenceServerException
    from sklearn.datasets import load_digits  # noqa: F401  (the held-out split)
except ImportError as e:  # pragma: no cover - a missing prerequisite
    if os.environ.get("CI") == "true":
        raise
    pytest.skip(f"a prerequisite is not installed ({e})", allow_module_level=True)

sys.path.insert(0, str(ROOT / "models"))
sys.path.insert(0, str(ROOT / "clients" / "python"))
from netaccel import Client, RacError  # noqa: E402
from train_digits import held_out_split  # noqa: E402

MODELS = ROOT / "models"
BATCH = 64


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """A repository with the digits CNN and two models that must be refused."""
    r = tmp_path_factory.mktemp("models")
    shutil.copytree(MODELS / "digits", r / "digits")
    (r / "garbage" / "1").mkdir(parents=True)
    shutil.copy(MODELS / "digits" / "config.toml", r / "garbage" / "config.toml")
    (r / "garbage" / "1" / "model.onnx").write_bytes(b"this is not an ONNX model")
    shutil.copytree(MODELS / "digits", r / "mismatch")
    config = (r / "mismatch" / "config.toml").read_text().replace("dims = [10]", "dims = [12]")
    (r / "mismatch" / "config.toml").write_text(config)
    return r


@pytest.fixture(scope="module")
def onnx_node(tmp_path_factory, repo):
    config = f"models_dir = {json.dumps(str(repo))}\n"
    with running_node(tmp_path_factory.mktemp("onnx-node"), config) as n:
        yield n


@pytest.fixture(scope="module")
def held_out():
    _, x_test, _, y_test = held_out_split()
    session = onnxruntime.InferenceSession(
        str(MODELS / "digits" / "1" / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    (reference,) = session.run(None, {"image": x_test})
    return x_test, y_test, reference


def batches(x):
    for start in range(0, len(x), BATCH):
        yield x[start : start + BATCH]


def post(node, path: str, body: bytes, headers=None):
    req = urllib.request.Request(node.url + path, data=body, method="POST", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def v1(node, images) -> np.ndarray:
    status, body = post(node, "/v1/fn/digits", images.astype(np.float32).tobytes())
    assert status == 200, body
    return np.frombuffer(body, dtype=np.float32).reshape(len(images), 10)


def check_equal(name: str, logits: np.ndarray, reference: np.ndarray, y_test):
    assert logits.shape == reference.shape
    np.testing.assert_allclose(logits, reference, rtol=1e-4, atol=1e-4, err_msg=name)
    assert (logits.argmax(1) == reference.argmax(1)).all(), name
    accuracy = float((logits.argmax(1) == y_test).mean())
    assert accuracy >= 0.97, f"{name}: held-out accuracy {accuracy:.4f}"


def test_the_node_serves_the_model_and_refuses_the_broken_ones(onnx_node):
    names = {a["name"]: a for a in onnx_node.get_json("/v1/accelerators")}
    assert "digits" in names and names["digits"]["backends"] == ["cpu"]
    assert names["digits"]["slots"], "the default CPU device gives it a slot"
    assert "garbage" not in names and "mismatch" not in names
    log = "\n".join(onnx_node.log)
    assert "ONNX model refused" in log and "garbage" in log and "not a model tract can read" in log
    assert "mismatch" in log and "[12]" in log
    meta = onnx_node.get_json("/v2/models/digits")
    assert meta["inputs"] == [{"name": "image", "datatype": "FP32", "shape": [-1, 1, 8, 8]}]
    assert meta["outputs"] == [{"name": "logits", "datatype": "FP32", "shape": [-1, 10]}]
    config = onnx_node.get_json("/v2/models/digits/config")
    assert config["max_batch_size"] == BATCH and config["input"][0]["dims"] == [1, 8, 8]


def test_v1_fn_equals_onnxruntime_over_the_held_out_set(onnx_node, held_out):
    x, y, reference = held_out
    logits = np.concatenate([v1(onnx_node, b) for b in batches(x)])
    check_equal("/v1/fn in batches of 64", logits, reference, y)
    # One image alone gives its row of the batch.
    for i in (0, 7, len(x) - 1):
        np.testing.assert_allclose(v1(onnx_node, x[i : i + 1])[0], reference[i], rtol=1e-4, atol=1e-4)


def test_rac_equals_onnxruntime_over_the_held_out_set(onnx_node, held_out):
    x, y, reference = held_out
    with Client.from_addr(onnx_node.rac, timeout=30) as c:
        out = [c.call("digits", b.astype(np.float32).tobytes()) for b in batches(x)]
        logits = np.frombuffer(b"".join(out), dtype=np.float32).reshape(-1, 10)
        check_equal("RAC in batches of 64", logits, reference, y)
        one = np.frombuffer(c.call("digits", x[3:4].tobytes()), dtype=np.float32)
        np.testing.assert_allclose(one, reference[3], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("binary", [True, False], ids=["binary", "json"])
def test_v2_equals_onnxruntime_over_the_held_out_set(onnx_node, held_out, binary):
    x, y, reference = held_out
    with triton.InferenceServerClient(onnx_node.http, network_timeout=30) as c:
        out = []
        for b in batches(x):
            t = triton.InferInput("image", list(b.shape), "FP32")
            t.set_data_from_numpy(b, binary_data=binary)
            r = c.infer("digits", [t], outputs=[triton.InferRequestedOutput("logits", binary_data=binary)])
            out.append(r.as_numpy("logits"))
        check_equal(f"v2 ({'binary' if binary else 'JSON'})", np.concatenate(out), reference, y)


@pytest.fixture(scope="module")
def ort_node(tmp_path_factory):
    """A node whose digits model is run by ONNX Runtime (`backend = "onnxruntime"`),
    loaded from the onnxruntime wheel's own libonnxruntime.so, as docs/onnx.md says."""
    import glob

    libs = sorted(glob.glob(os.path.join(os.path.dirname(onnxruntime.__file__), "capi", "libonnxruntime.so*")))
    assert libs, "the onnxruntime wheel carries no libonnxruntime.so"
    r = tmp_path_factory.mktemp("ort-models")
    shutil.copytree(MODELS / "digits", r / "digits")
    config = (r / "digits" / "config.toml").read_text()
    (r / "digits" / "config.toml").write_text('backend = "onnxruntime"\n' + config)
    node_config = f"models_dir = {json.dumps(str(r))}\nonnxruntime_library = {json.dumps(libs[0])}\n"
    with running_node(tmp_path_factory.mktemp("ort-node"), node_config) as n:
        yield n


def test_the_onnxruntime_engine_equals_onnxruntime_over_the_held_out_set(ort_node, held_out):
    """The same held-out comparison with the model run by ONNX Runtime in the slot,
    over /v1/fn and RAC, in batches of 64 and one image at a time."""
    x, y, reference = held_out
    logits = np.concatenate([v1(ort_node, b) for b in batches(x)])
    check_equal("/v1/fn, ONNX Runtime engine", logits, reference, y)
    with Client.from_addr(ort_node.rac, timeout=30) as c:
        ones = [c.call("digits", x[i : i + 1].astype(np.float32).tobytes()) for i in range(len(x))]
    logits = np.frombuffer(b"".join(ones), dtype=np.float32).reshape(-1, 10)
    check_equal("RAC one image at a time, ONNX Runtime engine", logits, reference, y)


def test_wrong_inputs_get_each_protocols_error_and_the_node_keeps_serving(onnx_node, held_out):
    x, _, reference = held_out
    # /v1/fn: a payload that is not a whole number of images, or too many images.
    for payload in (b"abc", x[:1].tobytes()[:-4], np.zeros((BATCH + 1, 1, 8, 8), np.float32).tobytes()):
        status, body = post(onnx_node, "/v1/fn/digits", payload)
        assert status == 400 and b"items of 256 bytes" in body, (status, body)
    # RAC: the same as BAD_REQUEST.
    with Client.from_addr(onnx_node.rac, timeout=30) as c:
        with pytest.raises(RacError, match="256 bytes"):
            c.call("digits", b"\0" * 100)
        assert len(c.call("digits", x[:2].tobytes())) == 2 * 40
    # v2: shapes without the batch axis, a wrong image size, a batch over the maximum,
    # a wrong datatype, an unknown input or output.
    cases = [
        ({"name": "image", "shape": [1, 8, 8], "datatype": "FP32", "data": [0] * 64}, "takes shape"),
        ({"name": "image", "shape": [1, 1, 9, 9], "datatype": "FP32", "data": [0] * 81}, "takes shape"),
        ({"name": "image", "shape": [65, 1, 8, 8], "datatype": "FP32", "data": [0] * 65 * 64}, "1 to 64"),
        ({"name": "image", "shape": [1, 1, 8, 8], "datatype": "INT32", "data": [0] * 64}, "datatype INT32"),
        ({"name": "pixels", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": [0] * 64}, "image"),
        ({"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": [0] * 63}, "63 data elements"),
    ]
    for tensor, message in cases:
        status, body = post(onnx_node, "/v2/models/digits/infer", json.dumps({"inputs": [tensor]}).encode())
        assert status == 400, (tensor["shape"], body)
        assert message in json.loads(body)["error"], body
    good = {"name": "image", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": x[0].ravel().tolist()}
    status, body = post(
        onnx_node,
        "/v2/models/digits/infer",
        json.dumps({"inputs": [good], "outputs": [{"name": "probabilities"}]}).encode(),
    )
    assert status == 400 and "its outputs are logits" in json.loads(body)["error"]
    with triton.InferenceServerClient(onnx_node.http, network_timeout=30) as c:
        t = triton.InferInput("image", [2, 64], "FP32")
        t.set_data_from_numpy(x[:2].reshape(2, 64))
        with pytest.raises(InferenceServerException, match="takes shape"):
            c.infer("digits", [t])
    # Still serving, with the right answers.
    np.testing.assert_allclose(v1(onnx_node, x[:5]), reference[:5], rtol=1e-4, atol=1e-4)


def test_a_slot_loads_the_model_at_runtime(onnx_node, held_out):
    x, _, reference = held_out
    slots = onnx_node.get_json("/v1/slots")
    echo = next(s["id"] for s in slots if s["accelerator"] == "echo")

    def load(slot: int, name: str):
        req = urllib.request.Request(
            f"{onnx_node.url}/v1/slots/{slot}",
            data=json.dumps({"accelerator": name}).encode(),
            method="PUT",
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())

    try:
        answer = load(echo, "digits")
        assert answer["accelerator"] == "digits"
        digits_slots = [a for a in onnx_node.get_json("/v1/accelerators") if a["name"] == "digits"][0]["slots"]
        assert echo in digits_slots and len(digits_slots) == 2
        for _ in range(4):  # spread over both slots
            np.testing.assert_allclose(v1(onnx_node, x[:8]), reference[:8], rtol=1e-4, atol=1e-4)
    finally:
        load(echo, "echo")


PAGE = ROOT / "docs" / "onnx.md"
BLOCKS = tagged_blocks(PAGE)
OUTPUTS = {b.name: b.text for b in BLOCKS if b.kind == "output"}
RECIPES = [b for b in BLOCKS if b.kind == "recipe"]


def test_the_page_has_its_recipe():
    assert [b.name for b in RECIPES] == ["digits-transports python"]


@pytest.mark.parametrize("block", RECIPES, ids=lambda b: b.name)
def test_recipe_prints_the_documented_output(onnx_node, block, tmp_path):
    script = tmp_path / "recipe.py"
    script.write_text(block.text)
    env = {
        **os.environ,
        "NETACCEL_NODE": onnx_node.url,
        "NETACCEL_RAC_ADDR": onnx_node.rac,
        "NETACCEL_GRPC": onnx_node.grpc,
        "PYTHONPATH": str(ROOT / "clients" / "python"),
    }
    run = subprocess.run(
        [sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout == OUTPUTS[block.name.rsplit(" ", 1)[0]]


@pytest.fixture(scope="module")
def grpc_tls_node(tmp_path_factory, repo):
    """A node serving the repository over gRPC with TLS (docs/tls.md), with the
    certificates docs/tests/test_tls.py makes at test time; its gRPC-over-TLS address
    (by a name the certificate carries) and the CA file to trust."""
    require(shutil.which("openssl") is not None, "the openssl command is not installed")
    from test_tls import listening, make_pki

    pki = tmp_path_factory.mktemp("onnx-pki")
    make_pki(pki)
    config = f"""models_dir = {json.dumps(str(repo))}

[tls]
grpc = "127.0.0.1:0"
cert = "{pki / 'server.pem'}"
key = "{pki / 'server.key'}"
"""
    with running_node(tmp_path_factory.mktemp("onnx-tls-node"), config) as n:
        yield n, listening(n, "grpc_tls").replace("127.0.0.1", "localhost"), pki / "ca.pem"


def grpc_client():
    try:
        import tritonclient.grpc as grpcclient
    except ImportError as e:
        require(False, f"tritonclient[grpc] is not installed ({e})")
    return grpcclient


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_grpc_equals_onnxruntime_over_the_held_out_set(request, held_out, tls):
    """The unmodified tritonclient[grpc]: the model's metadata and configuration, and
    its logits over the whole held-out set in batches (raw contents), over plain gRPC
    and gRPC over TLS."""
    grpcclient = grpc_client()
    x, y, reference = held_out
    if tls:
        _, url, ca = request.getfixturevalue("grpc_tls_node")
        options = {"ssl": True, "root_certificates": str(ca)}
    else:
        url, options = request.getfixturevalue("onnx_node").grpc, {}
    with grpcclient.InferenceServerClient(url, **options) as c:
        assert c.is_model_ready("digits")
        meta = c.get_model_metadata("digits", as_json=True)
        assert meta["platform"] == "onnx"
        assert [(t["name"], t["datatype"], t["shape"]) for t in meta["inputs"]] == [
            ("image", "FP32", ["-1", "1", "8", "8"])
        ]
        assert [(t["name"], t["shape"]) for t in meta["outputs"]] == [("logits", ["-1", "10"])]
        config = c.get_model_config("digits", as_json=True)["config"]
        assert config["max_batch_size"] == BATCH and config["input"][0]["dims"] == ["1", "8", "8"]
        out = []
        for b in batches(x):
            t = grpcclient.InferInput("image", list(b.shape), "FP32")
            t.set_data_from_numpy(b)
            r = c.infer("digits", [t], outputs=[grpcclient.InferRequestedOutput("logits")])
            assert r.get_output("logits").shape == [len(b), 10]
            out.append(r.as_numpy("logits"))
        check_equal(f"gRPC ({'TLS' if tls else 'plain'})", np.concatenate(out), reference, y)


def test_grpc_typed_contents_give_the_same_logits(onnx_node, held_out):
    """Typed `fp32_contents` (which tritonclient never sends: it sends raw bytes),
    through the protocol's own generated stub that tritonclient ships."""
    grpcclient = grpc_client()
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    x, _, reference = held_out
    with grpc.insecure_channel(onnx_node.grpc) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        req = service_pb2.ModelInferRequest(model_name="digits")
        image = req.inputs.add(name="image", datatype="FP32", shape=[2, 1, 8, 8])
        image.contents.fp32_contents.extend(x[:2].ravel().tolist())
        resp = stub.ModelInfer(req, timeout=30)
        assert [(o.name, list(o.shape)) for o in resp.outputs] == [("logits", [2, 10])]
        logits = np.frombuffer(resp.raw_output_contents[0], dtype=np.float32).reshape(2, 10)
        np.testing.assert_allclose(logits, reference[:2], rtol=1e-4, atol=1e-4)
    assert grpcclient  # the client package is the prerequisite of this file's gRPC tests


def test_grpc_malformed_calls_are_invalid_argument_and_the_channel_serves_on(onnx_node, held_out):
    """Each malformed call is INVALID_ARGUMENT with a sentence naming the tensor; a good
    call on the same channel follows each and gives onnxruntime's logits."""
    grpcclient = grpc_client()
    from tritonclient.utils import InferenceServerException

    x, _, reference = held_out

    def image(name="image", shape=(1, 1, 8, 8), datatype="FP32", data=None):
        t = grpcclient.InferInput(name, list(shape), datatype)
        t.set_data_from_numpy(x[:1].reshape(shape) if data is None else data)
        return t

    wrong = [
        ([image(shape=(1, 8, 8))], None, "input image has shape [1, 8, 8]"),
        ([image(datatype="FP64", data=x[:1].astype(np.float64))], None, "input image of model digits has datatype FP64"),
        ([image(name="pixels")], None, "input image of model digits is missing"),
        ([image(shape=(BATCH + 1, 1, 8, 8), data=np.zeros((BATCH + 1, 1, 8, 8), np.float32))], None, "1 to 64"),
        ([image(), image()], None, "takes 1 input(s) (image), the request has 2"),
        ([image()], [grpcclient.InferRequestedOutput("probabilities")], "no output probabilities"),
    ]
    with grpcclient.InferenceServerClient(onnx_node.grpc) as c:
        for inputs, outputs, sentence in wrong:
            with pytest.raises(InferenceServerException) as refused:
                c.infer("digits", inputs, outputs=outputs, client_timeout=30)
            assert refused.value.status() == "StatusCode.INVALID_ARGUMENT", refused.value
            assert sentence in refused.value.message(), refused.value
            good = c.infer("digits", [image()], client_timeout=30).as_numpy("logits")
            np.testing.assert_allclose(good[0], reference[0], rtol=1e-4, atol=1e-4)


# models/train_digits.py as docs/onnx.md says: it runs from any directory, and it
# replaces the committed model only when asked.
COMMITTED_MODEL = ROOT / "models" / "digits" / "1" / "model.onnx"


def test_training_writes_a_new_file_unless_asked_to_replace_the_committed_model(tmp_path, monkeypatch):
    import train_digits

    monkeypatch.chdir(tmp_path)
    assert Path(train_digits.parse_args([]).out).resolve() == tmp_path / "digits.onnx"
    assert Path(train_digits.parse_args(["--out", "x.onnx"]).out).resolve() == tmp_path / "x.onnx"
    assert Path(train_digits.parse_args(["--update-committed"]).out) == COMMITTED_MODEL
    assert COMMITTED_MODEL.is_file()
    with pytest.raises(SystemExit):
        train_digits.parse_args(["--out", "x.onnx", "--update-committed"])


def test_the_training_script_starts_from_any_directory(tmp_path):
    run = subprocess.run(
        [sys.executable, str(ROOT / "models" / "train_digits.py"), "--help"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "./digits.onnx" in run.stdout and "--update-committed" in run.stdout
    assert list(tmp_path.iterdir()) == []
