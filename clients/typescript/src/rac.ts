/**
 * RAC v1 wire format: the 64-byte headers, status codes, parameter blocks and control
 * payloads, as pure functions over bytes (no sockets).
 *
 * This module mirrors the Rust crate `rac-proto` and the Python module `netaccel.rac`,
 * and is held to the same vectors (`spec/rac-v1-vectors.json`). Decoders take the bytes
 * received so far and return a header, or a {@link Partial} saying how many more bytes
 * are needed, or throw {@link HeaderError} when the bytes can never become a valid header.
 * Not here: connections, pipelining, errors of calls (see `client.ts`).
 *
 * @module
 */

/** Bytes 0..4 of every header: ASCII `RAC1`. */
export const MAGIC = Uint8Array.of(0x52, 0x41, 0x43, 0x31);
/** Length of every header. */
export const HEADER_LEN = 64;
/** Length of the parameter block of a call header (bytes 20..64). */
export const PARAMS_LEN = 44;
/** The accelerator id of control messages. */
export const CONTROL_ACCEL_ID = 0xffff;
/** The slot id of a result no slot ran. */
export const NO_SLOT = 0xffff;
/** The port a node listens on for RAC by default. */
export const DEFAULT_PORT = 9400;
/** Upper bound on a control message's JSON payload; the node refuses longer ones. */
export const CONTROL_PAYLOAD_LEN_MAX = 4096;
/** Largest value of a u32 header field. */
export const U32_MAX = 0xffffffff;

/** Byte 4 of every header. */
export enum Kind {
  Call = 1,
  Result = 2,
  Control = 3,
  ControlResult = 4,
}

/** Result status (bytes 6..8 of a result header); the names are the protocol's. */
export enum Status {
  OK = 0,
  BAD_REQUEST = 1,
  UNKNOWN_ACCELERATOR = 2,
  BUSY = 3,
  TOO_LARGE = 4,
  DEADLINE_EXCEEDED = 5,
  UNAVAILABLE = 6,
  UNAUTHORIZED = 7,
  INTERNAL = 8,
  PROTOCOL_ERROR = 9,
}

/** True when the node closes the connection right after a result with `status`. */
export function closesConnection(status: Status): boolean {
  return status === Status.TOO_LARGE || status === Status.PROTOCOL_ERROR;
}

/** Ids of the built-in accelerators; ids from 256 on come from a node's catalog. */
export const BUILTIN_IDS: Readonly<Record<string, number>> = Object.freeze({
  echo: 1,
  to_uppercase: 2,
  topk: 3,
  logit: 4,
  minmax: 5,
  sobel: 6,
  matmul: 7,
});

/** Not a whole header yet: `needed` more bytes (at least one) complete it. */
export interface Partial {
  readonly partial: true;
  readonly needed: number;
}

/** Why a header was refused; the same words as the Rust and Python decoders. */
export type HeaderErrorReason =
  | "bad_magic"
  | "unknown_kind"
  | "wrong_direction"
  | "non_zero_flags"
  | "accelerator_id_mismatch"
  | "payload_too_large"
  | "unknown_status"
  | "non_zero_reserved";

/**
 * A header that can never be valid. `status` is what a node answers it with
 * (TOO_LARGE or PROTOCOL_ERROR, both close the connection) and `requestId` the id to
 * answer with (0 when magic or kind were unreadable).
 */
export class HeaderError extends Error {
  readonly status: Status;
  constructor(
    readonly reason: HeaderErrorReason,
    message: string,
    readonly requestId: number = 0,
  ) {
    super(message);
    this.name = "HeaderError";
    this.status = reason === "payload_too_large" ? Status.TOO_LARGE : Status.PROTOCOL_ERROR;
  }
}

/** Header of a call (kind 1) or control message (kind 3), client to node. */
export interface CallHeader {
  kind: Kind.Call | Kind.Control;
  accelId: number;
  payloadLen: number;
  requestId: number;
  /** 0: no deadline. */
  deadlineUs: number;
  /** Exactly {@link PARAMS_LEN} bytes. */
  params: Uint8Array;
}

/** Header of a result (kind 2) or control result (kind 4), node to client. */
export interface ResultHeader {
  kind: Kind.Result | Kind.ControlResult;
  status: Status;
  payloadLen: number;
  requestId: number;
  accelId: number;
  /** {@link NO_SLOT} when no slot ran the call. */
  slotId: number;
  queueNs: bigint;
  execNs: bigint;
}

function view(buf: Uint8Array): DataView {
  return new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
}

