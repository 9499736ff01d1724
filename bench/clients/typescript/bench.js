// 64 B echo over one connection with the TypeScript client (clients/typescript): the p50
// and p99 of synchronous calls (one in flight), then calls/s with 32 in flight (V8 shows
// no allocation count per call, so none is reported). Prints one JSON line. Usage: node bench.js --node HOST:PORT [--seconds S]
// [--inflight N] [--size BYTES]
"use strict";
const path = require("node:path");
const { Client } = require(path.resolve(__dirname, "../../../clients/typescript"));

function arg(name, dflt) {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1] : dflt;
}

const percentile = (sorted, p) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];

async function sync(node, payload, seconds) {
  const latencies = [];
  const end = process.hrtime.bigint() + BigInt(Math.round(seconds * 1e9));
  while (process.hrtime.bigint() < end) {
    const t0 = process.hrtime.bigint();
    await node.call("echo", payload);
    latencies.push(Number(process.hrtime.bigint() - t0) / 1000);
  }
  return latencies.sort((a, b) => a - b);
}

async function pipelined(node, payload, seconds, inFlight) {
  let done = 0;
  const t0 = process.hrtime.bigint();
  const end = t0 + BigInt(Math.round(seconds * 1e9));
  const lane = async () => {
    while (process.hrtime.bigint() < end) {
      await node.call("echo", payload);
      done++;
    }
  };
  await Promise.all(Array.from({ length: inFlight }, lane));
  return (done / Number(process.hrtime.bigint() - t0)) * 1e9;
}

async function main() {
  const [host, port] = arg("--node", "127.0.0.1:9400").split(":");
  const seconds = Number(arg("--seconds", "3"));
  const inFlight = Number(arg("--inflight", "32"));
  const payload = new Uint8Array(Number(arg("--size", "64"))).fill(0x61);
  const node = await Client.connect({ host, port: Number(port), maxInFlight: inFlight });
  await pipelined(node, payload, 1, inFlight); // warm-up: the JIT, the node's buffers
  const lat = await sync(node, payload, seconds);
  const callsPerS = await pipelined(node, payload, seconds, inFlight);
  node.close();
  console.log(JSON.stringify({
    client: "typescript",
    payload_bytes: payload.length,
    sync_calls: lat.length,
    sync_p50_us: +percentile(lat, 50).toFixed(1),
    sync_p99_us: +percentile(lat, 99).toFixed(1),
    in_flight: inFlight,
    pipelined_calls_per_s: Math.round(callsPerS),
  }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
