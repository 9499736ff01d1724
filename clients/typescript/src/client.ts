/**
 * A RAC v1 client over one TCP or TLS connection, with pipelining.
 *
 * Every {@link Client.call} sends at once and returns a promise; many can be in flight
 * on the one connection, and the node answers them in completion order, matched here by
 * request id. At most `maxInFlight` calls are out at a time: a call past the bound waits
 * (in a queue of at most `maxWaiting`) until an answer frees a place. Every promise
 * settles: with the output, with a typed error ({@link BusyError}, {@link DeadlineError},
 * …) when the node refuses the call, with {@link ProtocolError} when its reply is
 * malformed, or with {@link ClosedError} when the connection ends first.
 *
 * Not here: the byte layout (`rac.ts`), the registry (`registry.ts`).
 *
 * @module
 */

import * as assert from "node:assert";
import * as fs from "node:fs";
import * as net from "node:net";
import * as tls from "node:tls";

import { ClosedError, DeadlineError, NetaccelError, ProtocolError, RacError } from "./errors";
import {
  BUILTIN_IDS,
  BUILTIN_PARAMS,
  CONTROL_ACCEL_ID,
  DEFAULT_PORT,
  HEADER_LEN,
  HeaderError,
  Kind,
  NO_PARAMS,
  ParamSpec,
  ParamValue,
  Status,
  closesConnection,
  controlPayload,
  decodeResultHeader,
  encodeCallHeaderInto,
  isPartial,
  packParams,
} from "./rac";

/** A PEM document: its text or bytes, or the path of a file holding it. */
export type Pem = string | Uint8Array;

/** TLS to a node's RAC-over-TLS listener (`--rac-tls`); `cert` and `key` for mTLS. */
export interface TlsOptions {
  /** The CA that signed the node's certificate (default: the system's). */
  ca?: Pem;
  /** The client certificate, for a node that asks for one. */
  cert?: Pem;
  /** The client certificate's private key. */
  key?: Pem;
  /** The name the node's certificate must carry (default: `host` when it is a name). */
  servername?: string;
}

/** How to reach a node, and the client's bounds. */
export interface ConnectOptions {
  host?: string;
  port?: number;
  tls?: TlsOptions;
  /** With `tenant`: the connection says `hello` as that tenant with this token. */
  token?: string;
  tenant?: string;
  /** Calls out on the connection at once (default 32, the node's own bound per connection). */
  maxInFlight?: number;
  /** Calls waiting for a place once `maxInFlight` are out (default 65536); more fail. */
  maxWaiting?: number;
  /** Largest result payload accepted (default 1 GiB); a larger one is a {@link ProtocolError}. */
  maxPayloadLen?: number;
  /** How long connecting (and the TLS handshake) may take (default 10 s). */
  connectTimeoutMs?: number;
}

/** Options of one call. */
export interface CallOptions {
  /** Params by name (checked against the catalog), or the raw 44-byte block. */
  params?: Readonly<Record<string, ParamValue>> | Uint8Array;
  /** The call must start within this many ms of reaching the node, or is answered DEADLINE_EXCEEDED. */
  deadlineMs?: number;
  /** The client stops waiting after this many ms and rejects with a local {@link DeadlineError}. */
  timeoutMs?: number;
}

/** A result with its header's fields, whatever its status. */
export interface Result {
  status: Status;
  /** The output when OK, else the node's sentence saying why. */
  payload: Uint8Array;
  requestId: number;
  accelId: number;
  /** 0xFFFF when no slot ran the call. */
  slotId: number;
  queueNs: bigint;
  execNs: bigint;
}

/** One entry of the node's catalog (`GET /v1/accelerators`, RAC `catalog`). */
export interface CatalogEntry {
  id: number;
  name: string;
  hash?: string;
  params: ParamSpec[];
  backends?: string[];
  slots?: number[];
}

/** An accelerator by name (built-in or from the catalog) or by id. */
export type Accelerator = string | number;

interface Pending {
  kind: Kind.Call | Kind.Control;
  resolve(r: Result): void;
  reject(e: Error): void;
  timer?: NodeJS.Timeout;
  /** The caller stopped waiting (timeout); the late answer is dropped. */
  abandoned: boolean;
}

interface Waiter {
  go(): void;
  fail(e: Error): void;
}

const EMPTY = new Uint8Array(0);
/**
 * The node's own bound on calls in flight per connection (`rac_in_flight_max`), as in
 * every netaccel client: past it the node stops reading, so more calls out would only
 * wait in the socket, out of reach of the client's timeouts, and add no throughput.
 */
