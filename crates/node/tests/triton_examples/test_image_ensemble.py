"""What Triton's `ensemble_image_client.py` does, with the unmodified `tritonclient`,
against the examples' models (bench/triton_examples/make_models.py): read
`preprocess_inception_ensemble`'s configuration as the client checks it, send encoded
image files (PNG, JPEG) as BYTES, one an item, and get the top classes of the
ensemble's output — the node's image engine (`image_preprocess`, `backend = "image"`)
decodes, resizes and scales each image, then `densenet_batched` classifies it. The
scores are checked against the classifier's own weights applied here, with numpy, to
the picture as Triton's image client preprocesses it with PIL. Then what the example
does not show: an image declaring more pixels than the engine's budget, and bytes
that are no image, are refused naming the image, and the node serves on.
"""
from __future__ import annotations

import io
import os
import struct
import zlib

import pytest

try:
    import numpy as np
    import onnx
    from onnx import numpy_helper
    from PIL import Image
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException
except (ImportError, RuntimeError) as e:  # pragma: no cover - a missing prerequisite
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        raise
    pytest.skip(
        f"tritonclient[http,grpc], onnx or pillow is not installed ({e})", allow_module_level=True
    )

ENSEMBLE = "preprocess_inception_ensemble"
CLASSIFIER = "densenet_batched"
SIDE = 224


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
    """The classifier's scores of a picture preprocessed as image_client.py does
    (`-s INCEPTION`): resized bilinearly, x / 127.5 - 1, channels first."""
    model = onnx.load(str(repository / CLASSIFIER / "1" / "model.onnx"))
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}

    def scores(encoded: bytes) -> np.ndarray:
        img = Image.open(io.BytesIO(encoded)).convert("RGB").resize((SIDE, SIDE), Image.BILINEAR)
        x = np.asarray(img, dtype=np.float64) / 127.5 - 1
        return x.mean(axis=(0, 1)) @ weights["W"].astype(np.float64) + weights["b"]

    return scores


def picture(kind: str, seed: int) -> bytes:
    """A 320 x 240 picture, each channel a gradient at its own slope, encoded."""
    rng = np.random.default_rng(seed)
    slopes = rng.uniform(0.2, 1.0, size=3)
    y, x = np.mgrid[0:240, 0:320]
    pixels = np.stack([(x * s + y * (1 - s)) % 256 for s in slopes], axis=-1).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(out, kind, **({"quality": 95} if kind == "JPEG" else {}))
    return out.getvalue()


def request(module, images: list[bytes]):
    """The ensemble client's input: BYTES [batch, 1], one encoded image a row."""
    data = np.array([[i] for i in images], dtype=np.object_)
    inp = module.InferInput("INPUT", list(data.shape), "BYTES")
    if module is httpclient:
        inp.set_data_from_numpy(data, binary_data=True)
    else:
        inp.set_data_from_numpy(data)
    return [inp]


def test_the_ensemble_client_reads_its_configuration(http, grpc):
    metadata = http.get_model_metadata(ENSEMBLE)
    assert [(t["name"], t["datatype"]) for t in metadata["inputs"]] == [("INPUT", "BYTES")]
    assert [t["name"] for t in metadata["outputs"]] == ["OUTPUT"]
    config = http.get_model_config(ENSEMBLE)
    assert config["platform"] == "ensemble" and config["max_batch_size"] == 8
    assert len(config["input"]) == 1
    steps = [s["model_name"] for s in config["ensemble_scheduling"]["step"]]
    assert steps == ["image_preprocess", CLASSIFIER]
    step = http.get_model_config("image_preprocess")
    assert (step["output"][0]["data_type"], step["output"][0]["dims"]) == ("TYPE_FP32", [3, SIDE, SIDE])
    # The engine that runs each model, as Triton names a backend.
    assert step["backend"] == "image"
    assert grpc.get_model_config("image_preprocess").config.backend == "image"
    assert http.get_model_config(CLASSIFIER)["backend"] == "tract"
    assert grpc.get_model_config(ENSEMBLE).config.max_batch_size == 8
    index = {m["name"]: m["state"] for m in http.get_model_repository_index()}
    assert index["image_preprocess"] == "READY" and index[ENSEMBLE] == "READY"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_encoded_images_are_classified_as_the_classifier_scores_them(http, grpc, scores_of, protocol):
    client, module = (http, httpclient) if protocol == "http" else (grpc, grpcclient)
    images = [picture("PNG", 1), picture("JPEG", 2), picture("PNG", 3)]
    out = [module.InferRequestedOutput("OUTPUT", class_count=3)]
    if module is httpclient:
        out = [httpclient.InferRequestedOutput("OUTPUT", binary_data=True, class_count=3)]
    top = client.infer(ENSEMBLE, request(module, images), outputs=out).as_numpy("OUTPUT")
    assert top.shape == (3, 3)
    for image, row in zip(images, top):
        want = scores_of(image)
        got = [entry.decode().split(":") for entry in row]
        # The engine's resize is the image crate's, not PIL's: the channel means
        # agree to about 1e-3, and so do the scores.
        for score, idx, label in got:
            assert label == f"class_{idx}"
            assert abs(float(score) - want[int(idx)]) < 2e-3, (score, want[int(idx)])
        # The top classes: scores in order, none below the third best by more than
        # the resize's difference.
        scores = [float(score) for score, _, _ in got]
        assert scores == sorted(scores, reverse=True)
        assert min(scores) > np.sort(want)[-3] - 4e-3
    # Different pictures, different answers: the step decodes what it is sent.
    assert len({row[0] for row in top}) > 1 or len({row[1] for row in top}) > 1


def png_declaring(width: int, height: int) -> bytes:
    """A 1 x 1 PNG whose header says `width` x `height` (its CRC made to match)."""
    out = io.BytesIO()
    Image.new("RGB", (1, 1)).save(out, "PNG")
    p = bytearray(out.getvalue())
    assert p[12:16] == b"IHDR"
    p[16:24] = struct.pack(">II", width, height)
    p[29:33] = struct.pack(">I", zlib.crc32(bytes(p[12:29])))
    return bytes(p)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_what_the_step_cannot_decode_is_refused_naming_the_image(http, grpc, scores_of, protocol):
    client, module = (http, httpclient) if protocol == "http" else (grpc, grpcclient)
    status = "400" if protocol == "http" else "StatusCode.INVALID_ARGUMENT"
    for images, want in [
        ([png_declaring(100_000, 100_000)], "image 0: it declares 100000 × 100000 pixels"),
        ([picture("PNG", 1), b"no image at all"], "image 1: not a PNG or JPEG image"),
        ([picture("PNG", 1)[:200]], "image 0: "),
    ]:
        with pytest.raises(InferenceServerException) as e:
            client.infer(ENSEMBLE, request(module, images))
        assert e.value.status() == status, e.value
        message = e.value.message()
        assert f"ensemble {ENSEMBLE}, step 0 (image_preprocess): {want}" in message, message
        if "declares" in want:
            assert "budget of 16777216 pixels (image.pixels_max)" in message
    # The node serves on.
    image = picture("PNG", 4)
    got = client.infer(ENSEMBLE, request(module, [image])).as_numpy("OUTPUT")
    np.testing.assert_allclose(got[0], scores_of(image), atol=2e-3)
