#!/usr/bin/env python3
"""Writes, into OUT_DIR, a netaccel model repository with the models that Triton's
Python client examples (`src/python/examples` of triton-inference-server/client) call,
built to the examples' specs as ONNX graphs with the `onnx` package:

- `simple`: INPUT0, INPUT1 INT32 [-1, 16] (max_batch_size 8) -> OUTPUT0 = INPUT0 +
  INPUT1, OUTPUT1 = INPUT0 - INPUT1 (the examples' main model);
- `simple_sequence`: a stateful model of the sequence examples: INPUT INT32
  [-1, 1] -> OUTPUT = INPUT + START (1 on the first call of a sequence, else 0),
  what those examples check; START and READY are control inputs the node fills
  (`[sequence_batching]`);
- `simple_accumulator` (not one of the examples' models): a sequence's running sum
  with implicit state, OUTPUT = INPUT + (START ? 0 : the previous OUTPUT), the node
  keeping STATE between the calls (`[[sequence_batching.state]]`);
- `repeat_int32`: a decoupled model as the repeat example calls it: IN INT32 [10],
  DELAY UINT32 [10], WAIT UINT32 [1] -> OUT INT32 [10], IDX UINT32 [10], answered
  over a gRPC stream as 10 responses (OUT [1] = IN[i], IDX [1] = i), then the final
  flag; the count is fixed at the example's 10 (the node's dims are fixed) and the
  delays are not waited;
- `simple_int8`: the same in INT8, `simple_string`: the same on numbers written as
  strings (BYTES), `simple_identity`: BYTES [-1, -1] -> the same tensor (its dims
  `[-1]` as Triton declares them: each call gives the width). These need
  datatypes the node gains with issue 30's datatype work: a node without them refuses
  them at start (logged) and serves the rest.

    pip install onnx
    python3 bench/triton_examples/make_models.py OUT_DIR
    netaccel-node --models OUT_DIR ...

- `custom_identity_int32`: INPUT0 INT32 [-1, 16] -> OUTPUT0, the same tensor
  (`memory_growth_test.py`);
- `densenet_onnx`: the image examples' classifier, `data_0` FP32 [3, 224, 224]
  (FORMAT_NCHW) -> `fc6_1` FP32 [1000] with `densenet_labels.txt`: a small real
  computation on the image (channel means through a fixed linear layer), not
  DenseNet's weights (see `densenet`); `densenet_batched`, the same with a batch
  axis (max_batch_size 8).

Ensembles (`write_ensembles`, docs/inference.md "Ensembles"): `edge_grid`, an ONNX
model (UINT8 [16, 16] edges -> FP32 [16], each 4x4 tile's mean); `sobel_grid`, the
ensemble of the built-in `sobel` then `edge_grid`; `simple_chain`, an ensemble of
`simple` twice (batched, max_batch_size 8): OUTPUT0 = 2 * INPUT0, OUTPUT1 = 2 * INPUT1;
`image_preprocess`, the node's image engine (`backend = "image"`: an encoded PNG or
JPEG, BYTES [1], -> FP32 [3, 224, 224], INCEPTION-scaled) and
`preprocess_inception_ensemble` (ensemble_image_client.py's model) of it and
`densenet_batched`, its output classified with the labels.

With `--control COUNT`, only the first COUNT of `CONTROL_MODELS`: the repository of
the model control examples, which count the index (7 over HTTP, 8 over gRPC).

The examples' dynamic sequence model (`simple_dyna_sequence`) is not built here: see
docs/inference.md, "Triton's examples".
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

try:
    import onnx
    from onnx import TensorProto, helper
except ImportError:  # pragma: no cover - told to the user
    sys.exit("make_models.py needs the onnx package: pip install onnx")

#: Triton's config type names by ONNX element type.
CONFIG_TYPES = {
    TensorProto.INT32: "TYPE_INT32",
    TensorProto.INT8: "TYPE_INT8",
    TensorProto.UINT32: "TYPE_UINT32",
    TensorProto.STRING: "TYPE_STRING",
    TensorProto.UINT8: "TYPE_UINT8",
    TensorProto.FLOAT: "TYPE_FP32",
}


def add_sub(name: str, elem: int) -> onnx.ModelProto:
    """OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1 on [N, 16]."""
    shape = ["N", 16]
    ins = [helper.make_tensor_value_info(f"INPUT{i}", elem, shape) for i in range(2)]
    outs = [helper.make_tensor_value_info(f"OUTPUT{i}", elem, shape) for i in range(2)]
    if elem == TensorProto.STRING:
        # Numbers written as strings: parsed, added, written back.
        nodes = [
            helper.make_node("Cast", [f"INPUT{i}"], [f"n{i}"], to=TensorProto.INT32)
            for i in range(2)
        ] + [
            helper.make_node("Add", ["n0", "n1"], ["sum"]),
            helper.make_node("Sub", ["n0", "n1"], ["diff"]),
            helper.make_node("Cast", ["sum"], ["OUTPUT0"], to=TensorProto.STRING),
            helper.make_node("Cast", ["diff"], ["OUTPUT1"], to=TensorProto.STRING),
        ]
    else:
        nodes = [
            helper.make_node("Add", ["INPUT0", "INPUT1"], ["OUTPUT0"]),
            helper.make_node("Sub", ["INPUT0", "INPUT1"], ["OUTPUT1"]),
        ]
    graph = helper.make_graph(nodes, name, ins, outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def identity(name: str, elem: int = TensorProto.STRING, width: int | str = "M") -> onnx.ModelProto:
    """OUTPUT0 = INPUT0 on [N, width]; a named width (the default) is a dim each call
    gives (`-1` in the config), as Triton declares `simple_identity`."""
    shape = ["N", width]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["INPUT0"], ["OUTPUT0"])],
        name,
        [helper.make_tensor_value_info("INPUT0", elem, shape)],
        [helper.make_tensor_value_info("OUTPUT0", elem, shape)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


#: `densenet_onnx`'s classes and the file naming them, one a line (Triton's
#: `densenet_labels.txt` names ImageNet's; these are numbered).
DENSENET_CLASSES = 1000
DENSENET_LABELS = "densenet_labels.txt"


def densenet(name: str, batched: bool = False) -> onnx.ModelProto:
    """A stand-in for Triton's `densenet_onnx` with its interface — `data_0` FP32
    [3, 224, 224] (FORMAT_NCHW, no batch axis) -> `fc6_1` FP32 [1000] class scores —
    and a real computation on the image, far smaller than DenseNet's: each channel's
    mean (ReduceMean over height and width), then a fixed linear layer
    (fc6_1 = means x W + b, W [3, 1000] and b [1000] from cosines), so that
    different images get different top classes. `batched`: the same with a batch
    axis in front (`densenet_batched`, the image ensemble's classifier)."""
    lead = ["N"] if batched else []
    axes = [2, 3] if batched else [1, 2]
    weights = [
        math.cos(0.37 * (c + 1) * k + 0.11 * c)
        for c in range(3)
        for k in range(DENSENET_CLASSES)
    ]
    bias = [0.01 * math.sin(0.05 * k) for k in range(DENSENET_CLASSES)]
    graph = helper.make_graph(
        [
            helper.make_node("ReduceMean", ["data_0"], ["means"], axes=axes, keepdims=0),
            helper.make_node("MatMul", ["means", "W"], ["scores"]),
            helper.make_node("Add", ["scores", "b"], ["fc6_1"]),
        ],
        name,
        [helper.make_tensor_value_info("data_0", TensorProto.FLOAT, lead + [3, 224, 224])],
        [helper.make_tensor_value_info("fc6_1", TensorProto.FLOAT, lead + [DENSENET_CLASSES])],
        initializer=[
            helper.make_tensor("W", TensorProto.FLOAT, [3, DENSENET_CLASSES], weights),
            helper.make_tensor("b", TensorProto.FLOAT, [DENSENET_CLASSES], bias),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


#: Lines a model's config adds to a tensor's section, by model and tensor: what
#: Triton's config of that model says beyond type and dims.
TENSOR_EXTRAS = {
    ("densenet_onnx", "data_0"): ['format = "FORMAT_NCHW"'],
    ("densenet_onnx", "fc6_1"): [f'label_filename = "{DENSENET_LABELS}"'],
    ("densenet_batched", "data_0"): ['format = "FORMAT_NCHW"'],
    ("densenet_batched", "fc6_1"): [f'label_filename = "{DENSENET_LABELS}"'],
}


#: The control inputs of `simple_sequence`, after its own input, in graph order.
SEQUENCE_CONTROLS = (("START", "CONTROL_SEQUENCE_START"), ("READY", "CONTROL_SEQUENCE_READY"))


def sequence(name: str) -> onnx.ModelProto:
    """OUTPUT = (INPUT + START) * READY on [N, 1] INT32: Triton's examples send a
    sequence's values and expect each back, the first plus one."""
    shape = ["N", 1]
    names = ["INPUT"] + [c for c, _ in SEQUENCE_CONTROLS]
    ins = [helper.make_tensor_value_info(n, TensorProto.INT32, shape) for n in names]
    graph = helper.make_graph(
        [
            helper.make_node("Add", ["INPUT", "START"], ["started"]),
            helper.make_node("Mul", ["started", "READY"], ["OUTPUT"]),
        ],
        name,
        ins,
        [helper.make_tensor_value_info("OUTPUT", TensorProto.INT32, shape)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


#: How many responses `repeat_int32` gives: the repeat example's count.
REPEAT_COUNT = 10


def repeat(name: str) -> onnx.ModelProto:
    """OUT = IN, IDX = 0..9; DELAY and WAIT are taken (and added as zeros)."""
    u32, i32 = TensorProto.UINT32, TensorProto.INT32
    ins = [
        helper.make_tensor_value_info("IN", i32, [REPEAT_COUNT]),
        helper.make_tensor_value_info("DELAY", u32, [REPEAT_COUNT]),
        helper.make_tensor_value_info("WAIT", u32, [1]),
    ]
    outs = [
        helper.make_tensor_value_info("OUT", i32, [REPEAT_COUNT]),
        helper.make_tensor_value_info("IDX", u32, [REPEAT_COUNT]),
    ]
    index = helper.make_tensor("index", i32, [REPEAT_COUNT], list(range(REPEAT_COUNT)))
    graph = helper.make_graph(
        [
            helper.make_node("Sub", ["DELAY", "DELAY"], ["no_delay"]),
            helper.make_node("Sub", ["WAIT", "WAIT"], ["no_wait"]),
            helper.make_node("Add", ["no_delay", "no_wait"], ["zeros"]),
            helper.make_node("Cast", ["zeros"], ["zeros_i32"], to=i32),
            helper.make_node("Add", ["IN", "zeros_i32"], ["OUT"]),
            helper.make_node("Cast", ["index"], ["index_u32"], to=u32),
            helper.make_node("Add", ["index_u32", "zeros"], ["IDX"]),
        ],
        name,
        ins,
        outs,
        initializer=[index],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


#: The implicit state of `simple_accumulator`: (input, output).
STATE = ("STATE_IN", "STATE_OUT")


def accumulator(name: str) -> onnx.ModelProto:
    """OUTPUT = STATE_OUT = INPUT + STATE_IN * (1 - START) on [N, 1] INT32."""
    shape = ["N", 1]
    names = ["INPUT"] + [c for c, _ in SEQUENCE_CONTROLS] + [STATE[0]]
    ins = [helper.make_tensor_value_info(n, TensorProto.INT32, shape) for n in names]
    one = helper.make_tensor("one", TensorProto.INT32, [1, 1], [1])
    graph = helper.make_graph(
        [
            helper.make_node("Sub", ["one", "START"], ["kept"]),
            helper.make_node("Mul", [STATE[0], "kept"], ["carried"]),
            helper.make_node("Add", ["INPUT", "carried"], ["sum"]),
            helper.make_node("Mul", ["sum", "READY"], ["OUTPUT"]),
            helper.make_node("Identity", ["OUTPUT"], [STATE[1]]),
        ],
        name,
        ins,
        [helper.make_tensor_value_info(n, TensorProto.INT32, shape) for n in ("OUTPUT", STATE[1])],
        initializer=[one],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def sequence_batching(stateful: bool) -> list[str]:
    """The `[sequence_batching]` of a sequence model: its control inputs, and its
    implicit state when it has one."""
    lines = [
        "[sequence_batching]",
        "max_sequence_idle_microseconds = 5000000",
        "[sequence_batching.direct]",
    ]
    for name, kind in SEQUENCE_CONTROLS:
        lines += [
            "[[sequence_batching.control_input]]",
            f'name = "{name}"',
            "[[sequence_batching.control_input.control]]",
            f'kind = "{kind}"',
            "int32_false_true = [0, 1]",
        ]
    if stateful:
        lines += [
            "[[sequence_batching.state]]",
            f'input_name = "{STATE[0]}"',
            f'output_name = "{STATE[1]}"',
            'data_type = "TYPE_INT32"',
            "dims = [1]",
        ]
    return lines + [""]


def config(model: onnx.ModelProto, max_batch_size: int) -> str:
    """The model's config.toml: Triton's fields, the batch axis left out of dims; a
    sequence model's control inputs in `[sequence_batching]`, not `[[input]]`."""
    lines = [f"max_batch_size = {max_batch_size}", ""]
    # Without a batch axis the dims are whole.
    skip = 1 if max_batch_size > 0 else 0
    controls = {c for c, _ in SEQUENCE_CONTROLS} | set(STATE)
    sequenced = any(v.name in controls for v in model.graph.input)
    for section, values in (("input", model.graph.input), ("output", model.graph.output)):
        for v in values:
            if v.name in controls:
                continue
            t = v.type.tensor_type
            # A named dim beyond the batch axis is one each call gives: -1.
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim[skip:]]
            lines += [
                f"[[{section}]]",
                f'name = "{v.name}"',
                f'data_type = "{CONFIG_TYPES[t.elem_type]}"',
                f"dims = {dims}",
                *TENSOR_EXTRAS.get((model.graph.name, v.name), []),
                "",
            ]
    if sequenced:
        lines += sequence_batching(any(v.name == STATE[0] for v in model.graph.input))
    if model.graph.name == "repeat_int32":
        lines += ["[model_transaction_policy]", "decoupled = true", ""]
    return "\n".join(lines)


def models() -> dict[str, tuple[onnx.ModelProto, int]]:
    return {
        "simple": (add_sub("simple", TensorProto.INT32), 8),
        "simple_int8": (add_sub("simple_int8", TensorProto.INT8), 8),
        "simple_string": (add_sub("simple_string", TensorProto.STRING), 8),
        "simple_identity": (identity("simple_identity"), 8),
        "simple_sequence": (sequence("simple_sequence"), 8),
        "simple_accumulator": (accumulator("simple_accumulator"), 8),
        "repeat_int32": (repeat("repeat_int32"), 0),
        "custom_identity_int32": (identity("custom_identity_int32", TensorProto.INT32, 16), 8),
        "densenet_onnx": (densenet("densenet_onnx"), 0),
        "densenet_batched": (densenet("densenet_batched", batched=True), 8),
    }


#: Tiles along each side of `edge_grid`'s image.
GRID = 4


def edge_grid(size: int) -> onnx.ModelProto:
    """UINT8 EDGES [size, size] -> FP32 GRID [GRID * GRID]: each tile's mean."""
    tile = size // GRID
    nodes = [
        helper.make_node("Cast", ["EDGES"], ["f"], to=TensorProto.FLOAT),
        helper.make_node("Reshape", ["f", "image_shape"], ["nchw"]),
        helper.make_node(
            "AveragePool", ["nchw"], ["pooled"], kernel_shape=[tile, tile], strides=[tile, tile]
        ),
        helper.make_node("Reshape", ["pooled", "grid_shape"], ["GRID"]),
    ]
    init = [
        helper.make_tensor("image_shape", TensorProto.INT64, [4], [1, 1, size, size]),
        helper.make_tensor("grid_shape", TensorProto.INT64, [1], [GRID * GRID]),
    ]
    graph = helper.make_graph(
        nodes,
        "edge_grid",
        [helper.make_tensor_value_info("EDGES", TensorProto.UINT8, [size, size])],
        [helper.make_tensor_value_info("GRID", TensorProto.FLOAT, [GRID * GRID])],
        init,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def sobel_grid_config(size: int) -> str:
    """The ensemble `sobel_grid`: the built-in sobel, then `edge_grid`."""
    return f"""platform = "ensemble"
max_batch_size = 0
[[input]]
name = "IMAGE"
data_type = "TYPE_UINT8"
dims = [{size}, {size}]
[[output]]
name = "GRID"
data_type = "TYPE_FP32"
dims = [{GRID * GRID}]
[[ensemble_scheduling.step]]
model_name = "sobel"
input_map = {{ INPUT0 = "IMAGE" }}
output_map = {{ OUTPUT0 = "EDGES" }}
parameters = {{ width = {size}, height = {size} }}
[[ensemble_scheduling.step]]
model_name = "edge_grid"
input_map = {{ EDGES = "EDGES" }}
output_map = {{ GRID = "GRID" }}
"""


SIMPLE_CHAIN = """platform = "ensemble"
max_batch_size = 8
[[input]]
name = "INPUT0"
data_type = "TYPE_INT32"
dims = [16]
[[input]]
name = "INPUT1"
data_type = "TYPE_INT32"
dims = [16]
[[output]]
name = "OUTPUT0"
data_type = "TYPE_INT32"
dims = [16]
[[output]]
name = "OUTPUT1"
data_type = "TYPE_INT32"
dims = [16]
# (a + b) + (a - b) = 2a, (a + b) - (a - b) = 2b
[[ensemble_scheduling.step]]
model_name = "simple"
input_map = { INPUT0 = "INPUT0", INPUT1 = "INPUT1" }
output_map = { OUTPUT0 = "SUM", OUTPUT1 = "DIFF" }
[[ensemble_scheduling.step]]
model_name = "simple"
input_map = { INPUT0 = "SUM", INPUT1 = "DIFF" }
output_map = { OUTPUT0 = "OUTPUT0", OUTPUT1 = "OUTPUT1" }
"""


def write_ensembles(out: Path, size: int = 16) -> list[str]:
    """`edge_grid` for images of `size` x `size`, and the ensembles `sobel_grid` and
    `simple_chain` (an ensemble folder has its config and an empty version folder)."""
    model = edge_grid(size)
    onnx.checker.check_model(model)
    (out / "edge_grid" / "1").mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out / "edge_grid" / "1" / "model.onnx"))
    (out / "edge_grid" / "config.toml").write_text(config(model, 0))
    for name, text in (("sobel_grid", sobel_grid_config(size)), ("simple_chain", SIMPLE_CHAIN)):
        (out / name / "1").mkdir(parents=True, exist_ok=True)
        (out / name / "config.toml").write_text(text)
    return ["edge_grid", "sobel_grid", "simple_chain"]


def densenet_labels() -> str:
    return "".join(f"class_{k}\n" for k in range(DENSENET_CLASSES))


#: The image engine's model: one encoded image (PNG or JPEG) an item -> the
#: classifiers' `data_0`, scaled as Triton's image clients' `-s INCEPTION`.
IMAGE_PREPROCESS = """backend = "image"
max_batch_size = 8
[image]
scaling = "INCEPTION"
format = "FORMAT_NCHW"
pixels_max = 16777216
[[input]]
name = "INPUT"
data_type = "TYPE_STRING"
dims = [1]
[[output]]
name = "OUTPUT"
data_type = "TYPE_FP32"
dims = [3, 224, 224]
"""

#: Triton's `preprocess_inception_ensemble` (ensemble_image_client.py's default
#: model): the image's bytes in, the classes out; its output is classified with the
#: labels file beside it.
IMAGE_ENSEMBLE = f"""platform = "ensemble"
max_batch_size = 8
[[input]]
name = "INPUT"
data_type = "TYPE_STRING"
dims = [1]
[[output]]
name = "OUTPUT"
data_type = "TYPE_FP32"
dims = [{DENSENET_CLASSES}]
label_filename = "{DENSENET_LABELS}"
[[ensemble_scheduling.step]]
model_name = "image_preprocess"
input_map = {{ INPUT = "INPUT" }}
output_map = {{ OUTPUT = "preprocessed_image" }}
[[ensemble_scheduling.step]]
model_name = "densenet_batched"
input_map = {{ data_0 = "preprocessed_image" }}
output_map = {{ fc6_1 = "OUTPUT" }}
"""


def write_image_ensemble(out: Path) -> list[str]:
    """`image_preprocess` (the node's image engine: no ONNX file) and the ensemble
    `preprocess_inception_ensemble` of it and `densenet_batched`."""
    for name, text in (
        ("image_preprocess", IMAGE_PREPROCESS),
        ("preprocess_inception_ensemble", IMAGE_ENSEMBLE),
    ):
        (out / name / "1").mkdir(parents=True, exist_ok=True)
        (out / name / "config.toml").write_text(text)
    (out / "preprocess_inception_ensemble" / DENSENET_LABELS).write_text(densenet_labels())
    return ["image_preprocess", "preprocess_inception_ensemble"]


def write(out: Path) -> list[str]:
    names = []
    for name, (model, max_batch) in models().items():
        onnx.checker.check_model(model)
        folder = out / name
        (folder / "1").mkdir(parents=True, exist_ok=True)
        onnx.save(model, str(folder / "1" / "model.onnx"))
        (folder / "config.toml").write_text(config(model, max_batch))
        if name.startswith("densenet"):
            (folder / DENSENET_LABELS).write_text(densenet_labels())
        names.append(name)
    return names + write_ensembles(out) + write_image_ensemble(out)


#: The repository of the model control examples, which count Triton's test
#: repository's index (7 models over HTTP, 8 over gRPC) before loading `simple`: the
#: first 7 or 8 of these (`--control COUNT`), served with repository_index = "models".
CONTROL_MODELS = (
    "simple",
    "simple_int8",
    "simple_string",
    "simple_identity",
    "simple_sequence",
    "repeat_int32",
    "custom_identity_int32",
    "densenet_onnx",
)


def write_control(out: Path, count: int) -> list[str]:
    all_models = models()
    names = list(CONTROL_MODELS[:count])
    for name in names:
        model, max_batch = all_models[name]
        folder = out / name
        (folder / "1").mkdir(parents=True, exist_ok=True)
        onnx.save(model, str(folder / "1" / "model.onnx"))
        (folder / "config.toml").write_text(config(model, max_batch))
        if name.startswith("densenet"):
            (folder / DENSENET_LABELS).write_text(densenet_labels())
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the model repository to write")
    parser.add_argument(
        "--control",
        type=int,
        choices=range(1, len(CONTROL_MODELS) + 1),
        metavar="COUNT",
        help="write only the first COUNT models of the model control examples' repository",
    )
    args = parser.parse_args()
    names = write_control(args.out, args.control) if args.control else write(args.out)
    print(f"wrote {len(names)} models to {args.out}: {', '.join(names)}")


if __name__ == "__main__":
    main()
