/**
 * The registry's JSON bodies, declared once for the TypeScript client.
 *
 * Each body of the registry's HTTP API (`spec/registry-api.md`) is a schema here: its
 * fields, each with a type, whether `null` is allowed, a default when absent, and
 * whether it is left out when equal to a value. {@link parse} checks a document against
 * a schema and fills in defaults; {@link dump} writes a value back as the registry
 * would. The registry client reads every answer through {@link parse}. The schemas
 * mirror the Rust crate `registry-api` and the Python `netaccel.registry_api`; all
 * round-trip the golden fixtures of `spec/registry/`.
 *
 * Not here: HTTP, retries, following the leader (`registry.ts`).
 *
 * @module
 */

/** A document does not have the shape its schema declares. */
export class ShapeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ShapeError";
  }
}

/** A field's type: a scalar name, a schema name, or `[kind]` for a list of them. */
type FieldKind = string | [string];

const REQUIRED = Symbol("required");
const KEEP = Symbol("keep");

interface Field {
  kind: FieldKind;
  nullable: boolean;
  /** The value when absent ({@link REQUIRED}: absence is an error). */
  default: unknown;
  /** Left out of a dump when equal to this ({@link KEEP}: always written). */
  omit: unknown;
}

function f(kind: FieldKind, opts: { nullable?: boolean; default?: unknown; omit?: unknown } = {}): Field {
  return {
    kind,
    nullable: opts.nullable ?? false,
    default: "default" in opts ? opts.default : REQUIRED,
    omit: "omit" in opts ? opts.omit : KEEP,
  };
}

const ADDR = f("addr", { nullable: true, default: null });
const NAME_OR_NULL = f("str", { nullable: true, default: null });

/** Every body's fields, in the order the registry writes them. */
export const SCHEMAS: Readonly<Record<string, Readonly<Record<string, Field>>>> = {
  "slot-registration": {
    id: f("u16"),
    accelerator: f("str"),
    hash: f("str", { default: "" }),
    busy_ratio: f("float", { default: 0 }),
    queue_depth: f("u32", { default: 0 }),
  },
  "device-registration": {
    id: f("str"),
    backend: f("str"),
    vendor: f("str", { default: "" }),
    platform: f("str", { default: "" }),
    accelerators: f(["str"], { nullable: true, default: null, omit: null }),
    slots: f(["slot-registration"]),
  },
  "node-registration": {
    http: f("addr"),
    rac: f("addr"),
    opencl: ADDR,
    https: ADDR,
    rac_tls: ADDR,
    grpc: ADDR,
    grpc_tls: ADDR,
    devices: f(["device-registration"]),
  },
  "lease-grant": { lease_ms: f("int") },
  slot: {
    id: f("u16"),
    accelerator: f("str"),
    hash: f("str"),
    busy_ratio: f("float"),
    queue_depth: f("u32"),
    utilization: f("float"),
    reconfiguring: f("str", { nullable: true }),
    released: f("bool"),
    instances: f(["str"]),
  },
  device: {
    id: f("str"),
    backend: f("str"),
    vendor: f("str"),
    platform: f("str"),
    accelerators: f(["str"], { nullable: true }),
    slots: f(["slot"]),
  },
  node: {
    name: f("str"),
    state: f("str"),
    http: f("addr"),
    rac: f("addr"),
    opencl: ADDR,
    https: ADDR,
    rac_tls: ADDR,
    grpc: ADDR,
    grpc_tls: ADDR,
    devices: f(["device"]),
  },
  query: { backend: NAME_OR_NULL, vendor: NAME_OR_NULL, node: NAME_OR_NULL },
  "function-spec": {
    accelerator: f("str"),
    hash: NAME_OR_NULL,
    query: f("query", { default: {} }),
    instances: f("u32", { default: 1 }),
  },
  binding: {
    id: f("str"),
    function: f("str"),
    node: NAME_OR_NULL,
    device: NAME_OR_NULL,
    slot: f("u16", { nullable: true, default: null }),
    http: ADDR,
    rac: ADDR,
    opencl: ADDR,
    https: ADDR,
    rac_tls: ADDR,
    grpc: ADDR,
    grpc_tls: ADDR,
    generation: f("int"),
    pinned: f("bool", { default: false, omit: false }),
  },
  function: {
    name: f("str"),
    accelerator: f("str"),
    hash: f("str", { nullable: true }),
    query: f("query"),
    instances: f(["binding"]),
  },
  "instance-spec": {
    id: f("str", { nullable: true, default: null, omit: null }),
    node: f("str", { nullable: true, default: null, omit: null }),
  },
  "reconfiguration-request": {
    node: f("str"),
    device: f("str"),
    slot: f("u16"),
    accelerator: f("str"),
    instance: f("str", { nullable: true, default: null, omit: null }),
  },
  verdict: {
    allowed: f("bool"),
    migrated: f(["str"], { nullable: true, default: null, omit: null }),
    reason: f("str", { nullable: true, default: null, omit: null }),
  },
  "unreachable-report": { generation: f("int") },
  error: { error: f("str"), code: f("str") },
  health: { status: f("str") },
};

/** Bodies that are a list of another: `nodes` is `GET /v1/nodes`. */
export const LISTS: Readonly<Record<string, string>> = { nodes: "node", functions: "function" };

