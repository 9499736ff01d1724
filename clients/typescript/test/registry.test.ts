// The registry's bodies against the golden fixtures (spec/registry/), and the bound
// client against a fake registry: leader failover, migrations, rebinding.
import * as assert from "node:assert/strict";
import * as fs from "node:fs";
import * as http from "node:http";
import * as net from "node:net";
import * as path from "node:path";
import { test } from "node:test";

import { BoundClient, RegistryClient, RegistryError, parseBinding } from "../src/registry";
import * as api from "../src/registry_api";
import * as rac from "../src/rac";

const FIXTURES = path.resolve(__dirname, "../../../../spec/registry");
const fixtures = () => fs.readdirSync(FIXTURES).filter((f) => f.endsWith(".json")).sort();
const load = (name: string) => JSON.parse(fs.readFileSync(path.join(FIXTURES, name), "utf8"));

test("every fixture round-trips through its schema", () => {
  assert.ok(fixtures().length >= api.BODIES.length);
  for (const name of fixtures()) {
    const schema = api.schemaOfFixture(name);
    assert.ok(schema !== undefined, `${name}: no schema for it`);
    const doc = load(name);
    assert.deepEqual(api.dump(schema, api.parse(schema, doc)), doc, name);
  }
});

test("every body has a fixture", () => {
  const have = new Set(fixtures().map(api.schemaOfFixture));
  for (const body of api.BODIES) assert.ok(have.has(body), body);
});

test("documents of the wrong shape are refused; answers tolerate new fields", () => {
  const binding = load("binding.json");
  for (const [change, want] of [
    [{ slot: 70000 }, /0\.\.=65535/],
    [{ generation: "4" }, /integer/],
    [{ http: "nowhere" }, /HOST:PORT/],
    [{ id: null }, /null/],
  ] as const) {
    assert.throws(() => api.parse("binding", { ...binding, ...change }), (e: unknown) => e instanceof api.ShapeError && want.test(e.message));
  }
  const without = { ...binding };
  delete without.function;
  assert.throws(() => api.parse("binding", without), /function is missing/);
  assert.throws(() => api.parse("node-registration", { ...load("node-registration.json"), temperature: 40 }), /unknown fields/);
  assert.equal(parseBinding({ ...binding, zone: "b" }).id, binding.id);
  assert.equal(parseBinding(binding).grpc, "10.0.0.11:8001");
});

