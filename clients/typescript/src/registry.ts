/**
 * Calls through a netaccel registry's binding; the same behaviour as the Rust
 * (`crates/client/src/registry.rs`) and Python (`netaccel.registry`) clients.
 *
 * The registry never carries calls. {@link BoundClient.bind} asks it once for an
 * instance of a function (`POST /v1/functions/F/instances`), then calls the node that
 * instance is bound to, directly, over RAC. A long poll
 * (`GET …/instances/ID?after=G&wait_ms=T`) stays open so a migration is seen as soon as
 * the registry makes it; the old node's connection is then closed, and a call out there
 * fails at once and is retried on the new binding. When a call fails in a way that means
 * "this binding is stale" — the node cannot be reached or the connection breaks, or it
 * answers UNKNOWN_ACCELERATOR or UNAVAILABLE — the client waits (at most
 * `rebindWaitMs`) for the registry to rebind the instance and retries once there. A node
 * that cannot be reached (or, with `unreachableAfterMs`, has not answered that long) is
 * first reported to the registry (`POST …/instances/ID/unreachable`), which moves the
 * instance at once instead of when the node's lease runs out. Any other failure, and a
 * second one, is thrown.
 *
 * The registry may run as several replicas (one leads; the others answer reads and send
 * writers to the leader with `503 NOT_LEADER` and a `Location`). Give them all,
 * comma-separated: a request goes to the replica that answered last, then to the next
 * one (or the leader a follower names) when a replica cannot be reached or answers 503,
 * and goes round them again for up to `electionWaitMs` while an election settles.
 *
 * @module
 */

import * as http from "node:http";
import * as https from "node:https";

import { Client, type CallOptions, type ConnectOptions, type TlsOptions } from "./client";
import { ClosedError, NetaccelError, RacError } from "./errors";
import { Status } from "./rac";
import * as api from "./registry_api";

/** Longest long poll the watcher asks for: a closed client's poll ends within it. */
export const WATCH_WAIT_MS = 5000;
/** Longest wait of one long poll while rebinding (the registry refuses longer ones). */
export const REBIND_POLL_WAIT_MS_MAX = 60_000;
/** Pause after a failed poll, so an unreachable registry is not asked in a loop. */
export const WATCH_RETRY_PAUSE_MS = 500;
/** Largest registry answer read. */
export const RESPONSE_BYTES_MAX = 64 << 20;
/** Registry replicas a client may list (more are ignored). */
export const REGISTRY_REPLICAS_MAX = 8;
/** How long a request goes round the replicas while none takes it but some answer 503. */
export const ELECTION_WAIT_MS = 10_000;
/** Pause between two such rounds. */
export const ROUND_PAUSE_MS = 100;
/** Longest a registry request may take (it must outlast the longest long poll). */
export const REQUEST_TIMEOUT_MS = 90_000;

/** The registry answered with an error (`status` 0: it could not be reached). */
export class RegistryError extends NetaccelError {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(status ? `registry answered ${status} ${code}: ${message}` : message);
  }
}

/** The registry gave the instance no usable binding within the wait. */
export class NoBindingError extends NetaccelError {}

/** An instance and where it is bound: the registry's binding document. */
export interface Binding {
  id: string;
  function: string;
  node: string | null;
  device: string | null;
  slot: number | null;
  http: string | null;
  rac: string | null;
  opencl: string | null;
  https: string | null;
  rac_tls: string | null;
  grpc: string | null;
  grpc_tls: string | null;
  generation: number;
  pinned: boolean;
}

/** Reads a binding document; {@link api.ShapeError} if it is not one. */
export function parseBinding(doc: unknown): Binding {
  return api.parse("binding", doc) as unknown as Binding;
}

/** True when the binding names a slot and a RAC address. */
export function isBound(b: Binding): boolean {
  return b.slot !== null && b.rac !== null;
}

/** True for failures that mean the node no longer serves this binding. */
export function isStaleBinding(error: unknown): boolean {
  if (error instanceof RacError) return error.status === Status.UNKNOWN_ACCELERATOR || error.status === Status.UNAVAILABLE;
  return error instanceof ClosedError;
}

class Unreachable extends Error {}

class Refused extends Error {
  constructor(
    readonly error: RegistryError,
    readonly leader: string | undefined,
  ) {
    super(error.message);
  }
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

function base(url: string): string {
  url = url.trim().replace(/\/+$/, "");
  return url.includes("://") ? url : `http://${url}`;
}

function origin(location: string | undefined): string | undefined {
  if (!location) return undefined;
  try {
    const u = new URL(location);
    return `${u.protocol}//${u.host}`;
  } catch {
    return undefined;
  }
}

const q = encodeURIComponent;

/** The registry's HTTP API. `url` is one registry, or several replicas comma-separated. */
export class RegistryClient {
  /** The replicas, as given. */
  readonly urls: string[];
  private preferred = 0;