/** Bodies whose unknown fields are refused (what the registry parses); answers tolerate new fields. */
const STRICT = new Set([
  "node-registration",
  "device-registration",
  "slot-registration",
  "function-spec",
  "query",
  "instance-spec",
  "reconfiguration-request",
  "unreachable-report",
  "health",
]);

const INTS: Record<string, [number, number]> = {
  int: [0, Number.MAX_SAFE_INTEGER],
  u16: [0, 0xffff],
  u32: [0, 0xffffffff],
};

/** A parsed document: every field of its schema present. */
export type Doc = Record<string, unknown>;

function isObject(v: unknown): v is Doc {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function show(v: unknown): string {
  return JSON.stringify(v) ?? String(v);
}

function checkAddr(value: unknown, where: string): string {
  if (typeof value !== "string") throw new ShapeError(`${where}: expected HOST:PORT, got ${show(value)}`);
  const colon = value.lastIndexOf(":");
  const port = value.slice(colon + 1);
  if (colon <= 0 || !/^[0-9]+$/.test(port) || Number(port) > 0xffff) {
    throw new ShapeError(`${where}: ${show(value)} is not HOST:PORT`);
  }
  return value;
}

function value(kind: FieldKind, v: unknown, where: string): unknown {
  if (Array.isArray(kind)) {
    if (!Array.isArray(v)) throw new ShapeError(`${where}: expected a list, got ${show(v)}`);
    return v.map((x, i) => value(kind[0], x, `${where}[${i}]`));
  }
  if (kind in SCHEMAS) return parse(kind, v, where);
  switch (kind) {
    case "str":
      if (typeof v !== "string") throw new ShapeError(`${where}: expected a string, got ${show(v)}`);
      return v;
    case "bool":
      if (typeof v !== "boolean") throw new ShapeError(`${where}: expected true or false, got ${show(v)}`);
      return v;
    case "float":
      if (typeof v !== "number") throw new ShapeError(`${where}: expected a number, got ${show(v)}`);
      return v;
    case "addr":
      return checkAddr(v, where);
  }
  const range = INTS[kind];
  if (range === undefined) throw new Error(`unknown kind ${kind}`);
  if (typeof v !== "number" || !Number.isInteger(v) || v < range[0] || v > range[1]) {
    throw new ShapeError(`${where}: expected an integer in ${range[0]}..=${range[1]}, got ${show(v)}`);
  }
  return v;
}

function fieldDefault(field: Field): unknown {
  if (typeof field.kind === "string" && field.kind in SCHEMAS && isObject(field.default)) {
    return parse(field.kind, field.default);
  }
  return field.default;
}

/** `doc` checked against `schema` (a name of {@link SCHEMAS} or {@link LISTS}), defaults filled in. */
export function parse(schema: string, doc: unknown, where = ""): Doc & unknown {
  where = where || schema;
  if (schema in LISTS) return value([LISTS[schema]], doc, where) as Doc;
  const fields = SCHEMAS[schema];
  if (fields === undefined) throw new Error(`no schema named ${schema}`);
  if (!isObject(doc)) throw new ShapeError(`${where}: expected an object, got ${show(doc)}`);
  const unknown = Object.keys(doc).filter((k) => !(k in fields));
  if (unknown.length > 0 && STRICT.has(schema)) throw new ShapeError(`${where}: unknown fields ${show(unknown.sort())}`);
  const out: Doc = {};
  for (const [name, field] of Object.entries(fields)) {
    if (!(name in doc)) {
      if (field.default === REQUIRED) throw new ShapeError(`${where}: ${name} is missing`);
      out[name] = fieldDefault(field);
    } else if (doc[name] === null) {
      if (!field.nullable) throw new ShapeError(`${where}.${name}: must not be null`);
      out[name] = null;
    } else {
      out[name] = value(field.kind, doc[name], `${where}.${name}`);
    }
  }
  return out;
}

/** `doc` (as {@link parse} gives it) as the JSON document the registry writes. */
export function dump(schema: string, doc: unknown): unknown {
  if (schema in LISTS) return (doc as unknown[]).map((d) => dump(LISTS[schema], d));
  const out: Doc = {};
  for (const [name, field] of Object.entries(SCHEMAS[schema])) {
    const v = name in (doc as Doc) ? (doc as Doc)[name] : fieldDefault(field);
    if (field.omit !== KEEP && v === field.omit) continue;
    out[name] = dumpValue(field.kind, v);
  }
  return out;
}

function dumpValue(kind: FieldKind, v: unknown): unknown {
  if (v === null) return null;
  if (Array.isArray(kind)) return (v as unknown[]).map((x) => dumpValue(kind[0], x));
  if (kind in SCHEMAS) return dump(kind, v);
  return v;
}

/** The schema a fixture of `spec/registry/` holds: its name up to the first `.`. */
export function schemaOfFixture(fileName: string): string | undefined {
  const kind = fileName.split(".", 1)[0];
  return kind in SCHEMAS || kind in LISTS ? kind : undefined;
}

/** Every top-level body of the API (what `spec/registry/` must have a file of). */
export const BODIES: readonly string[] = [
  "node-registration",
  "lease-grant",
  "nodes",
  "function-spec",
  "function",
  "functions",
  "instance-spec",
  "binding",
  "reconfiguration-request",
  "verdict",
  "unreachable-report",
  "error",
  "health",
];
