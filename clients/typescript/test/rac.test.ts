// The wire format against the shared vectors (spec/rac-v1-vectors.json) and hostile headers.
import * as assert from "node:assert/strict";
import * as fs from "node:fs";
import * as path from "node:path";
import { test } from "node:test";

import * as rac from "../src/rac";

const SPEC = path.resolve(__dirname, "../../../../spec");

interface Vector {
  name: string;
  header_hex: string;
  payload_hex: string;
  expect_output_hex?: string;
}

function vectors(): Vector[] {
  return JSON.parse(fs.readFileSync(path.join(SPEC, "rac-v1-vectors.json"), "utf8"));
}

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");
const bytes = (h: string) => new Uint8Array(Buffer.from(h, "hex"));

test("the vectors are found", () => {
  assert.ok(vectors().length >= 6);
});

test("every call vector decodes and encodes back byte for byte", () => {
  let n = 0;
  for (const v of vectors()) {
    const head = bytes(v.header_hex);
    if (head[4] !== rac.Kind.Call && head[4] !== rac.Kind.Control) continue;
    const h = rac.decodeCallHeader(head);
    assert.ok(!rac.isPartial(h), v.name);
    assert.equal(h.payloadLen, v.payload_hex.length / 2, v.name);
    assert.equal(hex(rac.encodeCallHeader(h)), v.header_hex, v.name);
    n++;
  }
  assert.ok(n >= 4);
});

test("every result vector decodes and encodes back byte for byte", () => {
  let n = 0;
  for (const v of vectors()) {
    const head = bytes(v.header_hex);
    if (head[4] !== rac.Kind.Result && head[4] !== rac.Kind.ControlResult) continue;
    const h = rac.decodeResultHeader(head);
    assert.ok(!rac.isPartial(h), v.name);
    assert.equal(h.payloadLen, v.payload_hex.length / 2, v.name);
    assert.equal(hex(rac.encodeResultHeader(h)), v.header_hex, v.name);
    n++;
  }
  assert.ok(n >= 2);
});

test("the fields of the vectors are the ones their names say", () => {
  const [upper, topk, sobel, echo, ok, busy] = vectors().map((v) => bytes(v.header_hex));
  const u = rac.decodeCallHeader(upper) as rac.CallHeader;
  assert.deepEqual([u.accelId, u.requestId, u.deadlineUs], [rac.BUILTIN_IDS.to_uppercase, 7, 0]);
  assert.deepEqual((rac.decodeCallHeader(topk) as rac.CallHeader).params, rac.builtinParams("topk", { k: 3 }));
  assert.deepEqual((rac.decodeCallHeader(sobel) as rac.CallHeader).params, rac.builtinParams("sobel", { width: 4, height: 4 }));
  const e = rac.decodeCallHeader(echo) as rac.CallHeader;
  assert.deepEqual([e.requestId, e.deadlineUs, e.payloadLen], [0xfffffffe, 1000, 0]);
  const o = rac.decodeResultHeader(ok) as rac.ResultHeader;
  assert.deepEqual([o.status, o.requestId, o.accelId, o.slotId, o.queueNs, o.execNs], [rac.Status.OK, 7, 2, 0, 1500n, 800n]);
  const b = rac.decodeResultHeader(busy) as rac.ResultHeader;
  assert.deepEqual([b.status, b.requestId, b.accelId, b.slotId], [rac.Status.BUSY, 9, 3, rac.NO_SLOT]);
});

test("a header is partial until 64 bytes are in, and refused as soon as its start is wrong", () => {
  const ok = bytes(vectors()[4].header_hex);
  for (let n = 0; n < 64; n++) {
    const p = rac.decodeResultHeader(ok.subarray(0, n));
    assert.deepEqual(p, { partial: true, needed: 64 - n });
  }
  const refuse = (buf: Uint8Array, reason: string) =>
    assert.throws(() => rac.decodeResultHeader(buf), (e: unknown) => e instanceof rac.HeaderError && e.reason === reason);
  refuse(bytes("52414332"), "bad_magic");
  refuse(bytes("5241433109"), "unknown_kind");
  refuse(bytes("5241433101"), "wrong_direction");
});

test("malformed result headers are refused with the reason", () => {
  const ok = bytes(vectors()[4].header_hex);
  const change = (at: number, value: number, reason: string, status = rac.Status.PROTOCOL_ERROR) => {
    const b = ok.slice();
    b[at] = value;
    assert.throws(
      () => rac.decodeResultHeader(b),
      (e: unknown) => e instanceof rac.HeaderError && e.reason === reason && e.status === status && e.requestId === (at < 8 ? 7 : 7),
      `byte ${at} = ${value}`,
    );
  };
  change(5, 1, "non_zero_flags");
  change(6, 10, "unknown_status");
  change(7, 1, "unknown_status");
  for (const at of [20, 21, 22, 23, 40, 50, 63]) change(at, 1, "non_zero_reserved");
  assert.throws(
    () => rac.decodeResultHeader(ok, 4),
    (e: unknown) => e instanceof rac.HeaderError && e.reason === "payload_too_large" && e.status === rac.Status.TOO_LARGE,
  );
});

