"""Writes a model repository of test models, one per family of the Open Inference
Protocol's datatypes, each an ONNX graph of Identity nodes (output k is input k) with
its config.toml: what crates/node/tests/oip_datatypes.rs serves and drives.

usage: make_models.py REPOSITORY [--onnxruntime]

With --onnxruntime the models whose types ONNX Runtime takes in netaccel are written
a second time, named *_ort, with backend = "onnxruntime". A model with a BF16 tensor
(`bf16`) is written too: no engine of netaccel takes BF16, and the node must refuse it
at load, naming the type.
"""
from __future__ import annotations

import os
import sys

import onnx
from onnx import TensorProto, helper

MAX_BATCH = 4
DIMS = [3]

# Model name -> (the protocol's datatype, ONNX element type) of each input.
FAMILIES = {
    "ints": [
        ("INT8", TensorProto.INT8),
        ("INT16", TensorProto.INT16),
        ("INT32", TensorProto.INT32),
        ("INT64", TensorProto.INT64),
        ("UINT8", TensorProto.UINT8),
        ("UINT16", TensorProto.UINT16),
        ("UINT32", TensorProto.UINT32),
        ("UINT64", TensorProto.UINT64),
        ("BOOL", TensorProto.BOOL),
    ],
    "floats": [("FP16", TensorProto.FLOAT16), ("FP32", TensorProto.FLOAT), ("FP64", TensorProto.DOUBLE)],
    "strings": [("BYTES", TensorProto.STRING)],
    "bf16": [("BF16", TensorProto.BFLOAT16)],
}


def config_type(datatype: str) -> str:
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def write(repo: str, name: str, types, backend: str | None) -> None:
    inputs, outputs, nodes, lines = [], [], [], []
    if backend:
        lines.append(f'backend = "{backend}"')
    lines.append(f"max_batch_size = {MAX_BATCH}")
    for k, (datatype, onnx_type) in enumerate(types):
        i, o = f"IN_{datatype}", f"OUT_{datatype}"
        inputs.append(helper.make_tensor_value_info(i, onnx_type, ["batch", *DIMS]))
        outputs.append(helper.make_tensor_value_info(o, onnx_type, ["batch", *DIMS]))
        nodes.append(helper.make_node("Identity", [i], [o], name=f"identity{k}"))
    for kind in ("input", "output"):
        for datatype, _ in types:
            prefix = "IN" if kind == "input" else "OUT"
            lines += [
                f"[[{kind}]]",
                f'name = "{prefix}_{datatype}"',
                f'data_type = "{config_type(datatype)}"',
                f"dims = {DIMS}",
            ]
    graph = helper.make_graph(nodes, name, inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    os.makedirs(os.path.join(repo, name, "1"), exist_ok=True)
    onnx.save(model, os.path.join(repo, name, "1", "model.onnx"))
    with open(os.path.join(repo, name, "config.toml"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main() -> None:
    repo = sys.argv[1]
    for name, types in FAMILIES.items():
        write(repo, name, types, None)
    if "--onnxruntime" in sys.argv[2:]:
        write(repo, "ints_ort", FAMILIES["ints"], "onnxruntime")
        write(repo, "strings_ort", FAMILIES["strings"], "onnxruntime")
        write(repo, "fp16_ort", [("FP16", TensorProto.FLOAT16)], "onnxruntime")


if __name__ == "__main__":
    main()