  constructor(
    url: string,
    readonly token?: string,
    readonly electionWaitMs = ELECTION_WAIT_MS,
  ) {
    const bases = url
      .split(",")
      .filter((u) => u.trim())
      .map(base)
      .slice(0, REGISTRY_REPLICAS_MAX);
    this.urls = bases.length > 0 ? bases : [base(url)];
  }

  /** The replica requests go to first: the one that answered last. */
  get url(): string {
    return this.urls[this.preferred];
  }

  /** One request, in rounds (the loop of the Rust and Python clients). */
  async request(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<unknown> {
    const data = body === undefined ? undefined : JSON.stringify(body);
    const settled = Date.now() + this.electionWaitMs;
    const unreachable: string[] = [];
    let refusal: RegistryError | undefined;
    for (;;) {
      const round = await this.round(method, path, data, unreachable, signal);
      if ("text" in round) return round.text ? JSON.parse(round.text) : null;
      refusal = round.refusal ?? refusal;
      if (round.refusal === undefined || Date.now() + ROUND_PAUSE_MS >= settled) break;
      await sleep(ROUND_PAUSE_MS);
    }
    throw refusal ?? new RegistryError(0, "UNREACHABLE", unreachable.join("; "));
  }

  /** Asks the preferred replica, then the others, and each leader a follower names right after it, each once. */
  private async round(method: string, path: string, data: string | undefined, unreachable: string[], signal?: AbortSignal): Promise<{ text: string } | { refusal?: RegistryError }> {
    const order = this.urls.map((_, i) => this.urls[(this.preferred + i) % this.urls.length]);
    const asked = new Set<string>();
    let refusal: RegistryError | undefined;
    while (order.length > 0) {
      const at = order.shift()!;
      if (asked.has(at)) continue;
      asked.add(at);
      try {
        const text = await this.send(at, method, path, data, signal);
        const i = this.urls.indexOf(at);
        if (i >= 0) this.preferred = i;
        return { text };
      } catch (e) {
        if (e instanceof Unreachable) {
          unreachable.push(e.message);
          continue;
        }
        if (!(e instanceof Refused)) throw e;
        if (e.error.status !== 503) throw e.error;
        if (e.leader) order.unshift(e.leader);
        refusal = e.error;
      }
    }
    return { refusal };
  }

  private send(at: string, method: string, path: string, data: string | undefined, signal?: AbortSignal): Promise<string> {
    const url = new URL(at + path);
    const headers: Record<string, string> = {};
    if (data !== undefined) headers["Content-Type"] = "application/json";
    if (this.token) headers.Authorization = `Bearer ${this.token}`;
    const lib = url.protocol === "https:" ? https : http;
    return new Promise((resolve, reject) => {
      const req = lib.request(url, { method, headers, timeout: REQUEST_TIMEOUT_MS, signal }, (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (c: Buffer) => {
          size += c.length;
          if (size > RESPONSE_BYTES_MAX) req.destroy(new Error(`answer above ${RESPONSE_BYTES_MAX} bytes`));
          else chunks.push(c);
        });
        res.on("error", (e) => reject(new Unreachable(`cannot read the registry's answer from ${at}: ${e.message}`)));
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8");
          const status = res.statusCode ?? 0;
          if (status < 400) return resolve(text);
          let code = "UNKNOWN";
          let message = text;
          try {
            const doc = JSON.parse(text);
            code = doc.code ?? code;
            message = doc.error ?? "";
          } catch {
            // not JSON: the text is the message
          }
          const location = res.headers.location;
          reject(new Refused(new RegistryError(status, code, message), status === 503 ? origin(location) : undefined));
        });
      });
      req.on("timeout", () => req.destroy(new Error(`no answer within ${REQUEST_TIMEOUT_MS} ms`)));
      req.on("error", (e) => reject(signal?.aborted ? new ClosedError("registry request aborted") : new Unreachable(`cannot reach the registry at ${at}: ${e.message}`)));
      req.end(data);
    });
  }

  /** `GET /v1/nodes`. */
  async nodes(): Promise<api.Doc[]> {
    return api.parse("nodes", await this.request("GET", "/v1/nodes")) as unknown as api.Doc[];
  }

  /** A function and its instances' bindings. */
  async function(name: string): Promise<api.Doc> {
    return api.parse("function", await this.request("GET", `/v1/functions/${q(name)}`));
  }

  /** Creates or replaces a function (`query`: backend, vendor, node). */
  async putFunction(name: string, accelerator: string, instances = 0, query: Record<string, string> = {}): Promise<api.Doc> {
    const spec = api.parse("function-spec", { accelerator, instances, query });
    return api.parse("function", await this.request("PUT", `/v1/functions/${q(name)}`, api.dump("function-spec", spec)));
  }

  async deleteFunction(name: string): Promise<void> {
    await this.request("DELETE", `/v1/functions/${q(name)}`);
  }

  /** Binds a new instance (or the one named `id`), on `node` if given. */
  async createInstance(fn: string, id?: string, node?: string): Promise<Binding> {
    const body = api.dump("instance-spec", api.parse("instance-spec", { id: id ?? null, node: node ?? null }));
    return parseBinding(await this.request("POST", `/v1/functions/${q(fn)}/instances`, body));
  }

  /** The binding; with `after`, waits up to `waitMs` for one whose generation is not `after` (the long poll). */
  async instance(fn: string, id: string, after?: number, waitMs = 0, signal?: AbortSignal): Promise<Binding> {
    let path = `/v1/functions/${q(fn)}/instances/${q(id)}`;
    if (after !== undefined) path += `?after=${after}&wait_ms=${Math.floor(waitMs)}`;
    return parseBinding(await this.request("GET", path, undefined, signal));
  }

  /**
   * Tells the registry this client could not reach the node of the instance's binding
   * `generation`: if that binding is still current, the registry moves the instance to
   * another node. Resolves to the binding then.
   */
  async reportUnreachable(fn: string, id: string, generation: number): Promise<Binding> {
    return parseBinding(await this.request("POST", `/v1/functions/${q(fn)}/instances/${q(id)}/unreachable`, { generation }));
  }

  async deleteInstance(fn: string, id: string): Promise<void> {
    await this.request("DELETE", `/v1/functions/${q(fn)}/instances/${q(id)}`);
  }
}

