/*
 * agents.ts — @once/client/agents: the OpenAI Agents SDK for JS
 * (`@openai/agents`). onceTool is its tool() with execute run at most once per
 * intent (run id, tool name, arguments). execute's errors still reach the
 * SDK's errorFunction (the model reads them); once records them as unknown, or
 * releases the key on NotDone.
 */
import { tool, type RunContext } from "@openai/agents";
import type { Once } from "./client.js";
import { runIdOf, toolEffect, type AdapterOptions } from "./adapter.js";

type ToolOptions = Parameters<typeof tool>[0];

/** tool(options) whose execute is once.effect-wrapped. runId: a string, or a function of
 * the RunContext (e.g. `(ctx) => ctx.context.conversationId`). */
export function onceTool(once: Once, options: ToolOptions, opts: AdapterOptions<RunContext<any> | undefined>): ReturnType<typeof tool> {
  const execute = options.execute as (input: unknown, ctx?: RunContext<any>, details?: unknown) => unknown;
  const name = options.name;
  if (!name) throw new TypeError("onceTool: the tool needs a name (it is part of the key)");
  const wrapped = (input: unknown, ctx?: RunContext<any>, details?: unknown) =>
    toolEffect(once, opts, runIdOf(opts.runId, ctx, `onceTool(${name})`), name, input, () => execute(input, ctx, details));
  return tool({ ...options, execute: wrapped } as ToolOptions);
}
