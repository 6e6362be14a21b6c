/*
 * mcp.ts — @once/client/mcp: the MCP SDK client through once's MCP gateway
 * (/v1/mcp/NAME, docs/mcp.md). callTool sends the intent's key as
 * params._meta.idempotencyKey, so once records the call under it: a call
 * retried after a timeout, a crash or a reconnect gets the first call's result
 * (_meta["once/outcome"] = "replayed"), and the server acts once.
 */
import { intentKey } from "./intent.js";

/** The part of the MCP SDK's Client that callTool uses. */
export interface McpClientLike {
  callTool(params: { name: string; arguments?: Record<string, unknown>; _meta?: Record<string, unknown> }, resultSchema?: any, options?: any): Promise<any>;
}

/** once's outcome of a tool call (docs/mcp.md): completed, replayed, in_flight, unknown, held,
 * awaiting_approval, denied, released, not_allowed, limit_exceeded, … */
export function mcpOutcome(result: { _meta?: Record<string, unknown> } | undefined): string | undefined {
  const v = result?._meta?.["once/outcome"];
  return typeof v === "string" ? v : undefined;
}

/** The key of a tool call: intentKey(runId, tool name, arguments). */
export function mcpKey(runId: string, name: string, args: Record<string, unknown> | undefined): string {
  if (typeof runId !== "string" || runId === "") throw new TypeError("callTool: a run id is required (it is part of the key)");
  return intentKey(runId, name, args ?? {});
}

/** client.callTool with _meta.idempotencyKey = intentKey(runId, name, arguments). */
export function callTool<C extends McpClientLike>(
  client: C,
  params: { name: string; arguments?: Record<string, unknown>; _meta?: Record<string, unknown> },
  opts: { runId: string },
  resultSchema?: Parameters<C["callTool"]>[1],
  options?: Parameters<C["callTool"]>[2],
): ReturnType<C["callTool"]> {
  const key = mcpKey(opts.runId, params.name, params.arguments);
  return client.callTool({ ...params, _meta: { ...params._meta, idempotencyKey: key } }, resultSchema, options) as ReturnType<C["callTool"]>;
}