/** How {@link BoundClient.bind} binds and calls. */
export interface BindOptions {
  /** The registry's URL, or its replicas' URLs comma-separated. */
  registry: string;
  function: string;
  /** The registry's bearer token. */
  token?: string;
  /** Bind this instance (kept on close); default: a new one, deleted by `close()`. */
  instance?: string;
  /** How long a call waits for the registry to rebind a stale instance (default 10 s). */
  rebindWaitMs?: number;
  /** Follow migrations with a long poll (default true). */
  watch?: boolean;
  /**
   * A call that has had no answer for this long is abandoned as if its node could not
   * be reached ({@link ClosedError}): reported to the registry, which moves the instance
   * to another node, and retried once on the new binding. For a node cut off from its
   * clients while the registry still reaches it. Set it above the longest call the
   * function makes (the call may run twice). Default: calls are not abandoned for time.
   */
  unreachableAfterMs?: number;
  /** Call the node's RAC-over-TLS listener (`rac_tls` of the binding) with these. */
  tls?: TlsOptions;
  /** Bounds of the node connection (see {@link ConnectOptions}). */
  connect?: Omit<ConnectOptions, "host" | "port" | "tls">;
  electionWaitMs?: number;
}

function splitAddr(addr: string): { host: string; port: number } {
  if (addr.startsWith("[")) {
    const end = addr.indexOf("]");
    return { host: addr.slice(1, end), port: Number(addr.slice(end + 2)) };
  }
  const colon = addr.lastIndexOf(":");
  return { host: addr.slice(0, colon), port: Number(addr.slice(colon + 1)) };
}

/** An instance of a function that calls its node and follows its binding. */
export class BoundClient {
  private node: { addr: string; client: Promise<Client> } | undefined;
  private stopped = false;
  private readonly abort = new AbortController();
  private watcher: Promise<void> | undefined;

  private constructor(
    readonly registry: RegistryClient,
    readonly fn: string,
    readonly accelerator: string,
    private current: Binding,
    private readonly owned: boolean,
    private readonly opts: BindOptions,
  ) {}

  /** Binds an instance of `opts.function` and starts following it. */
  static async bind(opts: BindOptions): Promise<BoundClient> {
    const registry = new RegistryClient(opts.registry, opts.token, opts.electionWaitMs);
    const accelerator = String((await registry.function(opts.function)).accelerator);
    const binding = await registry.createInstance(opts.function, opts.instance);
    const bound = new BoundClient(registry, opts.function, accelerator, binding, opts.instance === undefined, opts);
    if (opts.watch ?? true) bound.watcher = bound.watch();
    return bound;
  }

  /** The binding as last seen. */
  get binding(): Binding {
    return this.current;
  }

  /** Calls the function's accelerator on the bound node; rebinds and retries once on a stale binding. */
  async call(payload: Uint8Array, opts: CallOptions = {}): Promise<Uint8Array> {
    let binding = this.current;
    if (!isBound(binding)) binding = await this.rebind(binding, undefined);
    try {
      return await this.callNode(binding, payload, opts);
    } catch (first) {
      if (!isStaleBinding(first)) throw first;
      // Not an answer of the node's: it could not be reached.
      if (first instanceof ClosedError) await this.reportUnreachable(binding);
      binding = await this.rebind(binding, first);
    }
    return this.callNode(binding, payload, opts);
  }

