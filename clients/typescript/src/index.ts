/*
 * index.ts — @once/client: exactly-once effects from an agent's code
 * (docs/clients.md). The adapters live in their own entry points
 * (@once/client/ai, /agents, /langgraph, /mcp) so that none of the frameworks
 * is loaded by an agent that does not use it.
 */
export { Once, proxyHeaders } from "./client.js";
export type {
  OnceOptions,
  EffectOptions,
  EffectContext,
  EffectOutcome,
  Reservation,
  ReserveOptions,
  ActionRecord,
  ProxyOptions,
  ProxyOutcome,
  ProxyResponse,
} from "./client.js";
export { intentKey, canonicalJson } from "./intent.js";
export type { JsonValue } from "./intent.js";
export * from "./errors.js";
