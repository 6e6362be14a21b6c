/*
 * agents.ts — @once/client/agents: the OpenAI Agents SDK for JS
 * (`@openai/agents`). onceTool is its tool() with execute run at most once per
 * intent (run id, tool name, arguments). execute's errors still reach the
 * SDK's errorFunction (the model reads them); once records them as unknown, or
 * releases the key on NotDone.
 */
import {
  tool,
  type FunctionTool,
  type RunContext,
  type ToolInputParameters,
  type ToolOptions,
  type ToolOutputSchema,
  type UnknownContext,
} from "@openai/agents";
import type { Once } from "./client.js";
import { runIdOf, toolEffect, type AdapterOptions } from "./adapter.js";

/** tool(options) whose execute is once.effect-wrapped. runId: a string, or a function of
 * the RunContext (e.g. `(ctx) => ctx.context.conversationId`). */
export function onceTool<
  TParameters extends ToolInputParameters = undefined,
  Context = UnknownContext,
  TOutputSchema extends ToolOutputSchema | undefined = undefined,
>(
  once: Once,
  options: ToolOptions<TParameters, Context, TOutputSchema>,
  opts: AdapterOptions<RunContext<Context> | undefined>,
): FunctionTool<Context, TParameters, unknown> {
  const execute = options.execute as (input: unknown, ctx?: RunContext<Context>, details?: unknown) => unknown;
  const name = options.name;
  if (!name) throw new TypeError("onceTool: the tool needs a name (it is part of the key)");
  const wrapped = (input: unknown, ctx?: RunContext<Context>, details?: unknown) =>
    toolEffect(once, opts, runIdOf(opts.runId, ctx, `onceTool(${name})`), name, input, () => execute(input, ctx, details));
  return tool({ ...options, execute: wrapped } as ToolOptions<TParameters, Context, TOutputSchema>) as unknown as FunctionTool<Context, TParameters, unknown>;
}
