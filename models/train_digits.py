#!/usr/bin/env python3
"""Trains the digits CNN and exports it to ONNX.

The data set is the one scikit-learn ships (8x8 grey images, pixel values 0..16, ten
classes), split 75/25 with a fixed seed; the 25 % is held out and never trained on.
The network is small enough to train in plain numpy in a few seconds, which keeps the
install light (no deep learning framework):

    image [N, 1, 8, 8] (raw 0..16) -> / 16 -> Conv 16 x 3x3 (pad 1) -> ReLU
      -> MaxPool 2x2 -> Flatten (256) -> Dense 64 -> ReLU -> Dense 10 -> logits [N, 10]

The first axis is the batch. The export uses the `onnx` package's helper API; the
graph computes exactly what `forward` below computes, which the script checks with
onnxruntime when it is installed.

Usage, from any directory:

    python3 models/train_digits.py                     # writes ./digits.onnx
    python3 models/train_digits.py --out FILE          # writes FILE
    python3 models/train_digits.py --update-committed  # rewrites models/digits/1/model.onnx

The committed model is replaced only when asked (`--update-committed`, or its path
given to `--out`). Prints the held-out accuracy. Same seed, same numpy: same weights.
"""

import argparse
import os

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

SEED = 14
TEST_SIZE = 0.25
FILTERS = 16
HIDDEN = 64
EPOCHS = 40
BATCH = 32
LEARNING_RATE = 2e-3


def held_out_split():
    """(x_train, x_test, y_train, y_test): images [N, 1, 8, 8] float32 (0..16)."""
    digits = load_digits()
    x = digits.images.astype(np.float32).reshape(-1, 1, 8, 8)
    return train_test_split(
        x, digits.target, test_size=TEST_SIZE, random_state=SEED, stratify=digits.target
    )


def patches(x):
    """3x3 patches around every pixel (zero padding): [N, 64, 9]."""
    n = x.shape[0]
    p = np.pad(x[:, 0], ((0, 0), (1, 1), (1, 1)))
    cols = [p[:, dy : dy + 8, dx : dx + 8] for dy in range(3) for dx in range(3)]
    return np.stack(cols, axis=-1).reshape(n, 64, 9)


def forward(w, x):
    """Logits, and what backprop needs."""
    cols = patches(x / 16.0)
    conv = cols @ w["conv_w"].reshape(FILTERS, 9).T + w["conv_b"]  # [N, 64, F]
    conv = conv.transpose(0, 2, 1).reshape(-1, FILTERS, 8, 8)  # NCHW
    relu = np.maximum(conv, 0)
    blocks = relu.reshape(-1, FILTERS, 4, 2, 4, 2)
    pooled = blocks.max(axis=(3, 5))
    flat = pooled.reshape(-1, FILTERS * 16)
    h = flat @ w["fc1_w"].T + w["fc1_b"]
    hr = np.maximum(h, 0)
    logits = hr @ w["fc2_w"].T + w["fc2_b"]
    return logits, (cols, conv, blocks, pooled, flat, h, hr)


def gradients(w, x, y):
    logits, (cols, conv, blocks, pooled, flat, h, hr) = forward(w, x)
    n = x.shape[0]
    z = logits - logits.max(axis=1, keepdims=True)
    prob = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    d = prob
    d[np.arange(n), y] -= 1
    d /= n
    g = {"fc2_w": d.T @ hr, "fc2_b": d.sum(0)}
    dh = (d @ w["fc2_w"]) * (h > 0)
    g["fc1_w"] = dh.T @ flat
    g["fc1_b"] = dh.sum(0)
    dpool = (dh @ w["fc1_w"]).reshape(pooled.shape)
    # The max of each 2x2 block takes the gradient (ties: all of them, rare on floats).
    mask = blocks == pooled[:, :, :, None, :, None]
    drelu = (mask * dpool[:, :, :, None, :, None]).reshape(conv.shape)
    dconv = (drelu * (conv > 0)).reshape(n, FILTERS, 64).transpose(0, 2, 1)  # [N, 64, F]
    g["conv_w"] = np.einsum("npf,npk->fk", dconv, cols).reshape(FILTERS, 1, 3, 3)
    g["conv_b"] = dconv.sum((0, 1))
    return g