export const MAX_IN_FLIGHT_DEFAULT = 32;
const MAX_WAITING_DEFAULT = 65536;
const MAX_PAYLOAD_LEN_DEFAULT = 1 << 30;
const CONNECT_TIMEOUT_MS_DEFAULT = 10_000;
/** Payloads up to this size go out in one buffer with their header. */
const COALESCE_LEN = 16 * 1024;

function readPem(pem: Pem | undefined): Buffer | undefined {
  if (pem === undefined) return undefined;
  if (typeof pem !== "string") return Buffer.from(pem);
  return pem.includes("-----BEGIN") ? Buffer.from(pem) : fs.readFileSync(pem);
}

function positive(value: number | undefined, fallback: number, what: string): number {
  const v = value ?? fallback;
  if (!Number.isInteger(v) || v < 1) throw new RangeError(`${what} must be a positive integer, got ${v}`);
  return v;
}

/** A connection to one node. Make one with {@link Client.connect}. */
export class Client {
  private readonly pending = new Map<number, Pending>();
  private readonly waiting: Waiter[] = [];
  private readonly names = new Map<string, number>(Object.entries(BUILTIN_IDS));
  private readonly specs = new Map<number, readonly ParamSpec[]>();
  private catalogLoad: Promise<CatalogEntry[]> | undefined;
  private nextId = 1;
  private buf: Buffer = Buffer.alloc(0);
  private corked = false;
  private closedBy: Error | undefined;
  private readonly maxInFlight: number;
  private readonly maxWaiting: number;
  private readonly maxPayloadLen: number;

  private constructor(
    private readonly socket: net.Socket,
    opts: ConnectOptions,
  ) {
    this.maxInFlight = positive(opts.maxInFlight, MAX_IN_FLIGHT_DEFAULT, "maxInFlight");
    this.maxWaiting = positive(opts.maxWaiting, MAX_WAITING_DEFAULT, "maxWaiting");
    this.maxPayloadLen = positive(opts.maxPayloadLen, MAX_PAYLOAD_LEN_DEFAULT, "maxPayloadLen");
    for (const [name, id] of Object.entries(BUILTIN_IDS)) this.specs.set(id, BUILTIN_PARAMS[name]);
    socket.setNoDelay(true);
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("error", (e) => this.fail(new ClosedError(`connection failed: ${e.message}`)));
    socket.on("close", () => this.fail(new ClosedError("the node closed the connection")));
  }

  /** Connects to a node (and says `hello` when `tenant` is given). */
  static async connect(opts: ConnectOptions = {}): Promise<Client> {
    const host = opts.host ?? "127.0.0.1";
    const port = opts.port ?? DEFAULT_PORT;
    const timeoutMs = positive(opts.connectTimeoutMs, CONNECT_TIMEOUT_MS_DEFAULT, "connectTimeoutMs");
    const socket = await open(host, port, opts.tls, timeoutMs);
    const client = new Client(socket, opts);
    if (opts.tenant !== undefined) {
      try {
        await client.hello(opts.tenant, opts.token);
      } catch (e) {
        client.close();
        throw e;
      }
    }
    return client;
  }

  /** Calls out whose answer has not arrived. */
  get inFlight(): number {
    return this.pending.size;
  }

  /** True once the connection is closed (by either side); every later call rejects. */
  get closed(): boolean {
    return this.closedBy !== undefined;
  }

  /** Closes the connection; calls still out reject with {@link ClosedError}. */
  close(): void {
    this.fail(new ClosedError("the client closed the connection"));
  }

  /** Calls `accelerator` with `payload`; resolves to its output, rejects unless OK. */
  async call(accelerator: Accelerator, payload: Uint8Array = EMPTY, opts: CallOptions = {}): Promise<Uint8Array> {
    const r = await this.request(accelerator, payload, opts);
    if (r.status !== Status.OK) throw RacError.of(r.status, r.requestId, utf8(r.payload));
    return r.payload;
  }

  /** As {@link call}, but resolves to the whole {@link Result}, whatever its status. */
  async request(accelerator: Accelerator, payload: Uint8Array, opts: CallOptions = {}): Promise<Result> {
    const accelId = typeof accelerator === "number" ? accelerator : (this.names.get(accelerator) ?? (await this.resolve(accelerator)));
    if (accelId === CONTROL_ACCEL_ID) throw new RangeError("accelerator id 0xffff is reserved for control messages");
    const params = opts.params instanceof Uint8Array ? opts.params : await this.paramsFor(accelId, accelerator, opts.params);
    const deadlineUs = opts.deadlineMs === undefined ? 0 : Math.round(opts.deadlineMs * 1000);
    return this.send(Kind.Call, accelId, payload, params, deadlineUs, opts.timeoutMs);
  }