test("malformed call headers are refused in the node's order", () => {
  const call = bytes(vectors()[0].header_hex);
  const refuse = (b: Uint8Array, reason: string, max?: number) =>
    assert.throws(() => rac.decodeCallHeader(b, max), (e: unknown) => e instanceof rac.HeaderError && e.reason === reason);
  const flags = call.slice();
  flags[5] = 1;
  refuse(flags, "non_zero_flags");
  const control = call.slice();
  control[4] = rac.Kind.Control;
  refuse(control, "accelerator_id_mismatch");
  const ffff = call.slice();
  ffff[6] = 0xff;
  ffff[7] = 0xff;
  refuse(ffff, "accelerator_id_mismatch");
  refuse(call, "payload_too_large", 4);
  const bigControl = rac.encodeCallHeader({ kind: rac.Kind.Control, accelId: 0xffff, payloadLen: 4097, requestId: 1, deadlineUs: 0, params: rac.NO_PARAMS });
  refuse(bigControl, "payload_too_large");
});

test("the encoder refuses what no header can carry", () => {
  const h = { kind: rac.Kind.Call as const, accelId: 1, payloadLen: 0, requestId: 1, deadlineUs: 0, params: rac.NO_PARAMS };
  assert.throws(() => rac.encodeCallHeader({ ...h, requestId: 2 ** 32 }), RangeError);
  assert.throws(() => rac.encodeCallHeader({ ...h, accelId: 0xffff }), RangeError);
  assert.throws(() => rac.encodeCallHeader({ ...h, params: new Uint8Array(43) }), RangeError);
  assert.throws(() => rac.encodeCallHeader({ ...h, deadlineUs: -1 }), RangeError);
});

test("params by name: every type at its offset, unknown and missing names refused", () => {
  const specs: rac.ParamSpec[] = [
    { name: "a", type: "u8", offset: 0 },
    { name: "b", type: "u16", offset: 2 },
    { name: "c", type: "u32", offset: 4 },
    { name: "d", type: "i32", offset: 8 },
    { name: "e", type: "u64", offset: 12 },
    { name: "f", type: "f32", offset: 20, default: 0.5 },
  ];
  const block = rac.packParams(specs, { a: 255, b: 0xffff, c: 0xffffffff, d: -2, e: 2n ** 64n - 1n });
  assert.equal(hex(block.subarray(0, 24)), "ff00ffffffffffff" + "feffffff" + "ffffffffffffffff" + "0000003f");
  assert.ok(block.subarray(24).every((x) => x === 0));
  assert.throws(() => rac.packParams(specs, { a: 256, b: 0, c: 0, d: 0, e: 0 }), /out of the range of u8/);
  assert.throws(() => rac.packParams(specs, { a: 0, b: 0, c: 0, d: 2 ** 31, e: 0 }), /out of the range of i32/);
  assert.throws(() => rac.packParams(specs, { a: 1.5, b: 0, c: 0, d: 0, e: 0 }), /not an integer/);
  assert.throws(() => rac.packParams(specs, { a: 0, b: 0, c: 0, d: 0 }), /missing required parameter 'e'/);
  assert.throws(() => rac.packParams(specs, { a: 0, b: 0, c: 0, d: 0, e: 0, zz: 1 }), /unknown parameter 'zz'/);
  assert.deepEqual(rac.builtinParams("logit", {}), rac.NO_PARAMS);
});

test("control payloads are the Rust encoder's bytes", () => {
  const text = (b: Uint8Array) => Buffer.from(b).toString();
  assert.equal(text(rac.controlPayload("catalog")), '{"op":"catalog"}');
  assert.equal(text(rac.controlPayload("load", { slot: 0, accelerator: "echo" }, "t")), '{"op":"load","slot":0,"accelerator":"echo","token":"t"}');
  assert.equal(text(rac.controlPayload("hello", { tenant: "é" })), '{"op":"hello","tenant":"é"}');
  assert.throws(() => rac.controlPayload("reboot"), /unknown control op/);
  assert.throws(() => rac.controlPayload("hello"), /requires field 'tenant'/);
  assert.throws(() => rac.controlPayload("slots", { slot: 1 }), /does not take field 'slot'/);
  assert.throws(() => rac.controlPayload("hello", { tenant: "x".repeat(5000) }), /above 4096/);
});

test("every header of spec/rac-v1-refused.json is refused with its reason", () => {
  const refused: { name: string; header_hex: string; reason: string }[] = JSON.parse(
    fs.readFileSync(path.join(SPEC, "rac-v1-refused.json"), "utf8"),
  );
  assert.ok(refused.length >= 6);
  for (const r of refused) {
    assert.throws(
      () => rac.decodeResultHeader(bytes(r.header_hex)),
      (e: unknown) => e instanceof rac.HeaderError && e.reason === r.reason,
      r.name,
    );
  }
});

test("the vectors carry every status and both kinds of each direction", () => {
  const heads = vectors().map((v) => bytes(v.header_hex));
  const statuses = new Set(heads.filter((h) => h[4] === rac.Kind.Result || h[4] === rac.Kind.ControlResult).map((h) => (rac.decodeResultHeader(h) as rac.ResultHeader).status));
  assert.equal(statuses.size, 10);
  assert.deepEqual(new Set(heads.map((h) => h[4])), new Set([1, 2, 3, 4]));
});