  /** Stops following, closes the node connection, and releases the instance if this client created it. */
  async close(): Promise<void> {
    this.stopped = true;
    this.abort.abort();
    this.dropNode();
    await this.watcher;
    if (this.owned) {
      try {
        await this.registry.deleteInstance(this.fn, this.current.id);
      } catch (e) {
        if (!(e instanceof RegistryError)) throw e; // gone already, or the registry is away
      }
    }
  }

  private async callNode(binding: Binding, payload: Uint8Array, opts: CallOptions): Promise<Uint8Array> {
    const tls = this.opts.tls !== undefined;
    const addr = tls ? binding.rac_tls : binding.rac;
    if (addr === null) {
      throw new NoBindingError(`instance ${binding.id} is bound to node ${binding.node}, which has no ${tls ? "RAC-over-TLS" : "RAC"} listener`);
    }
    if (this.node === undefined || this.node.addr !== addr) {
      this.dropNode();
      const client = Client.connect({ ...this.opts.connect, ...splitAddr(addr), tls: this.opts.tls });
      client.catch(() => undefined); // awaited below; a failure is the call's
      this.node = { addr, client };
    }
    const node = this.node;
    try {
      return await this.unlessSilent(addr, (async () => (await node.client).call(this.accelerator, payload, opts))());
    } catch (e) {
      if (e instanceof ClosedError && this.node === node) this.dropNode(); // never reuse a broken connection
      throw e;
    }
  }

  /** `call`, or a {@link ClosedError} once it has had no answer for `unreachableAfterMs`. */
  private async unlessSilent<T>(addr: string, call: Promise<T>): Promise<T> {
    const after = this.opts.unreachableAfterMs;
    if (after === undefined) return call;
    call.catch(() => undefined); // once abandoned, its rejection is nobody's
    let timer: NodeJS.Timeout | undefined;
    const silent = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new ClosedError(`no answer from ${addr} within ${after} ms (unreachableAfterMs)`)), after);
    });
    try {
      return await Promise.race([call, silent]);
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * Tells the registry this client cannot reach `binding`'s node (unless the instance
   * has moved already) and keeps the binding it answers. A failed report changes
   * nothing: the rebind waits as it would have.
   */
  private async reportUnreachable(binding: Binding): Promise<void> {
    if (!isBound(binding) || this.current.generation !== binding.generation) return;
    try {
      const fresh = await this.registry.reportUnreachable(this.fn, binding.id, binding.generation);
      if (fresh.id === this.current.id && fresh.generation > this.current.generation) this.current = fresh;
    } catch {
      // the rebind below waits for the registry as it would have
    }
  }

  private dropNode(): void {
    const node = this.node;
    this.node = undefined;
    node?.client.then((c) => c.close(), () => undefined);
  }

  private async rebind(stale: Binding, cause: unknown): Promise<Binding> {
    const rebindWaitMs = this.opts.rebindWaitMs ?? 10_000;
    const deadline = Date.now() + rebindWaitMs;
    let seen = stale.generation;
    for (;;) {
      const current = this.current;
      if (current.generation !== stale.generation && isBound(current)) return current;
      seen = Math.max(seen, current.generation);
      const left = deadline - Date.now();
      if (left <= 0) {
        const why = cause ? `; the call failed with: ${cause}` : "";
        throw new NoBindingError(`instance ${stale.id} has no usable binding: the registry did not move it off ${stale.node} within ${rebindWaitMs} ms${why}`);
      }
      try {
        this.current = await this.registry.instance(this.fn, stale.id, seen, Math.min(left, REBIND_POLL_WAIT_MS_MAX));
      } catch (e) {
        if (!(e instanceof RegistryError) || e.status !== 404) throw e;
        this.current = await this.registry.createInstance(this.fn, stale.id);
      }
    }
  }

  private async watch(): Promise<void> {
    while (!this.stopped) {
      const seen = this.current;
      let fresh: Binding;
      try {
        fresh = await this.registry.instance(this.fn, seen.id, seen.generation, WATCH_WAIT_MS, this.abort.signal);
      } catch {
        if (!this.stopped) await sleep(WATCH_RETRY_PAUSE_MS);
        continue;
      }
      if (this.stopped || fresh.id !== this.current.id || fresh.generation <= this.current.generation) continue;
      this.current = fresh;
      const addr = this.opts.tls ? fresh.rac_tls : fresh.rac;
      // A call out on the old node fails now and is retried on the new binding,
      // rather than waiting on a node that vanished.
      if (this.node !== undefined && this.node.addr !== addr) this.dropNode();
    }
  }
}
