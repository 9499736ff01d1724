"""The wire format against spec/rac-v1-vectors.json and hostile input."""

import json
import pathlib
import struct

import pytest

from netaccel import rac
from netaccel.rac import CallHeader, HeaderError, Kind, Partial, ResultHeader, Status

VECTORS_PATH = pathlib.Path(__file__).resolve().parents[3] / "spec" / "rac-v1-vectors.json"
VECTORS = json.loads(VECTORS_PATH.read_text())


def vector_id(v):
    return v["name"]


@pytest.mark.parametrize("vector", VECTORS, ids=vector_id)
def test_vector_decodes_and_re_encodes_byte_exact(vector):
    header = bytes.fromhex(vector["header_hex"])
    payload = bytes.fromhex(vector["payload_hex"])
    assert len(header) == rac.HEADER_LEN
    cls, other = (CallHeader, ResultHeader) if Kind(header[4]).is_request else (ResultHeader, CallHeader)
    h = cls.decode(header, len(payload))
    assert h.payload_len == len(payload)
    assert h.encode() == header
    assert cls.decode(header + payload, len(payload)) == h
    for n in range(rac.HEADER_LEN):
        assert cls.decode(header[:n], 0) == Partial(rac.HEADER_LEN - n)
    with pytest.raises(HeaderError) as e:
        other.decode(header)
    assert e.value.reason == "wrong_direction"
    if payload:
        with pytest.raises(HeaderError) as e:
            cls.decode(header, len(payload) - 1)
        assert (e.value.status, e.value.request_id) == (Status.TOO_LARGE, h.request_id)


EXPECTED = {
    "to_uppercase call, 5-byte payload, request id 7": CallHeader(2, 5, 7),
    "topk k=3 over [5,-3,9,9,0,2]": CallHeader(3, 24, 1, params=rac.topk_params(3)),
    "sobel 4x4": CallHeader(6, 16, 2, params=rac.sobel_params(4, 4)),
    "echo, empty payload, request id 0xFFFFFFFE, deadline 1000 us": CallHeader(1, 0, 0xFFFFFFFE, 1000),
    "result OK for request 7 (to_uppercase, slot 0, queue 1500 ns, exec 800 ns)": ResultHeader(
        Status.OK, 5, 7, 2, 0, 1500, 800
    ),
    "result BUSY for request 9 (topk), no slot": ResultHeader(Status.BUSY, 0, 9, 3),
}


def test_named_vectors_match_the_fields_their_names_describe():
    known = [v for v in VECTORS if v["name"] in EXPECTED]
    assert len(known) == len(EXPECTED), "a named vector was renamed or removed"
    for v in known:
        assert EXPECTED[v["name"]].encode().hex() == v["header_hex"], v["name"]
    busy = EXPECTED["result BUSY for request 9 (topk), no slot"]
    assert busy.slot is None and busy.status.name == "BUSY"


def test_status_names_codes_and_closing():
    names = [
        "OK", "BAD_REQUEST", "UNKNOWN_ACCELERATOR", "BUSY", "TOO_LARGE",
        "DEADLINE_EXCEEDED", "UNAVAILABLE", "UNAUTHORIZED", "INTERNAL", "PROTOCOL_ERROR",
    ]
    assert [s.name for s in Status] == names
    assert [int(s) for s in Status] == list(range(10))
    assert [s for s in Status if s.closes_connection] == [Status.TOO_LARGE, Status.PROTOCOL_ERROR]


def call_expectation(b):
    """What decoding a call header must give: a reason string, or 'ok'."""
    if b[:4] != rac.MAGIC:
        return "bad_magic"
    if b[4] not in (1, 2, 3, 4):
        return "unknown_kind"
    if b[4] in (2, 4):
        return "wrong_direction"
    if b[5]:
        return "non_zero_flags"
    accel_id, payload_len = struct.unpack_from("<HI", b, 6)
    if (accel_id == 0xFFFF) != (b[4] == 3):
        return "accelerator_id_mismatch"
    limit = 1 << 20 if b[4] == 1 else rac.CONTROL_PAYLOAD_LEN_MAX
    return "payload_too_large" if payload_len > limit else "ok"


