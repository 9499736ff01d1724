"""cocotb testbench for one RTL accelerator (the toplevel named by ACCELERATOR).

cocotbext-axi drives the 512-bit input stream and takes the output stream, exactly as a
shell does (spec/rtl-accelerators.md): the 64-byte call header as the first beat, the
payload in the beats after it, the result collected up to tlast with the status in
tuser on the last beat. Every test sends many calls back to back through one design,
each checked against the reference model (reference.py), with random valid/ready
patterns on both streams, so a call that leaves state behind, or a design that breaks
under back-pressure, fails.
"""

import json
import os
import random
import struct
from pathlib import Path

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, with_timeout
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource

import reference

NAME = os.environ["ACCELERATOR"]
ACCEL_ID = reference.ACCELERATOR_IDS[NAME]
SEED = int(os.environ.get("RTL_TB_SEED", "1"))
VECTORS = Path(__file__).resolve().parents[2] / "spec" / "rac-v1-vectors.json"
BEAT = 64


def random_pauses(rng, probability):
    """A pause pattern for cocotbext-axi: paused in `probability` of the cycles."""
    while True:
        yield rng.random() < probability


class Shell:
    def __init__(self, dut, rng, pause_in=0.0, pause_out=0.0):
        self.dut = dut
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst_n, reset_active_level=False)
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst_n, reset_active_level=False)
        if pause_in:
            self.source.set_pause_generator(random_pauses(rng, pause_in))
        if pause_out:
            self.sink.set_pause_generator(random_pauses(rng, pause_out))

    async def call(self, header: bytes, payload: bytes):
        """One call: returns (status, output bytes), checking the beat framing."""
        await self.source.send(AxiStreamFrame(header + payload))
        # A bound so that a design that never answers fails the test instead of hanging.
        frame = await with_timeout(self.sink.recv(compact=False), 2_000_000, "ns")
        lanes = len(frame.tdata)
        assert lanes % BEAT == 0 and lanes, f"output of {lanes} byte lanes"
        out = bytearray()
        for start in range(0, lanes, BEAT):
            keep = frame.tkeep[start:start + BEAT]
            width = sum(keep)
            assert keep == [1] * width + [0] * (BEAT - width), f"tkeep not contiguous from byte 0: {keep}"
            if start + BEAT < lanes:
                assert width == BEAT, "the built-in designs send full beats before the last"
            out += bytes(frame.tdata[start:start + width])
        status = frame.tuser[-1]
        return status, bytes(out)


async def start(dut, pause_in=0.0, pause_out=0.0, seed=SEED):
    rng = random.Random(seed)
    cocotb.start_soon(Clock(dut.clk, 4, units="ns").start())
    shell = Shell(dut, rng, pause_in, pause_out)
    dut.rst_n.value = 0
    await ClockCycles(dut.clk, 16)
    dut.rst_n.value = 1
    await ClockCycles(dut.clk, 2)
    return shell, rng


def f32_close(status, output, payload):
    want_status, want = reference.minmax_exact(payload)
    assert status == want_status, f"status {status}, want {want_status}"
    if status:
        return
    got = struct.unpack(f"<{len(output) // 4}f", output)
    assert len(got) == len(want), f"{len(got)} values, want {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        assert abs(g - w) <= 1e-6, f"value {i}: {g} vs {w}"


async def check(shell, params: bytes, payload: bytes):
    header = reference.call_header(ACCEL_ID, len(payload), params=params)
    status, output = await shell.call(header, payload)
    if NAME == "minmax":
        f32_close(status, output, payload)
        return
    want_status, want = reference.MODELS[NAME](params, payload)
    assert status == want_status, f"status {status}, want {want_status} (payload of {len(payload)} bytes)"
    if status == reference.OK:
        assert output == want, f"output differs for a payload of {len(payload)} bytes"
    else:
        assert output == b"", "a refused call answers with an empty beat"


def random_call(rng):
    """Params and payload for a random valid call (and a few invalid ones)."""
    length = rng.choice([0, 1, 3, 4, 60, 63, 64, 65, 128, 200, 1000, 1024, 4096])
    if NAME in ("echo", "to_uppercase"):
        return b"", bytes(rng.randrange(256) for _ in range(length))
    length -= length % 4
    if NAME == "topk":
        k = rng.choice([1, 2, 15, 16, 17, 33, 63, 64])
        # Narrow ranges give many duplicates.
        span = rng.choice([3, 1000, 2**31])
        values = [rng.randrange(-span, span) for _ in range(length // 4)]
        return struct.pack("<I", k), struct.pack(f"<{len(values)}i", *values)
    scale = rng.choice([1.0, 1e-30, 1e30, 1e-40])
    values = [rng.uniform(-1, 1) * scale for _ in range(length // 4)]
    if values and rng.random() < 0.2:
        values = [values[0]] * len(values)  # max = min
    return b"", struct.pack(f"<{len(values)}f", *values)


async def random_calls(dut, pause_in, pause_out, calls):
    shell, rng = await start(dut, pause_in, pause_out)
    for _ in range(calls):
        params, payload = random_call(rng)
        await check(shell, params, payload)


@cocotb.test()
async def shared_vectors(dut):
    """The vectors of spec/rac-v1-vectors.json for this accelerator, byte for byte."""
    shell, _ = await start(dut)
    checked = 0
    for vector in json.loads(VECTORS.read_text()):
        header = bytes.fromhex(vector["header_hex"])
        if "expect_output_hex" not in vector or struct.unpack_from("<H", header, 6)[0] != ACCEL_ID:
            continue
        status, output = await shell.call(header, bytes.fromhex(vector["payload_hex"]))
        assert status == 0 and output == bytes.fromhex(vector["expect_output_hex"]), vector["name"]
        checked += 1
    dut._log.info("%d shared vectors checked", checked)
    if NAME != "minmax":
        assert checked, "no shared vector for this accelerator"


@cocotb.test()
async def random_without_backpressure(dut):
    await random_calls(dut, 0.0, 0.0, 60)


@cocotb.test()
async def random_with_backpressure_on_both_streams(dut):
    await random_calls(dut, 0.4, 0.5, 60)


@cocotb.test()
async def bad_requests_are_drained_and_answered(dut):
    """Invalid calls answer BAD_REQUEST (or, for echo and to_uppercase, which have
    none, are plain calls), and the next call is right."""
    shell, rng = await start(dut, 0.3, 0.3)
    cases = []
    if NAME == "topk":
        values = struct.pack("<40i", *range(40))
        cases = [(struct.pack("<I", 0), values), (struct.pack("<I", 65), values),
                 (struct.pack("<I", 0xFFFFFFFF), b""), (struct.pack("<I", 3), values + b"\1\2")]
    elif NAME == "minmax":
        finite = [1.0, 2.0] * 20
        cases = [(b"", struct.pack("<40f", *finite[:39], float("nan"))),
                 (b"", struct.pack("<40f", float("-inf"), *finite[:39])),
                 (b"", struct.pack("<3f", 1.0, float("inf"), 2.0)),
                 (b"", b"\0" * 7),
                 (b"", b"\0" * (reference.MINMAX_MAX_BYTES + 4))]
    for params, payload in cases:
        await check(shell, params, payload)
        await check(shell, *random_call(rng))
