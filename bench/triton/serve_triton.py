"""NVIDIA Triton Inference Server (through PyTriton, which bundles tritonserver and its
Python backend) serving a model as a numpy function, for bench/triton/run.sh and
bench/triton/simple.py.

Usage: python serve_triton.py HTTP_PORT GRPC_PORT METRICS_PORT [MODEL]

MODEL `to_uppercase` (the default) takes INPUT0, UINT8 [-1], and answers OUTPUT0, the
same bytes with a-z made A-Z: the contract of netaccel's to_uppercase. No batching
(max_batch_size 0), as the netaccel model declares, so both servers get the same
requests. MODEL `simple` is Triton's examples' model: INPUT0, INPUT1 INT32 [16] with a
batch axis (max_batch_size 8, no dynamic batcher) -> OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 =
INPUT0 - INPUT1. Serves until SIGTERM or SIGINT.
"""
import logging
import sys

import numpy as np
from pytriton.model_config import ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

LOWER_A, LOWER_Z = ord("a"), ord("z")


def to_uppercase(requests):
    answers = []
    for request in requests:
        data = request["INPUT0"]
        lower = (data >= LOWER_A) & (data <= LOWER_Z)
        answers.append({"OUTPUT0": np.where(lower, data - 32, data).astype(np.uint8)})
    return answers


def simple(requests):
    return [
        {"OUTPUT0": (r["INPUT0"] + r["INPUT1"]).astype(np.int32),
         "OUTPUT1": (r["INPUT0"] - r["INPUT1"]).astype(np.int32)}
        for r in requests
    ]


def bind(triton, model):
    if model == "simple":
        ints = [Tensor(name=n, dtype=np.int32, shape=(16,)) for n in ("INPUT0", "INPUT1")]
        outs = [Tensor(name=n, dtype=np.int32, shape=(16,)) for n in ("OUTPUT0", "OUTPUT1")]
        triton.bind(model_name="simple", infer_func=simple, inputs=ints, outputs=outs,
                    config=ModelConfig(batching=True, max_batch_size=8), strict=True)
        return
    triton.bind(
        model_name="to_uppercase",
        infer_func=to_uppercase,
        inputs=[Tensor(name="INPUT0", dtype=np.uint8, shape=(-1,))],
        outputs=[Tensor(name="OUTPUT0", dtype=np.uint8, shape=(-1,))],
        config=ModelConfig(batching=False),
        strict=True,
    )


def main():
    http_port, grpc_port, metrics_port = (int(p) for p in sys.argv[1:4])
    model = sys.argv[4] if len(sys.argv) > 4 else "to_uppercase"
    logging.basicConfig(level=logging.WARNING)
    config = TritonConfig(
        http_address="127.0.0.1",
        http_port=http_port,
        grpc_address="127.0.0.1",
        grpc_port=grpc_port,
        metrics_port=metrics_port,
        log_verbose=0,
    )
    with Triton(config=config) as triton:
        bind(triton, model)
        triton.serve()


if __name__ == "__main__":
    main()
