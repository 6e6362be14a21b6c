/*
 * ai.ts — @once/client/ai: the Vercel AI SDK (`ai`). A tool's execute runs at
 * most once per intent (run id, tool name, arguments): a step retried after a
 * timeout or a crash, or a model that calls the tool again with the same
 * arguments, gets the recorded result.
 */
import type { Once } from "./client.js";
import { runIdOf, toolEffect, type AdapterOptions } from "./adapter.js";

/** The options the AI SDK passes to a tool's execute (toolCallId, messages, abortSignal, …). */
export type ToolCallOptions = { toolCallId?: string; abortSignal?: AbortSignal; experimental_context?: unknown; [k: string]: unknown };

type Executable = { execute?: (input: any, options: any) => any };

/** The tool with its execute wrapped in once.effect; the run id may be read from the
 * execute's options (runId: (options) => …). execute must resolve to JSON. */
export function onceTool<T extends Executable>(once: Once, name: string, tool: T, opts: AdapterOptions<ToolCallOptions>): T {
  const execute = tool.execute;
  if (typeof execute !== "function") throw new TypeError(`onceTool(${name}): the tool has no execute`);
  return {
    ...tool,
    execute: (input: unknown, options: ToolCallOptions) =>
      toolEffect(once, opts, runIdOf(opts.runId, options, `onceTool(${name})`), name, input, () => execute.call(tool, input, options)),
  };
}

/** onceTool for each tool of a tools record (the names are the record's keys). */
export function onceTools<R extends Record<string, Executable>>(once: Once, tools: R, opts: AdapterOptions<ToolCallOptions>): R {
  const out: Record<string, Executable> = {};
  for (const [name, t] of Object.entries(tools)) out[name] = typeof t.execute === "function" ? onceTool(once, name, t, opts) : t;
  return out as R;
}
