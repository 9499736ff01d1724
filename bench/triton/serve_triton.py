"""NVIDIA Triton Inference Server (through PyTriton, which bundles tritonserver and its
Python backend) serving to_uppercase as a numpy function, for bench/triton/run.sh.

Usage: python serve_triton.py HTTP_PORT GRPC_PORT METRICS_PORT

The model takes INPUT0, UINT8 [-1], and answers OUTPUT0, the same bytes with a-z made
A-Z: the contract of netaccel's to_uppercase. No batching (max_batch_size 0), as the
netaccel model declares, so both servers get the same requests. Serves until SIGTERM
or SIGINT.
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


def main():
    http_port, grpc_port, metrics_port = (int(p) for p in sys.argv[1:4])
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
        triton.bind(
            model_name="to_uppercase",
            infer_func=to_uppercase,
            inputs=[Tensor(name="INPUT0", dtype=np.uint8, shape=(-1,))],
            outputs=[Tensor(name="OUTPUT0", dtype=np.uint8, shape=(-1,))],
            config=ModelConfig(batching=False),
            strict=True,
        )
        triton.serve()


if __name__ == "__main__":
    main()