def train(x, y, rng):
    def init(shape, fan_in):
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    w = {
        "conv_w": init((FILTERS, 1, 3, 3), 9),
        "conv_b": np.zeros(FILTERS, np.float32),
        "fc1_w": init((HIDDEN, FILTERS * 16), FILTERS * 16),
        "fc1_b": np.zeros(HIDDEN, np.float32),
        "fc2_w": init((10, HIDDEN), HIDDEN),
        "fc2_b": np.zeros(10, np.float32),
    }
    # Adam.
    m = {k: np.zeros_like(v) for k, v in w.items()}
    v = {k: np.zeros_like(v) for k, v in w.items()}
    step = 0
    for _ in range(EPOCHS):
        order = rng.permutation(len(x))
        for start in range(0, len(x), BATCH):
            idx = order[start : start + BATCH]
            g = gradients(w, x[idx], y[idx])
            step += 1
            for k in w:
                m[k] = 0.9 * m[k] + 0.1 * g[k]
                v[k] = 0.999 * v[k] + 0.001 * g[k] ** 2
                mh = m[k] / (1 - 0.9**step)
                vh = v[k] / (1 - 0.999**step)
                w[k] = (w[k] - LEARNING_RATE * mh / (np.sqrt(vh) + 1e-8)).astype(np.float32)
    return w


def export(w, path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def const(name, value):
        return numpy_helper.from_array(np.asarray(value, np.float32), name)

    nodes = [
        helper.make_node("Div", ["image", "scale"], ["scaled"]),
        helper.make_node(
            "Conv", ["scaled", "conv_w", "conv_b"], ["conv"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]
        ),
        helper.make_node("Relu", ["conv"], ["conv_relu"]),
        helper.make_node("MaxPool", ["conv_relu"], ["pooled"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["pooled"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "fc1_w", "fc1_b"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["h_relu"]),
        helper.make_node("Gemm", ["h_relu", "fc2_w", "fc2_b"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "digits_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        initializer=[const("scale", 16.0)] + [const(k, w[k]) for k in sorted(w)],
    )
    # Opset 13 and IR 8: read by tract and by every onnxruntime of the last years.
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 13)], producer_name="netaccel"
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    onnx.save(model, path)


#: The model the repository serves (models/digits/1/model.onnx), wherever the script
#: is run from.
COMMITTED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "digits", "1", "model.onnx")


def parse_args(argv=None):
    """The command line; `out` is where the model goes (the committed model only when
    asked)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = ap.add_mutually_exclusive_group()
    where.add_argument(
        "--out", default="digits.onnx", help="where to write the model (default: ./digits.onnx)"
    )
    where.add_argument(
        "--update-committed",
        action="store_true",
        help=f"replace the repository's model, {os.path.relpath(COMMITTED)}",
    )
    args = ap.parse_args(argv)
    if args.update_committed:
        args.out = COMMITTED
    return args


def main():
    args = parse_args()
    x_train, x_test, y_train, y_test = held_out_split()
    w = train(x_train, y_train, np.random.default_rng(SEED))
    logits, _ = forward(w, x_test)
    accuracy = float((logits.argmax(1) == y_test).mean())
    print(f"held-out accuracy: {accuracy * 100:.2f} % ({len(y_test)} images, seed {SEED})")
    export(w, args.out)
    try:
        import onnxruntime
    except ImportError:
        return
    session = onnxruntime.InferenceSession(args.out, providers=["CPUExecutionProvider"])
    (ort,) = session.run(None, {"image": x_test})
    assert np.allclose(ort, logits, atol=1e-4), "the ONNX graph differs from forward()"
    assert (ort.argmax(1) == logits.argmax(1)).all()
    shown = os.path.relpath(args.out)
    print(f"exported {shown} ({os.path.getsize(args.out)} bytes); onnxruntime agrees")


if __name__ == "__main__":
    main()