function checkU(value: number, bits: number, what: string): void {
  if (!Number.isInteger(value) || value < 0 || value > 2 ** bits - 1) {
    throw new RangeError(`${what} must be an integer in 0..=${2 ** bits - 1}, got ${value}`);
  }
}

/** Encodes a call or control header into 64 new bytes. */
export function encodeCallHeader(h: CallHeader): Uint8Array {
  const out = new Uint8Array(HEADER_LEN);
  encodeCallHeaderInto(h, out);
  return out;
}

/** Encodes a call or control header into the first 64 bytes of `out`. */
export function encodeCallHeaderInto(h: CallHeader, out: Uint8Array): void {
  checkU(h.accelId, 16, "accelerator id");
  checkU(h.payloadLen, 32, "payload length");
  checkU(h.requestId, 32, "request id");
  checkU(h.deadlineUs, 32, "deadline");
  if (h.params.length !== PARAMS_LEN) {
    throw new RangeError(`params must be ${PARAMS_LEN} bytes, got ${h.params.length}`);
  }
  if ((h.accelId === CONTROL_ACCEL_ID) !== (h.kind === Kind.Control)) {
    throw new RangeError("accelerator id 0xffff is for control messages, and only they use it");
  }
  const v = view(out);
  out.set(MAGIC, 0);
  v.setUint8(4, h.kind);
  v.setUint8(5, 0);
  v.setUint16(6, h.accelId, true);
  v.setUint32(8, h.payloadLen, true);
  v.setUint32(12, h.requestId, true);
  v.setUint32(16, h.deadlineUs, true);
  out.set(h.params, 20);
}

/** Encodes a result or control result header (what a node sends; for tests and fakes). */
export function encodeResultHeader(h: ResultHeader): Uint8Array {
  checkU(h.status, 16, "status");
  checkU(h.payloadLen, 32, "payload length");
  checkU(h.requestId, 32, "request id");
  checkU(h.accelId, 16, "accelerator id");
  checkU(h.slotId, 16, "slot id");
  const out = new Uint8Array(HEADER_LEN);
  const v = view(out);
  out.set(MAGIC, 0);
  v.setUint8(4, h.kind);
  v.setUint16(6, h.status, true);
  v.setUint32(8, h.payloadLen, true);
  v.setUint32(12, h.requestId, true);
  v.setUint16(16, h.accelId, true);
  v.setUint16(18, h.slotId, true);
  v.setBigUint64(24, h.queueNs, true);
  v.setBigUint64(32, h.execNs, true);
  return out;
}

/** Magic once four bytes are present, kind once five are (as the Rust decoder). */
function checkStart(buf: Uint8Array, wantRequest: boolean): Kind | undefined {
  if (buf.length >= 4) {
    for (let i = 0; i < 4; i++) {
      if (buf[i] !== MAGIC[i]) {
        const hex = Array.from(buf.subarray(0, 4), (b) => b.toString(16).padStart(2, "0")).join(" ");
        throw new HeaderError("bad_magic", `bad magic ${hex}: not a RAC1 message`);
      }
    }
  }
  if (buf.length < 5) return undefined;
  const kind = buf[4];
  if (kind < Kind.Call || kind > Kind.ControlResult) {
    throw new HeaderError("unknown_kind", `unknown message kind ${kind}`);
  }
  const isRequest = kind === Kind.Call || kind === Kind.Control;
  if (isRequest !== wantRequest) {
    const side = isRequest ? "client" : "node";
    throw new HeaderError("wrong_direction", `message kind ${kind} (${Kind[kind]}) is sent by a ${side}, not to one`);
  }
  return kind as Kind;
}

function partial(buf: Uint8Array): Partial | undefined {
  return buf.length < HEADER_LEN ? { partial: true, needed: HEADER_LEN - buf.length } : undefined;
}

/** True when a decoder's answer is a {@link Partial}. */
export function isPartial<T>(x: T | Partial): x is Partial {
  return (x as Partial).partial === true;
}

/**
 * Decodes a call header from the start of `buf` (bytes past 64 are ignored), with the
 * checks of `rac_proto::CallHeader::decode` in the same order.
 */
