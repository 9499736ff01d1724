#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets from spec/rac-v1-vectors.json.

Run from anywhere: python3 crates/rac-proto/fuzz/seed_corpus.py
Seeds are named seed-*; files the fuzzer adds keep their hash names.
"""
import json
import pathlib
import re
import struct

HERE = pathlib.Path(__file__).resolve().parent
VECTORS = HERE.parent.parent.parent / "spec" / "rac-v1-vectors.json"


def slug(name):
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:60]


def write(target, name, data):
    d = HERE / "corpus" / target
    d.mkdir(parents=True, exist_ok=True)
    (d / ("seed-" + name)).write_bytes(data)


def main():
    for v in json.loads(VECTORS.read_text()):
        message = bytes.fromhex(v["header_hex"]) + bytes.fromhex(v["payload_hex"])
        target = "call_header" if message[4] in (1, 3) else "result_header"
        write(target, slug(v["name"]), message)

    controls = {
        "catalog": b'{"op":"catalog"}',
        "slots-token": b'{"op":"slots","token":"t0k"}',
        "load": b'{"op":"load","slot":1,"accelerator":"sobel","token":"admin"}',
        "hello": b'{"op":"hello","tenant":"team-a","token":"s3cret"}',
        "unknown-op": b'{"op":"reboot"}',
        "missing-field": b'{"op":"load","accelerator":"echo"}',
    }
    for name, payload in controls.items():
        write("control_json", name, payload)

    load = controls["load"]
    header = b"RAC1" + struct.pack("<BBHIII", 3, 0, 0xFFFF, len(load), 11, 0) + bytes(44)
    write("call_header", "control-load", header + load)
    write("call_header", "http-get", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    result = b"RAC1" + struct.pack("<BBHIIHHIQQ", 4, 0, 0, 2, 11, 0xFFFF, 0xFFFF, 0, 0, 900) + bytes(24)
    write("result_header", "control-result", result + b"{}")
    bad_status = b"RAC1" + struct.pack("<BBHIIHHIQQ", 2, 0, 10, 0, 3, 1, 0, 0, 0, 0) + bytes(24)
    write("result_header", "unknown-status", bad_status)


if __name__ == "__main__":
    main()
