/**
 * netaccel: a client for netaccel nodes over RAC v1 (pipelined calls to accelerators,
 * typed errors) and for the netaccel registry (a function's instance bound to a node,
 * followed through migrations and registry failover).
 *
 * ```ts
 * import { Client } from "netaccel";
 * const node = await Client.connect({ host: "127.0.0.1", port: 9400 });
 * const out = await node.call("to_uppercase", new TextEncoder().encode("hello"));
 * node.close();
 * ```
 *
 * @module
 */

export * from "./client";
export * from "./errors";
export * as rac from "./rac";
export { Status } from "./rac";
export * from "./registry";
export * as registryApi from "./registry_api";