def result_expectation(b):
    if b[:4] != rac.MAGIC:
        return "bad_magic"
    if b[4] not in (1, 2, 3, 4):
        return "unknown_kind"
    if b[4] in (1, 3):
        return "wrong_direction"
    if b[5]:
        return "non_zero_flags"
    status, payload_len = struct.unpack_from("<HI", b, 6)
    if status > 9:
        return "unknown_status"
    if any(b[20:24]) or any(b[40:]):
        return "non_zero_reserved"
    return "payload_too_large" if payload_len > 1 << 20 else "ok"


@pytest.mark.parametrize(
    "cls,good,expect",
    [
        (CallHeader, CallHeader(6, 16, 0x01020304, 1000, rac.sobel_params(4, 4)), call_expectation),
        (CallHeader, CallHeader.control(9, 30), call_expectation),
        (ResultHeader, ResultHeader(Status.OK, 5, 7, 2, 0, 1500, 800), result_expectation),
    ],
    ids=["call", "control", "result"],
)
def test_every_single_byte_corruption(cls, good, expect):
    good = good.encode()
    for offset in range(rac.HEADER_LEN):
        for value in range(256):
            if value == good[offset]:
                continue
            b = bytearray(good)
            b[offset] = value
            b = bytes(b)
            want = expect(b)
            try:
                h = cls.decode(b, 1 << 20)
            except HeaderError as e:
                assert e.reason == want, (offset, value, str(e))
                assert e.status.closes_connection
                if want in ("bad_magic", "unknown_kind", "wrong_direction"):
                    assert e.request_id == 0
                else:
                    assert e.request_id == struct.unpack_from("<I", b, 12)[0]
            else:
                assert want == "ok", (offset, value)
                assert h.encode() == b


def test_other_protocols_are_refused_before_a_whole_header():
    with pytest.raises(HeaderError, match="bad magic 47 45 54 20"):
        CallHeader.decode(b"GET / HTTP/1.1\r\n\r\n")
    assert CallHeader.decode(b"GET") == Partial(61)
    with pytest.raises(HeaderError, match="unknown message kind 7"):
        CallHeader.decode(b"RAC1\x07")


def test_params_helpers_follow_the_documented_offsets():
    assert rac.topk_params(3) == b"\x03" + bytes(43)
    assert rac.matmul_params(2) == b"\x02" + bytes(43)
    assert rac.sobel_params(640, 480)[:8] == struct.pack("<II", 640, 480)
    assert rac.logit_params(0.25)[:4] == struct.pack("<f", 0.25)
    assert rac.logit_params() == bytes(44)
    assert rac.params_for("echo") == rac.NO_PARAMS
    with pytest.raises(ValueError, match="missing required parameter 'k'"):
        rac.params_for("topk")
    with pytest.raises(ValueError, match="unknown parameter 'j' for topk; it takes k"):
        rac.params_for("topk", k=1, j=2)
    with pytest.raises(ValueError, match="takes none"):
        rac.params_for("echo", k=1)


def test_control_payloads_match_the_rust_encoder():
    assert rac.control_payload("catalog") == b'{"op":"catalog"}'
    assert rac.control_payload("load", slot=1, accelerator="topk") == b'{"op":"load","slot":1,"accelerator":"topk"}'
    assert rac.control_payload("hello", "k", tenant='t"1') == b'{"op":"hello","tenant":"t\\"1","token":"k"}'
    with pytest.raises(ValueError, match="requires field 'slot'"):
        rac.control_payload("load", accelerator="echo")
    with pytest.raises(ValueError, match="unknown control op 'reboot'"):
        rac.control_payload("reboot")
    with pytest.raises(ValueError, match="does not take field 'slot'"):
        rac.control_payload("catalog", slot=1)


def test_results_raise_with_the_status_name():
    r = rac.Result(Status.BAD_REQUEST, b"k must be >= 1", 4, 3)
    with pytest.raises(rac.RacError, match=r"BAD_REQUEST \(request 4\): k must be >= 1") as e:
        r.raise_for_status()
    assert e.value.status == Status.BAD_REQUEST
    assert rac.Result(Status.OK, b"x", 1, 1).raise_for_status().payload == b"x"