  /** Says `hello`: the connection now belongs to `tenant`. */
  async hello(tenant: string, token?: string): Promise<{ tenant: string }> {
    return (await this.control("hello", { tenant }, token)) as { tenant: string };
  }

  /** The node's catalog; names and params learnt from it serve later calls. */
  async catalog(token?: string): Promise<CatalogEntry[]> {
    const entries = (await this.control("catalog", {}, token)) as CatalogEntry[];
    for (const e of entries) {
      this.names.set(e.name, e.id);
      this.specs.set(e.id, e.params ?? []);
    }
    return entries;
  }

  /** The node's slots (`GET /v1/slots`). */
  async slots(token?: string): Promise<unknown> {
    return this.control("slots", {}, token);
  }

  /** Loads `accelerator` into `slot` (needs the node's admin token when it has one). */
  async load(slot: number, accelerator: string, token?: string): Promise<unknown> {
    return this.control("load", { slot, accelerator }, token);
  }

  /** Sends a control message; resolves to its parsed JSON answer, rejects unless OK. */
  async control(op: string, fields: Record<string, string | number> = {}, token?: string): Promise<unknown> {
    const payload = controlPayload(op, fields, token);
    const r = await this.send(Kind.Control, CONTROL_ACCEL_ID, payload, NO_PARAMS, 0, undefined);
    if (r.status !== Status.OK) throw RacError.of(r.status, r.requestId, utf8(r.payload));
    try {
      return JSON.parse(utf8(r.payload));
    } catch {
      throw new ProtocolError(`the answer to control op '${op}' is not JSON`);
    }
  }

  private async resolve(name: string): Promise<number> {
    await this.loadCatalog();
    const id = this.names.get(name);
    if (id === undefined) {
      throw new RacError(Status.UNKNOWN_ACCELERATOR, 0, `the node's catalog has no accelerator named '${name}'`);
    }
    return id;
  }

  /** The catalog, asked once per connection however many calls need it at once. */
  private loadCatalog(): Promise<CatalogEntry[]> {
    if (this.catalogLoad === undefined) {
      this.catalogLoad = this.catalog();
      this.catalogLoad.catch(() => (this.catalogLoad = undefined));
    }
    return this.catalogLoad;
  }

  private async paramsFor(accelId: number, accelerator: Accelerator, values: Readonly<Record<string, ParamValue>> | undefined): Promise<Uint8Array> {
    if (values === undefined || Object.keys(values).length === 0) {
      const known = this.specs.get(accelId);
      if (known === undefined || known.every((s) => s.default !== null && s.default !== undefined)) {
        return known === undefined ? NO_PARAMS : packParams(known, {}, String(accelerator));
      }
    }
    let specs = this.specs.get(accelId);
    if (specs === undefined) {
      await this.loadCatalog();
      specs = this.specs.get(accelId);
    }
    if (specs === undefined) throw new RangeError(`the node's catalog has no accelerator with id ${accelId}: give params as 44 bytes`);
    return packParams(specs, values ?? {}, String(accelerator));
  }

  private send(kind: Kind.Call | Kind.Control, accelId: number, payload: Uint8Array, params: Uint8Array, deadlineUs: number, timeoutMs: number | undefined): Promise<Result> {
    if (this.closedBy) return Promise.reject(this.closedBy);
    return new Promise<Result>((resolve, reject) => {
      const entry: Pending = { kind, resolve, reject, abandoned: false };
      let requestId = 0;
      if (timeoutMs !== undefined) {
        entry.timer = setTimeout(() => {
          entry.abandoned = true;
          reject(new DeadlineError(requestId, `no answer within ${timeoutMs} ms`, true));
        }, timeoutMs);
      }
      const go = () => {
        if (entry.abandoned) return;
        requestId = this.newRequestId();
        assert.ok(this.pending.size < this.maxInFlight, "a call sent with no place free");
        this.pending.set(requestId, entry);
        this.write(kind, accelId, requestId, deadlineUs, params, payload);
      };
      if (this.pending.size < this.maxInFlight && this.waiting.length === 0) return go();
      if (this.waiting.length >= this.maxWaiting) {
        clearTimeout(entry.timer);
        return reject(new NetaccelError(`${this.maxWaiting} calls already wait for one of ${this.maxInFlight} places in flight`));
      }
      this.waiting.push({ go, fail: (e) => (clearTimeout(entry.timer), reject(e)) });
    });
  }

  /** The next id not in flight; ids wrap at 2^32 and skip 0 (the node's id for unreadable calls). */
  private newRequestId(): number {
    for (;;) {
      const id = this.nextId;
      this.nextId = this.nextId === 0xffffffff ? 1 : this.nextId + 1;
      if (!this.pending.has(id)) return id;
    }
  }

