"""NVIDIA Triton Inference Server (through PyTriton, which bundles tritonserver and its
Python backend) serving the digits CNN (models/digits) with ONNX Runtime inside its
Python function and Triton's dynamic batcher in front, for bench/batching/run.sh.

Usage: python serve_triton.py HTTP_PORT GRPC_PORT METRICS_PORT MODEL_ONNX DELAY_US

The model `digits` takes `image`, FP32 [-1, 1, 8, 8], and answers `logits`, FP32
[-1, 10]: the tensors of netaccel's digits model. `@batch` hands the function the
requests the batcher joined as one array (max_batch_size 64, as the model's config;
max_queue_delay_microseconds DELAY_US, as netaccel's). ONNX Runtime runs on one
thread, as a netaccel slot's session does. Serves until SIGTERM or SIGINT.
"""
import logging
import sys

import numpy as np
import onnxruntime
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
from pytriton.triton import Triton, TritonConfig

MAX_BATCH = 64


def main():
    http_port, grpc_port, metrics_port = (int(p) for p in sys.argv[1:4])
    model_path, delay_us = sys.argv[4], int(sys.argv[5])
    logging.basicConfig(level=logging.WARNING)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(model_path, options, providers=["CPUExecutionProvider"])

    @batch
    def digits(image):
        (logits,) = session.run(["logits"], {"image": image.astype(np.float32, copy=False)})
        return {"logits": logits}

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
            model_name="digits",
            infer_func=digits,
            inputs=[Tensor(name="image", dtype=np.float32, shape=(1, 8, 8))],
            outputs=[Tensor(name="logits", dtype=np.float32, shape=(10,))],
            config=ModelConfig(
                max_batch_size=MAX_BATCH,
                batcher=DynamicBatcher(max_queue_delay_microseconds=delay_us),
            ),
            strict=True,
        )
        triton.serve()


if __name__ == "__main__":
    main()
