"""Every datatype of the Open Inference Protocol through the unmodified tritonclient,
against a node serving the models make_models.py writes (Identity: each output is
its input). Run by crates/node/tests/oip_datatypes.rs.

usage: datatypes.py HTTP_ADDR GRPC_ADDR MODEL...

For each model, over HTTP the inputs go once as JSON and once as binary tensor data
(outputs asked for the other way round), and over gRPC once as raw_input_contents
and once as typed contents (for the types that have a typed field); every output must
equal its input. A wrong datatype must be refused in Triton's words.
"""
from __future__ import annotations

import sys

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

import grpc

NUMPY = {
    "BOOL": np.bool_,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
}

# The typed field of each datatype, as Triton maps them; FP16 has none.
TYPED = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def sample(datatype: str, batch: int = 2) -> np.ndarray:
    """Values that reach each type's extremes."""
    n = batch * 3
    if datatype == "BYTES":
        words = [b"", b"a", "h\u00e9llo".encode(), b"x" * 300, b"netaccel", b"0"]
        return np.array(words[:n], dtype=np.object_).reshape(batch, 3)
    if datatype == "BOOL":
        return (np.arange(n) % 2 == 0).reshape(batch, 3)
    t = NUMPY[datatype]
    if np.issubdtype(t, np.integer):
        info = np.iinfo(t)
        values = [info.min, info.max, 0, 1, info.max // 3, info.min // 5]
    else:
        values = [0.5, -1.25, 1024.0, -0.0, 3.0, 65504.0]
    return np.array(values[:n], dtype=t).reshape(batch, 3)


def same(got: np.ndarray, want: np.ndarray) -> bool:
    """Equal element for element (BYTES read from JSON come back as str)."""
    if want.dtype == np.object_:
        got = np.vectorize(lambda v: v.encode() if isinstance(v, str) else v, otypes=[object])(got)
        return got.shape == want.shape and all(g == w for g, w in zip(got.flat, want.flat))
    return got.shape == want.shape and np.array_equal(got.astype(want.dtype), want)


def names(model_meta) -> list[str]:
    return [i["name"].split("_", 1)[1] for i in model_meta["inputs"]]


def check_http(client, model: str, types: list[str]) -> None:
    for binary in (False, True):
        inputs, want = [], {}
        for dt in types:
            a = sample(dt)
            i = httpclient.InferInput(f"IN_{dt}", list(a.shape), dt)
            i.set_data_from_numpy(a, binary_data=binary)
            inputs.append(i)
            want[f"OUT_{dt}"] = a
        outputs = [httpclient.InferRequestedOutput(o, binary_data=not binary) for o in want]
        result = client.infer(model, inputs, outputs=outputs)
        for name, a in want.items():
            got = result.as_numpy(name)
            assert got is not None, (model, name)
            assert same(got, a), (model, name, binary, got, a)
    # Each output its own binary_data; outputs not asked for are not answered.
    if len(types) >= 2:
        first, last = f"OUT_{types[0]}", f"OUT_{types[-1]}"
        outputs = [
            httpclient.InferRequestedOutput(last, binary_data=True),
            httpclient.InferRequestedOutput(first, binary_data=False),
        ]
        result = client.infer(model, inputs, outputs=outputs)
        answered = result.get_response()["outputs"]
        assert [o["name"] for o in answered] == [last, first], answered
        assert "binary_data_size" in answered[0].get("parameters", {}), answered
        assert "data" in answered[1], answered
        assert same(result.as_numpy(last), want[last]) and same(result.as_numpy(first), want[first])
    print(f"http {model}: ok")


def check_grpc(client, stub, model: str, types: list[str]) -> None:
    inputs, want = [], {}
    for dt in types:
        a = sample(dt)
        i = grpcclient.InferInput(f"IN_{dt}", list(a.shape), dt)
        i.set_data_from_numpy(a)
        inputs.append(i)
        want[f"OUT_{dt}"] = a
    result = client.infer(model, inputs)
    for name, a in want.items():
        got = result.as_numpy(name)
        assert got is not None and same(got, a), (model, name, got)
    # Typed contents, where the datatype has a field.
    typed = [dt for dt in types if dt in TYPED]
    if typed == types:
        req = service_pb2.ModelInferRequest(model_name=model)
        for dt in types:
            a = sample(dt, batch=1)
            tensor = req.inputs.add(name=f"IN_{dt}", datatype=dt, shape=list(a.shape))
            values = a.flatten().tolist()
            getattr(tensor.contents, TYPED[dt]).extend(values)
        resp = stub.ModelInfer(req)
        assert [o.name for o in resp.outputs] == list(want), resp.outputs
        result = grpcclient.InferResult(resp)
        for dt in types:
            got = result.as_numpy(f"OUT_{dt}")
            a = sample(dt, batch=1)
            assert same(got, a), (model, dt, got, a)
    print(f"grpc {model}: ok")


def check_wrong_datatype(http, model: str, types: list[str]) -> None:
    dt = types[0]
    other = "FP32" if dt != "FP32" else "INT32"
    a = sample(other)
    inputs = []
    for t in types:
        b = sample(t) if t != dt else a
        i = httpclient.InferInput(f"IN_{t}", list(b.shape), t if t != dt else other)
        i.set_data_from_numpy(b)
        inputs.append(i)
    try:
        http.infer(model, inputs)
    except InferenceServerException as e:
        words = f"inference input 'IN_{dt}' data-type is '{other}', but model '{model}' expects '{dt}'"
        assert words in str(e), str(e)
    else:
        raise AssertionError("a wrong datatype was accepted")


def main() -> None:
    http_addr, grpc_addr, *models = sys.argv[1:]
    http = httpclient.InferenceServerClient(http_addr)
    client = grpcclient.InferenceServerClient(grpc_addr)
    stub = service_pb2_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(grpc_addr))
    for model in models:
        meta = http.get_model_metadata(model)
        types = names(meta)
        assert [i["datatype"] for i in meta["inputs"]] == types, meta
        config = http.get_model_config(model)
        assert config["input"][0]["data_type"] == ("TYPE_STRING" if types[0] == "BYTES" else f"TYPE_{types[0]}")
        check_http(http, model, types)
        check_grpc(client, stub, model, types)
        check_wrong_datatype(http, model, types)
    assert np_to_triton_dtype(np.float16) == "FP16"


if __name__ == "__main__":
    main()