/** An echo node: answers every call OK with its payload (or `status`). */
async function echoNode(status = rac.Status.OK): Promise<{ addr: string; close(): void }> {
  const socks = new Set<net.Socket>();
  const server = net.createServer((sock) => {
    socks.add(sock);
    let buf = Buffer.alloc(0);
    sock.on("error", () => undefined);
    sock.on("data", (c) => {
      buf = Buffer.concat([buf, c]);
      for (;;) {
        const h = rac.decodeCallHeader(buf);
        if (rac.isPartial(h) || buf.length < 64 + h.payloadLen) return;
        const payload = buf.subarray(64, 64 + h.payloadLen);
        buf = buf.subarray(64 + h.payloadLen);
        const out = status === rac.Status.OK ? payload : Buffer.from("no");
        const head = rac.encodeResultHeader({ kind: rac.Kind.Result, status, payloadLen: out.length, requestId: h.requestId, accelId: h.accelId, slotId: 0, queueNs: 0n, execNs: 0n });
        sock.write(Buffer.concat([head, out]));
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    addr: `127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    close() {
      for (const s of socks) s.destroy();
      server.close();
    },
  };
}

/** A registry replica: `handle` answers each request (method, path) with [status, body, headers]. */
async function fakeRegistry(handle: (method: string, url: string) => Promise<[number, unknown, Record<string, string>?]> | [number, unknown, Record<string, string>?]) {
  const server = http.createServer(async (req, res) => {
    req.resume();
    const [status, body, headers] = await handle(req.method!, req.url!);
    res.writeHead(status, { "Content-Type": "application/json", ...headers });
    res.end(body === undefined ? "" : JSON.stringify(body));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  return { url, close: () => (server.closeAllConnections(), server.close()) };
}

const binding = (generation: number, rac: string | null) => ({ ...load("binding.json"), id: "i1", function: "shout", generation, rac, rac_tls: null, slot: rac ? 0 : null });
const fn = { ...load("function.json"), name: "shout", accelerator: "echo" };

test("a follower's NOT_LEADER sends the write to the leader it names; an unreachable replica is skipped", async () => {
  const asked: string[] = [];
  const leader = await fakeRegistry((m, u) => (asked.push(`leader ${m} ${u}`), [200, binding(1, "127.0.0.1:1")]));
  const follower = await fakeRegistry((m, u) => (asked.push(`follower ${m} ${u}`), [503, { error: "not the leader", code: "NOT_LEADER" }, { Location: `${leader.url}${u}`, "Retry-After": "1" }]));
  const reg = new RegistryClient(`http://127.0.0.1:1,${follower.url}`);
  const b = await reg.createInstance("shout");
  assert.equal(b.generation, 1);
  assert.deepEqual(asked, ["follower POST /v1/functions/shout/instances", "leader POST /v1/functions/shout/instances"]);
  leader.close();
  follower.close();
});

test("while every replica answers 503 the request goes round until the election wait, then fails with the refusal", async () => {
  let n = 0;
  const r = await fakeRegistry(() => (n++, [503, { error: "electing", code: "UNAVAILABLE" }]));
  const reg = new RegistryClient(r.url, undefined, 400);
  await assert.rejects(reg.function("shout"), (e: unknown) => e instanceof RegistryError && e.status === 503 && e.code === "UNAVAILABLE");
  assert.ok(n >= 3, `asked ${n} times`);
  await assert.rejects(new RegistryClient("http://127.0.0.1:1").function("x"), (e: unknown) => e instanceof RegistryError && e.status === 0);
  r.close();
});

test("a bound client follows a migration and rebinds after a lost node", async () => {
  const a = await echoNode();
  const b = await echoNode();
  let current = binding(1, a.addr);
  let moved: (() => void) | undefined;
  const reg = await fakeRegistry(async (m, u) => {
    if (m === "GET" && u === "/v1/functions/shout") return [200, fn];
    if (m === "POST") return [200, current];
    if (m === "DELETE") return [204, undefined];
    const after = Number(new URL(u, "http://x").searchParams.get("after"));
    if (after === current.generation) await new Promise<void>((r) => ((moved = r), setTimeout(r, 200)));
    return [200, current];
  });
  const bound = await BoundClient.bind({ registry: reg.url, function: "shout", rebindWaitMs: 5000 });
  const text = (s: string) => new TextEncoder().encode(s);
  assert.equal(Buffer.from(await bound.call(text("one"))).toString(), "one");
  current = binding(2, b.addr);
  moved?.();
  a.close();
  assert.equal(Buffer.from(await bound.call(text("two"))).toString(), "two");
  assert.equal(bound.binding.rac, b.addr);
  await bound.close();
  b.close();
  reg.close();
});

test("a node answering UNAVAILABLE is a stale binding: the call is retried once on the new one", async () => {
  const sick = await echoNode(rac.Status.UNAVAILABLE);
  const well = await echoNode();
  let current = binding(1, sick.addr);
  const reg = await fakeRegistry((m, u) => {
    if (m === "GET" && u === "/v1/functions/shout") return [200, fn];
    if (m === "GET" && u.includes("after=1")) current = binding(2, well.addr);
    return m === "DELETE" ? [204, undefined] : [200, current];
  });
  const bound = await BoundClient.bind({ registry: reg.url, function: "shout", watch: false, instance: "i1" });
  assert.equal(Buffer.from(await bound.call(new TextEncoder().encode("x"))).toString(), "x");
  await bound.close();
  sick.close();
  well.close();
  reg.close();
});

test("calls made at once through a bound client share one node connection", async () => {
  let connections = 0;
  const node = await echoNode();
  const counting = net.createServer((sock) => {
    connections++;
    const upstream = net.connect(Number(node.addr.split(":")[1]), "127.0.0.1");
    sock.pipe(upstream).pipe(sock);
    sock.on("error", () => upstream.destroy());
    upstream.on("error", () => sock.destroy());
  });
  await new Promise<void>((r) => counting.listen(0, "127.0.0.1", r));
  const addr = `127.0.0.1:${(counting.address() as net.AddressInfo).port}`;
  const reg = await fakeRegistry((m, u) => (m === "GET" && u === "/v1/functions/shout" ? [200, fn] : m === "DELETE" ? [204, undefined] : [200, binding(1, addr)]));
  const bound = await BoundClient.bind({ registry: reg.url, function: "shout", watch: false });
  const outs = await Promise.all(Array.from({ length: 8 }, (_, i) => bound.call(new TextEncoder().encode(`t${i}`))));
  assert.deepEqual(outs.map((b) => Buffer.from(b).toString()), Array.from({ length: 8 }, (_, i) => `t${i}`));
  assert.equal(connections, 1);
  await bound.close();
  counting.close();
  node.close();
  reg.close();
});

test("a node that cannot be reached, or is silent past unreachableAfterMs, is reported and the call retried on the binding the registry answers", async () => {
  const well = await echoNode();
  // Accepts and never answers.
  const silent = net.createServer((sock) => sock.on("error", () => undefined));
  await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
  const silentAddr = `127.0.0.1:${(silent.address() as net.AddressInfo).port}`;
  for (const [first, unreachableAfterMs] of [["127.0.0.1:1", undefined], [silentAddr, 300]] as const) {
    let current = binding(1, first);
    const reports: string[] = [];
    const reg = await fakeRegistry(async (m, u) => {
      if (m === "GET" && u === "/v1/functions/shout") return [200, fn];
      if (m === "POST" && u.endsWith("/unreachable")) {
        reports.push(u);
        current = binding(2, well.addr);
      }
      if (m === "GET" && u.includes("after=")) await new Promise((r) => setTimeout(r, 100)); // nothing moves on its own
      return m === "DELETE" ? [204, undefined] : [200, current];
    });
    const bound = await BoundClient.bind({ registry: reg.url, function: "shout", rebindWaitMs: 60_000, unreachableAfterMs });
    const started = Date.now();
    assert.equal(Buffer.from(await bound.call(new TextEncoder().encode("x"))).toString(), "x");
    assert.ok(Date.now() - started < 5000, `${first}: the call took ${Date.now() - started} ms`);
    assert.deepEqual(reports, ["/v1/functions/shout/instances/i1/unreachable"], first);
    assert.equal(bound.binding.generation, 2);
    await bound.close();
    reg.close();
  }
  silent.close();
  well.close();
});
