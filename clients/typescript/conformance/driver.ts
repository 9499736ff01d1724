// The conformance driver of the TypeScript client: runs one case of
// clients/conformance/cases.json with the package's public API and prints one JSON line
// of what it observed (the format is in clients/conformance/README.md).
import * as fs from "node:fs";
import * as path from "node:path";

import { BoundClient, Client, ClosedError, DeadlineError, NoBindingError, ProtocolError, RacError, RegistryError, Status, type CallOptions, type TlsOptions } from "../src";

interface Call {
  accelerator?: string;
  accelerator_id?: number;
  params?: Record<string, number>;
  payload_hex?: string;
  payload_fill?: { byte: string; len: number };
  deadline_us?: number;
}

interface Case {
  name: string;
  mode: "sync" | "pipelined";
  function?: string;
  calls: Call[];
}

type ErrorLine = { kind: string; status?: string; retryable?: boolean; retry_after_ms?: number; message: string; call?: number };

const KINDS: Record<number, string> = {
  [Status.BAD_REQUEST]: "bad_request",
  [Status.UNKNOWN_ACCELERATOR]: "unknown_accelerator",
  [Status.BUSY]: "busy",
  [Status.TOO_LARGE]: "too_large",
  [Status.DEADLINE_EXCEEDED]: "deadline",
  [Status.UNAVAILABLE]: "unavailable",
  [Status.UNAUTHORIZED]: "unauthorized",
  [Status.INTERNAL]: "internal",
  [Status.PROTOCOL_ERROR]: "protocol",
};

function errorOf(e: unknown): ErrorLine {
  const message = e instanceof Error ? e.message : String(e);
  if (e instanceof DeadlineError && e.local) return { kind: "deadline", message };
  if (e instanceof RacError) {
    const line: ErrorLine = { kind: KINDS[e.status], status: Status[e.status], retryable: e.status === Status.BUSY || e.status === Status.UNAVAILABLE, message };
    if ("retryAfterMs" in e) line.retry_after_ms = (e as { retryAfterMs: number }).retryAfterMs;
    return line;
  }
  if (e instanceof ProtocolError) return { kind: "protocol", message };
  if (e instanceof ClosedError) return { kind: "closed", message };
  if (e instanceof RangeError) return { kind: "bad_request", message };
  if (e instanceof RegistryError) return { kind: "registry", message };
  if (e instanceof NoBindingError) return { kind: "unavailable", message };
  return { kind: "internal", message: `${(e as Error)?.name}: ${message}` };
}

function payloadOf(call: Call): Uint8Array {
  if (call.payload_fill) return new Uint8Array(call.payload_fill.len).fill(parseInt(call.payload_fill.byte, 16));
  return new Uint8Array(Buffer.from(call.payload_hex ?? "", "hex"));
}

function optionsOf(call: Call): CallOptions {
  const opts: CallOptions = {};
  if (call.params) opts.params = call.params;
  if (call.deadline_us) opts.deadlineMs = call.deadline_us / 1000;
  return opts;
}

const hex = (b: Uint8Array) => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString("hex");

interface Report {
  ok: boolean;
  outputs: (string | null)[];
  order: number[];
  error?: ErrorLine;
}

async function runCalls(client: Client, c: Case, report: Report): Promise<void> {
  const errors: (ErrorLine | undefined)[] = c.calls.map(() => undefined);
  const one = (i: number) => {
    const call = c.calls[i];
    const accelerator = call.accelerator_id ?? call.accelerator!;
    return client.call(accelerator, payloadOf(call), optionsOf(call)).then(
      (out) => {
        report.order.push(i);
        report.outputs[i] = hex(out);
      },
      (e) => {
        if (e instanceof RacError && e.requestId !== 0) report.order.push(i);
        errors[i] = errorOf(e);
      },
    );
  };
  if (c.mode === "sync") {
    for (let i = 0; i < c.calls.length; i++) await one(i);
  } else {
    await Promise.all(c.calls.map((_, i) => one(i)));
  }
  const failed = errors.findIndex((e) => e !== undefined);
  if (failed >= 0) {
    report.ok = false;
    report.error = { ...errors[failed]!, call: failed };
  }
}

async function runRegistry(args: Map<string, string>, c: Case, report: Report): Promise<void> {
  const bound = await BoundClient.bind({ registry: args.get("--registry")!, function: c.function!, token: args.get("--token"), rebindWaitMs: 10_000 });
  try {
    for (let i = 0; i < c.calls.length; i++) {
      report.outputs[i] = hex(await bound.call(payloadOf(c.calls[i]), optionsOf(c.calls[i])));
      report.order.push(i);
    }
  } finally {
    await bound.close();
  }
}

async function connect(args: Map<string, string>): Promise<Client> {
  const node = args.get("--node")!;
  const colon = node.lastIndexOf(":");
  let tls: TlsOptions | undefined;
  if (args.has("--tls-ca")) tls = { ca: args.get("--tls-ca"), cert: args.get("--cert"), key: args.get("--key") };
  return Client.connect({ host: node.slice(0, colon), port: Number(node.slice(colon + 1)), tls, tenant: args.get("--tenant"), token: args.get("--token"), maxInFlight: 256 });
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const args = new Map<string, string>();
  for (let i = 0; i + 1 < argv.length; i += 2) args.set(argv[i], argv[i + 1]);
  const casesFile = args.get("--cases") ?? path.resolve(__dirname, "../../../conformance/cases.json");
  const c = (JSON.parse(fs.readFileSync(casesFile, "utf8")).cases as Case[]).find((x) => x.name === args.get("--case"));
  if (c === undefined) throw new Error(`no case named ${args.get("--case")}`);
  const report: Report = { ok: true, outputs: c.calls.map(() => null), order: [] };
  try {
    if (args.has("--registry")) {
      await runRegistry(args, c, report);
    } else {
      let client: Client;
      try {
        client = await connect(args);
      } catch (e) {
        const error = e instanceof RacError ? errorOf(e) : { kind: "connect", message: String(e) };
        report.ok = false;
        report.error = { ...error, call: 0 };
        return;
      }
      try {
        await runCalls(client, c, report);
      } finally {
        client.close();
      }
    }
  } catch (e) {
    report.ok = false;
    report.error = { ...errorOf(e), call: report.order.length };
  } finally {
    // Exit only once the line is out: a pipe takes a long line in pieces.
    await new Promise<void>((resolve) => process.stdout.write(JSON.stringify(report) + "\n", () => resolve()));
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