export function decodeCallHeader(buf: Uint8Array, maxPayloadLen: number = U32_MAX): CallHeader | Partial {
  const kind = checkStart(buf, true);
  const p = partial(buf);
  if (p) return p;
  const v = view(buf);
  const flags = v.getUint8(5);
  const accelId = v.getUint16(6, true);
  const payloadLen = v.getUint32(8, true);
  const requestId = v.getUint32(12, true);
  const deadlineUs = v.getUint32(16, true);
  if (flags !== 0) throw new HeaderError("non_zero_flags", `flags byte is ${hex2(flags)}; v1 requires 0`, requestId);
  if ((accelId === CONTROL_ACCEL_ID) !== (kind === Kind.Control)) {
    throw new HeaderError(
      "accelerator_id_mismatch",
      `kind ${kind} with accelerator id 0x${accelId.toString(16).padStart(4, "0")}: control messages and only they use 0xffff`,
      requestId,
    );
  }
  const max = kind === Kind.Control ? Math.min(maxPayloadLen, CONTROL_PAYLOAD_LEN_MAX) : maxPayloadLen;
  if (payloadLen > max) {
    throw new HeaderError("payload_too_large", `payload of ${payloadLen} bytes is above the limit of ${max} bytes`, requestId);
  }
  const params = buf.slice(20, HEADER_LEN);
  return { kind: kind as Kind.Call | Kind.Control, accelId, payloadLen, requestId, deadlineUs, params };
}

/**
 * Decodes a result header from the start of `buf`, with the checks of
 * `rac_proto::ResultHeader::decode`: an undefined status or a non-zero reserved byte
 * means the stream is not what it claims to be.
 */
export function decodeResultHeader(buf: Uint8Array, maxPayloadLen: number = U32_MAX): ResultHeader | Partial {
  const kind = checkStart(buf, false);
  const p = partial(buf);
  if (p) return p;
  const v = view(buf);
  const flags = v.getUint8(5);
  const code = v.getUint16(6, true);
  const payloadLen = v.getUint32(8, true);
  const requestId = v.getUint32(12, true);
  if (flags !== 0) throw new HeaderError("non_zero_flags", `flags byte is ${hex2(flags)}; v1 requires 0`, requestId);
  if (code > Status.PROTOCOL_ERROR) throw new HeaderError("unknown_status", `unknown status code ${code}`, requestId);
  for (let i = 20; i < HEADER_LEN; i++) {
    if (i === 24) i = 40; // queue_ns and exec_ns sit between the reserved runs
    if (buf[i] !== 0) throw new HeaderError("non_zero_reserved", `reserved byte at offset ${i} is not zero`, requestId);
  }
  if (payloadLen > maxPayloadLen) {
    throw new HeaderError(
      "payload_too_large",
      `payload of ${payloadLen} bytes is above the limit of ${maxPayloadLen} bytes`,
      requestId,
    );
  }
  return {
    kind: kind as Kind.Result | Kind.ControlResult,
    status: code as Status,
    payloadLen,
    requestId,
    accelId: v.getUint16(16, true),
    slotId: v.getUint16(18, true),
    queueNs: v.getBigUint64(24, true),
    execNs: v.getBigUint64(32, true),
  };
}

function hex2(b: number): string {
  return "0x" + b.toString(16).padStart(2, "0");
}

// --- parameter blocks ----------------------------------------------------------------

/** The value types of a parameter, as a node's catalog names them. */
export type ParamType = "u8" | "u16" | "u32" | "i32" | "u64" | "f32";

/** One parameter of an accelerator: an entry of the catalog's `params`. */
export interface ParamSpec {
  name: string;
  type: ParamType;
  /** Byte offset inside the 44-byte block. */
  offset: number;
  /** `null`: the parameter is required. */
  default?: number | null;
  /** The node's bounds; the node checks them (BAD_REQUEST), the client does not. */
  min?: number | null;
  max?: number | null;
}

/** A parameter value: a number, or a bigint for u64 values above 2^53. */
export type ParamValue = number | bigint;

const PARAM_WIDTH: Record<ParamType, number> = { u8: 1, u16: 2, u32: 4, i32: 4, u64: 8, f32: 4 };
const PARAM_RANGE: Record<Exclude<ParamType, "f32">, [bigint, bigint]> = {
  u8: [0n, 0xffn],
  u16: [0n, 0xffffn],
  u32: [0n, 0xffffffffn],
  i32: [-(2n ** 31n), 2n ** 31n - 1n],
  u64: [0n, 2n ** 64n - 1n],
};

/** Parameters of the built-ins (`spec/accelerators.md`), by accelerator name. */
export const BUILTIN_PARAMS: Readonly<Record<string, readonly ParamSpec[]>> = Object.freeze({
  echo: [],
  to_uppercase: [],
  topk: [{ name: "k", type: "u32", offset: 0, default: null }],
  logit: [{ name: "eps", type: "f32", offset: 0, default: 0 }],
  minmax: [],
  sobel: [
    { name: "width", type: "u32", offset: 0, default: null },
    { name: "height", type: "u32", offset: 4, default: null },
  ],
  matmul: [{ name: "n", type: "u32", offset: 0, default: null }],
});