  private write(kind: Kind.Call | Kind.Control, accelId: number, requestId: number, deadlineUs: number, params: Uint8Array, payload: Uint8Array): void {
    const small = payload.length <= COALESCE_LEN;
    const frame = Buffer.allocUnsafe(small ? HEADER_LEN + payload.length : HEADER_LEN);
    encodeCallHeaderInto({ kind, accelId, payloadLen: payload.length, requestId, deadlineUs, params }, frame);
    if (small) frame.set(payload, HEADER_LEN);
    if (!this.corked) {
      // Calls made in one tick leave in one write.
      this.corked = true;
      this.socket.cork();
      process.nextTick(() => {
        this.corked = false;
        this.socket.uncork();
      });
    }
    this.socket.write(frame);
    if (!small) this.socket.write(payload);
  }

  private onData(chunk: Buffer): void {
    this.buf = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    let off = 0;
    try {
      while (this.buf.length - off >= HEADER_LEN) {
        const header = decodeResultHeader(this.buf.subarray(off, off + HEADER_LEN), this.maxPayloadLen);
        if (isPartial(header)) throw new Error("unreachable: 64 bytes are a whole header");
        const end = off + HEADER_LEN + header.payloadLen;
        if (this.buf.length < end) break;
        const payload = this.buf.subarray(off + HEADER_LEN, end);
        off = end;
        this.deliver({ ...header, payload });
        if (this.closedBy) return;
      }
    } catch (e) {
      const why = e instanceof HeaderError ? `malformed result header (${e.reason}): ${e.message}` : String(e);
      this.fail(e instanceof ProtocolError ? e : new ProtocolError(why));
      return;
    }
    this.buf = off === this.buf.length ? Buffer.alloc(0) : this.buf.subarray(off);
  }

  private deliver(r: Result & { kind: Kind }): void {
    if (r.requestId === 0) {
      // An answer to the connection, not a call (0 is never a call's id): BUSY at the
      // node's connection bound, or PROTOCOL_ERROR. The node closes after it.
      return this.fail(RacError.of(r.status, 0, `the node answered the connection: ${utf8(r.payload)}`));
    }
    const entry = this.pending.get(r.requestId);
    if (entry === undefined) throw new ProtocolError(`a result for request ${r.requestId}, which is not in flight`);
    const want = entry.kind === Kind.Call ? Kind.Result : Kind.ControlResult;
    if (r.kind !== want) throw new ProtocolError(`a result of kind ${r.kind} for request ${r.requestId}, which expects kind ${want}`);
    this.pending.delete(r.requestId);
    clearTimeout(entry.timer);
    if (!entry.abandoned) entry.resolve(r);
    this.admit();
    if (closesConnection(r.status)) this.fail(new ClosedError(`the node answered ${Status[r.status]} and closes the connection`));
  }

  /** Lets waiting calls go while places are free. */
  private admit(): void {
    while (this.pending.size < this.maxInFlight && this.waiting.length > 0) this.waiting.shift()!.go();
    assert.ok(this.pending.size <= this.maxInFlight, "more calls out than maxInFlight");
    assert.ok(this.waiting.length <= this.maxWaiting, "more calls waiting than maxWaiting");
  }

  /** Ends the connection: every call out and every waiting call rejects with `error`. */
  private fail(error: Error): void {
    if (this.closedBy) return;
    this.closedBy =
      error instanceof ClosedError || error instanceof ProtocolError ? error : new ClosedError(`connection unusable: ${error.message}`);
    this.socket.destroy();
    const pending = [...this.pending.values()];
    this.pending.clear();
    for (const p of pending) {
      clearTimeout(p.timer);
      if (!p.abandoned) p.reject(error);
    }
    for (const w of this.waiting.splice(0)) w.fail(error);
  }
}

function utf8(b: Uint8Array): string {
  return Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString("utf8");
}

function open(host: string, port: number, opts: TlsOptions | undefined, timeoutMs: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket: net.Socket = opts
      ? tls.connect({
          host,
          port,
          ca: readPem(opts.ca),
          cert: readPem(opts.cert),
          key: readPem(opts.key),
          servername: opts.servername ?? (net.isIP(host) ? undefined : host),
        })
      : net.connect({ host, port });
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new ClosedError(`cannot connect to ${host}:${port} within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.once(opts ? "secureConnect" : "connect", () => {
      clearTimeout(timer);
      socket.removeAllListeners("error");
      resolve(socket);
    });
    socket.once("error", (e) => {
      clearTimeout(timer);
      reject(new ClosedError(`cannot connect to ${host}:${port}: ${e.message}`));
    });
  });
}
