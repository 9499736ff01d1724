#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets.

Run from anywhere: python3 crates/node/fuzz/seed_corpus.py
Seeds are named seed-*; files the fuzzer adds keep their hash names.
"""
import pathlib

HERE = pathlib.Path(__file__).resolve().parent

HEADS = {
    "get": b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n",
    "get-query": b"GET /v1/fn/topk?k=3 HTTP/1.1\r\nHost: node\r\nAccept: */*\r\n\r\n",
    "post-length": b"POST /v1/fn/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
    "pipelined": b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n",
    "post-chunked": b"POST /v1/fn/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"4\r\nWiki\r\n0\r\n\r\n",
    "expect-continue": b"POST /v1/fn/echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
    b"Content-Length: 3\r\n\r\n",
    "expect-other": b"POST /x HTTP/1.1\r\nExpect: 200-ok\r\nContent-Length: 3\r\n\r\n",
    "http10-keep-alive": b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
    "http10-chunked": b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
    "connection-close": b"GET / HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, close\r\n\r\n",
    "bare-lf": b"GET / HTTP/1.1\nHost: x\n\n",
    "leading-crlf": b"\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "long-uri": b"GET /" + b"a" * 300 + b" HTTP/1.1\r\n\r\n",
    "long-uri-partial": b"GET /" + b"a" * 300,
    # Found by the fuzzer: a prefix was refused 414 although the whole head is valid.
    "long-method": b"G" + b"a" * 93 + b"ET /" + b"a" * 210 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    "huge-header": b"GET / HTTP/1.1\r\nX: " + b"b" * 2100 + b"\r\n\r\n",
    "many-headers": b"GET / HTTP/1.1\r\n" + b"A: b\r\n" * 65 + b"\r\n",
    "bad-version": b"GET / HTTP/2.0\r\n\r\n",
    "garbage-version": b"GET / FOO/1.1\r\n\r\n",
    "absolute-form": b"GET http://x/ HTTP/1.1\r\n\r\n",
    "cl-and-te": b"POST /x HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
    "cl-conflict": b"POST /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    "cl-huge": b"POST /x HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
    "te-gzip": b"POST /x HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
    "te-chunked-gzip": b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
    "te-empty": b"POST /x HTTP/1.1\r\nTransfer-Encoding: ,\r\n\r\n",
    "bad-header": b"GET / HTTP/1.1\r\nBad Header\r\n\r\n",
    # RFC 9112 §3.2: HTTP/1.1 needs exactly one valid Host.
    "no-host": b"GET / HTTP/1.1\r\n\r\n",
    "two-hosts": b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    "bad-host": b"GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
}

CHUNKED = {
    "wikipedia": b"4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nX-T: 1\r\n\r\nNEXT",
    "empty": b"0\r\n\r\n",
    "upper-hex": b"A\r\n0123456789\r\n0\r\n\r\n",
    "partial": b"10\r\nabc",
    "bad-size": b"zz\r\n",
    "no-crlf-after-data": b"3\r\nabcX\r\n",
    "bare-lf": b"3\nabc\r\n",
    "long-line": b"1" * 1100,
    "huge-size": b"fffffffffffffff\r\n",
    "bad-trailer": b"0\r\nbad trailer\n\r\n",
    "big-trailers": b"0\r\n" + b"T: " + b"t" * 8200 + b"\r\n\r\n",
}


# v2 inference requests: the first byte chooses the JSON length (0: all JSON; see
# v2::infer::fuzzing), the rest is the body.
V2_INFER = {
    "json-topk": b"\x00" + b'{"parameters":{"k":2},"inputs":[{"name":"INPUT0","shape":[3],'
    b'"datatype":"INT32","data":[5,-1,9]}]}',
    "json-nested": b"\x00" + b'{"inputs":[{"name":"INPUT0","shape":[2,2],"datatype":"UINT8",'
    b'"data":[[1,2],[3,4]]}],"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}}]}',
    "binary-fp32": bytes([96]) + b'{"inputs":[{"name":"INPUT0","shape":[1],"datatype":"FP32",'
    b'"parameters":{"binary_data_size":4}}]}' + b"\x00\x00\x80\x3f",
    "huge-shape": b"\x00" + b'{"inputs":[{"name":"INPUT0","shape":[9223372036854775807],'
    b'"datatype":"UINT8","parameters":{"binary_data_size":18446744073709551615}}]}',
}


# gRPC ModelInfer requests (protobuf, written with the few encodings below): raw and
# typed tensors, parameters, and sizes that lie.
def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (strings, bytes, messages, packed repeated)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def packed(values) -> bytes:
    return b"".join(varint(v) for v in values)


def tensor(name: str, datatype: str, shape, contents: bytes = b"") -> bytes:
    t = field(1, name.encode()) + field(2, datatype.encode()) + field(3, packed(shape))
    return t + (field(5, contents) if contents else b"")


def int_param(key: str, value: int) -> bytes:
    return field(1, key.encode()) + field(2, varint(2 << 3) + varint(value))


GRPC_INFER = {
    "raw-topk": field(1, b"topk") + field(4, int_param("k", 2))
    + field(5, tensor("INPUT0", "INT32", [3])) + field(7, bytes(12)),
    "typed-uint8": field(1, b"echo") + field(5, tensor("INPUT0", "UINT8", [3], field(4, packed([104, 105, 256])))),
    "raw-matmul": field(1, b"matmul") + field(5, tensor("INPUT1", "FP32", [1, 1]))
    + field(5, tensor("INPUT0", "FP32", [1, 1])) + field(7, bytes(4)) + field(7, bytes(4))
    + field(6, field(1, b"OUTPUT0")),
    "huge-shape": field(1, b"sobel") + field(5, tensor("INPUT0", "UINT8", [1 << 40, 1 << 40]))
    + field(7, bytes(4)),
    "negative-shape": field(1, b"echo") + field(5, tensor("INPUT0", "UINT8", [-1])) + field(7, b""),
}


def main():
    for target, seeds in (
        ("http_head", HEADS),
        ("http_chunked", CHUNKED),
        ("v2_infer", V2_INFER),
        ("grpc_infer", GRPC_INFER),
    ):
        d = HERE / "corpus" / target
        d.mkdir(parents=True, exist_ok=True)
        for name, data in seeds.items():
            (d / ("seed-" + name)).write_bytes(data)


if __name__ == "__main__":
    main()