/** A 44-byte block of zeros: the params of an accelerator that takes none. */
export const NO_PARAMS: Uint8Array = new Uint8Array(PARAMS_LEN);

/**
 * Builds a 44-byte block from `values` by `specs`; an unknown or missing name, or a
 * value out of its type's range, throws a `RangeError` naming it.
 */
export function packParams(
  specs: readonly ParamSpec[],
  values: Readonly<Record<string, ParamValue>>,
  accelerator = "this accelerator",
): Uint8Array {
  for (const name of Object.keys(values)) {
    if (!specs.some((s) => s.name === name)) {
      const takes = specs.map((s) => s.name).join(", ") || "none";
      throw new RangeError(`unknown parameter '${name}' for ${accelerator}; it takes ${takes}`);
    }
  }
  const block = new Uint8Array(PARAMS_LEN);
  const v = view(block);
  for (const s of specs) {
    const value = values[s.name] ?? s.default;
    if (value === undefined || value === null) {
      throw new RangeError(`missing required parameter '${s.name}' for ${accelerator}`);
    }
    const width = PARAM_WIDTH[s.type];
    if (width === undefined) throw new RangeError(`parameter '${s.name}' has unknown type ${s.type}`);
    if (s.offset < 0 || s.offset + width > PARAMS_LEN) {
      throw new RangeError(`parameter '${s.name}' at offset ${s.offset} does not fit the ${PARAMS_LEN}-byte block`);
    }
    checkBounds(s, value, accelerator);
    writeParam(v, s, value);
  }
  return block;
}

function checkBounds(s: ParamSpec, value: ParamValue, accelerator: string): void {
  const out = (why: string) => new RangeError(`parameter '${s.name}' of ${accelerator}: ${value} ${why}`);
  if (s.type === "f32") {
    if (typeof value !== "number" || !Number.isFinite(value)) throw out("is not a finite number");
  } else {
    if (typeof value === "number" && !Number.isInteger(value)) throw out(`is not an integer (${s.type})`);
    const [lo, hi] = PARAM_RANGE[s.type];
    const big = BigInt(value);
    if (big < lo || big > hi) throw out(`is out of the range of ${s.type}`);
  }
}

function writeParam(v: DataView, s: ParamSpec, value: ParamValue): void {
  switch (s.type) {
    case "u8":
      return v.setUint8(s.offset, Number(value));
    case "u16":
      return v.setUint16(s.offset, Number(value), true);
    case "u32":
      return v.setUint32(s.offset, Number(value), true);
    case "i32":
      return v.setInt32(s.offset, Number(value), true);
    case "u64":
      return v.setBigUint64(s.offset, BigInt(value), true);
    case "f32":
      return v.setFloat32(s.offset, Number(value), true);
  }
}

/** The block of a built-in accelerator by name: `builtinParams("sobel", {width: 4, height: 4})`. */
export function builtinParams(accelerator: string, values: Readonly<Record<string, ParamValue>>): Uint8Array {
  const specs = BUILTIN_PARAMS[accelerator];
  if (specs === undefined) throw new RangeError(`no built-in accelerator named '${accelerator}'`);
  return packParams(specs, values, accelerator);
}

// --- control messages ----------------------------------------------------------------

/** The control ops of v1 and the fields each takes (besides `token`). */
export const CONTROL_OPS: Readonly<Record<string, readonly string[]>> = Object.freeze({
  catalog: [],
  slots: [],
  load: ["slot", "accelerator"],
  hello: ["tenant"],
});

/**
 * The JSON payload of a control message, byte-identical to the Rust encoder's: `op`
 * first, then the op's fields, `token` last and only when given.
 */
export function controlPayload(
  op: string,
  fields: Readonly<Record<string, string | number>> = {},
  token?: string,
): Uint8Array {
  const required = CONTROL_OPS[op];
  if (required === undefined) {
    throw new RangeError(`unknown control op '${op}'; expected one of ${Object.keys(CONTROL_OPS).join(", ")}`);
  }
  const extra = Object.keys(fields).filter((f) => !required.includes(f));
  if (extra.length > 0) throw new RangeError(`control op '${op}' does not take field '${extra[0]}'`);
  const obj: Record<string, unknown> = { op };
  for (const name of required) {
    if (!(name in fields)) throw new RangeError(`control op '${op}' requires field '${name}'`);
    obj[name] = fields[name];
  }
  if (token !== undefined) obj.token = token;
  const payload = new TextEncoder().encode(JSON.stringify(obj));
  if (payload.length > CONTROL_PAYLOAD_LEN_MAX) {
    throw new RangeError(`control payload of ${payload.length} bytes is above ${CONTROL_PAYLOAD_LEN_MAX}`);
  }
  return payload;
}
