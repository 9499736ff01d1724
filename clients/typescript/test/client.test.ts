// The client against a scripted fake node: pipelining out of order, the in-flight bound,
// typed errors, and every way a connection can end while calls are out.
import * as assert from "node:assert/strict";
import * as net from "node:net";
import { test } from "node:test";

import {
  BusyError,
  ClosedError,
  Client,
  DeadlineError,
  MAX_IN_FLIGHT_DEFAULT,
  ProtocolError,
  RacError,
  UnavailableError,
} from "../src";
import * as rac from "../src/rac";

interface Call {
  header: rac.CallHeader;
  payload: Buffer;
}

/** A node that hands each whole call to `onCall` with the socket to answer on. */
async function fakeNode(onCall: (call: Call, sock: net.Socket) => void): Promise<{ port: number; close(): void }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((sock) => {
    sockets.add(sock);
    let buf = Buffer.alloc(0);
    sock.on("error", () => undefined);
    sock.on("data", (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      for (;;) {
        const h = rac.decodeCallHeader(buf);
        if (rac.isPartial(h) || buf.length < 64 + h.payloadLen) return;
        const payload = buf.subarray(64, 64 + h.payloadLen);
        buf = buf.subarray(64 + h.payloadLen);
        onCall({ header: h, payload }, sock);
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    close() {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

function answer(sock: net.Socket, call: Call, status: rac.Status, payload: Uint8Array = call.payload): void {
  const kind = call.header.kind === rac.Kind.Control ? rac.Kind.ControlResult : rac.Kind.Result;
  const header = rac.encodeResultHeader({
    kind,
    status,
    payloadLen: payload.length,
    requestId: call.header.requestId,
    accelId: call.header.accelId === 0xffff ? 0 : call.header.accelId,
    slotId: 0,
    queueNs: 1n,
    execNs: 2n,
  });
  sock.write(Buffer.concat([header, payload]));
}

const text = (s: string) => new TextEncoder().encode(s);
const str = (b: Uint8Array) => Buffer.from(b).toString();

test("pipelined calls are matched by request id when answered in reverse order", async () => {
  const held: Call[] = [];
  const node = await fakeNode((call, sock) => {
    held.push(call);
    if (held.length === 16) for (const c of held.reverse()) answer(sock, c, rac.Status.OK);
  });
  const client = await Client.connect({ port: node.port });
  const outs = await Promise.all(Array.from({ length: 16 }, (_, i) => client.call("echo", text(`call ${i}`))));
  assert.deepEqual(outs.map(str), Array.from({ length: 16 }, (_, i) => `call ${i}`));
  assert.equal(client.inFlight, 0);
  client.close();
  node.close();
});

test("past maxInFlight calls wait, and go as answers free places", async () => {
  let out = 0;
  let most = 0;
  const node = await fakeNode((call, sock) => {
    out++;
    most = Math.max(most, out);
    setTimeout(() => {
      out--;
      answer(sock, call, rac.Status.OK);
    }, 2);
  });
  const client = await Client.connect({ port: node.port, maxInFlight: 4 });
  const outs = await Promise.all(Array.from({ length: 40 }, (_, i) => client.call(1, text(String(i)))));
  assert.equal(outs.length, 40);
  assert.equal(most, 4);
  client.close();
  node.close();
});

test("by default at most 32 calls are out, the node's own bound per connection", async () => {
  assert.equal(MAX_IN_FLIGHT_DEFAULT, 32);
  // The node holds its answers until 32 calls are out and 200 ms passed with no 33rd,
  // then answers them all, and every later call at once.
  const held: Array<() => void> = [];
  let most = 0;
  const node = await fakeNode((call, sock) => {
    if (most > 0) return answer(sock, call, rac.Status.OK);
    held.push(() => answer(sock, call, rac.Status.OK));
    if (held.length === 32) {
      setTimeout(() => {
        most = held.length;
        held.forEach((go) => go());
      }, 200);
    }
  });
  const client = await Client.connect({ port: node.port });
  const outs = await Promise.all(Array.from({ length: 40 }, (_, i) => client.call(1, text(String(i)))));
  assert.equal(outs.length, 40);
  assert.equal(most, 32);
  client.close();
  node.close();
});

test("refusals are typed: BUSY and UNAVAILABLE with retry-after, DEADLINE_EXCEEDED, others by status", async () => {
  const statuses = [rac.Status.BUSY, rac.Status.UNAVAILABLE, rac.Status.DEADLINE_EXCEEDED, rac.Status.BAD_REQUEST];
  const node = await fakeNode((call, sock) => answer(sock, call, statuses[Number(str(call.payload))], text("why")));
  const client = await Client.connect({ port: node.port });
  const errors = await Promise.all(statuses.map((_, i) => client.call("echo", text(String(i))).catch((e) => e)));
  assert.ok(errors[0] instanceof BusyError && errors[0].retryAfterMs > 0 && errors[0].detail === "why");
  assert.ok(errors[1] instanceof UnavailableError && errors[1].retryAfterMs > 0);
  assert.ok(errors[2] instanceof DeadlineError && !errors[2].local);
  assert.ok(errors[3] instanceof RacError && errors[3].status === rac.Status.BAD_REQUEST);
  assert.ok(!client.closed, "refusals leave the connection open");
  client.close();
  node.close();
});

test("deadline and params are on the wire; names come from the catalog", async () => {
  const catalog = [{ id: 300, name: "scale", params: [{ name: "factor", type: "f32", offset: 4, default: null }] }];
  let seen: rac.CallHeader | undefined;
  const node = await fakeNode((call, sock) => {
    if (call.header.kind === rac.Kind.Control) return answer(sock, call, rac.Status.OK, text(JSON.stringify(catalog)));
    seen = call.header;
    answer(sock, call, rac.Status.OK);
  });
  const client = await Client.connect({ port: node.port });
  await client.call("scale", text("x"), { params: { factor: 2 }, deadlineMs: 1.5 });
  assert.equal(seen!.accelId, 300);
  assert.equal(seen!.deadlineUs, 1500);
  assert.equal(new DataView(seen!.params.buffer, seen!.params.byteOffset).getFloat32(4, true), 2);
  await assert.rejects(client.call("scale", text("x"), { params: { bogus: 1 } }), /unknown parameter 'bogus'/);
  await assert.rejects(client.call("nothing", text("x")), (e: unknown) => e instanceof RacError && e.status === rac.Status.UNKNOWN_ACCELERATOR);
  await client.call("topk", new Uint8Array(8), { params: { k: 1 } });
  assert.equal(seen!.accelId, rac.BUILTIN_IDS.topk);
  client.close();
  node.close();
});

test("a node that closes mid-call rejects every call out with ClosedError", async () => {
  let n = 0;
  const node = await fakeNode((_call, sock) => {
    if (++n === 2) sock.destroy();
  });
  const client = await Client.connect({ port: node.port, maxInFlight: 2 });
  const results = await Promise.allSettled(Array.from({ length: 5 }, () => client.call("echo", text("x"))));
  for (const r of results) assert.ok(r.status === "rejected" && r.reason instanceof ClosedError, String(r));
  await assert.rejects(client.call("echo", text("x")), ClosedError);
  node.close();
});

test("a malformed reply rejects with ProtocolError and closes the connection", async () => {
  const node = await fakeNode((call, sock) => {
    const h = Buffer.from(rac.encodeResultHeader({ kind: rac.Kind.Result, status: 0, payloadLen: 0, requestId: call.header.requestId, accelId: 1, slotId: 0, queueNs: 0n, execNs: 0n }));
    h[40] = 7; // a reserved byte
    sock.write(h);
  });
  const client = await Client.connect({ port: node.port });
  await assert.rejects(client.call("echo", text("x")), (e: unknown) => e instanceof ProtocolError && /non_zero_reserved/.test(e.message));
  assert.ok(client.closed);
  node.close();
});

test("a truncated reply followed by a close is ClosedError, never a hang", async () => {
  const node = await fakeNode((call, sock) => {
    const h = rac.encodeResultHeader({ kind: rac.Kind.Result, status: 0, payloadLen: 10, requestId: call.header.requestId, accelId: 1, slotId: 0, queueNs: 0n, execNs: 0n });
    sock.end(Buffer.concat([h, Buffer.from("abc")]));
  });
  const client = await Client.connect({ port: node.port });
  await assert.rejects(client.call("echo", text("x")), ClosedError);
  node.close();
});

test("an answer for no call out, or of the wrong kind, is a ProtocolError", async () => {
  const node = await fakeNode((call, sock) => answer(sock, { ...call, header: { ...call.header, requestId: call.header.requestId + 100 } }, rac.Status.OK));
  const client = await Client.connect({ port: node.port });
  await assert.rejects(client.call("echo", text("x")), /not in flight/);
  node.close();
  const node2 = await fakeNode((call, sock) => answer(sock, { ...call, header: { ...call.header, kind: rac.Kind.Control, accelId: 0xffff } }, rac.Status.OK));
  const client2 = await Client.connect({ port: node2.port });
  await assert.rejects(client2.call("echo", text("x")), (e: unknown) => e instanceof ProtocolError && /kind 4/.test(e.message));
  node2.close();
});

test("an answer to the connection (request id 0) ends every call with its status", async () => {
  const node = await fakeNode((call, sock) => {
    answer(sock, { ...call, header: { ...call.header, requestId: 0 } }, rac.Status.BUSY, text("at the connection limit"));
    sock.end();
  });
  const client = await Client.connect({ port: node.port });
  await assert.rejects(client.call("echo", text("x")), BusyError);
  await assert.rejects(client.call("echo", text("x")), ClosedError);
  node.close();
});

test("timeoutMs rejects a call the node never answers with a local DeadlineError", async () => {
  const node = await fakeNode(() => undefined);
  const client = await Client.connect({ port: node.port });
  const started = Date.now();
  await assert.rejects(client.call("echo", text("x"), { timeoutMs: 50 }), (e: unknown) => e instanceof DeadlineError && e.local);
  assert.ok(Date.now() - started < 2000);
  client.close();
  node.close();
});

test("hello and control answers; a refused hello rejects connect", async () => {
  const node = await fakeNode((call, sock) => {
    const req = JSON.parse(str(call.payload));
    if (req.token !== "right") return answer(sock, call, rac.Status.UNAUTHORIZED, text("wrong token"));
    answer(sock, call, rac.Status.OK, text(JSON.stringify({ tenant: req.tenant })));
  });
  const client = await Client.connect({ port: node.port, tenant: "team-a", token: "right" });
  assert.deepEqual(await client.hello("team-b", "right"), { tenant: "team-b" });
  client.close();
  await assert.rejects(Client.connect({ port: node.port, tenant: "team-a", token: "wrong" }), (e: unknown) => e instanceof RacError && e.status === rac.Status.UNAUTHORIZED);
  node.close();
});

test("connecting to a port nobody listens on is ClosedError", async () => {
  const server = net.createServer();
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as net.AddressInfo).port;
  server.close();
  await assert.rejects(Client.connect({ port }), ClosedError);
});
