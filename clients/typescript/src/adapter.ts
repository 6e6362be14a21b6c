/*
 * adapter.ts — what the framework adapters share: the options they take and
 * the key they derive. A tool's intent is the caller's run (a run id given,
 * or the framework's thread or conversation id), the tool's name and its
 * canonical arguments; never the tool-call id, which every retry changes.
 */
import type { Once } from "./client.js";
import { intentKey } from "./intent.js";

/** Adapters wait this long (seconds) for another attempt that holds the key: a framework
 * that retries after a timeout meets its own first attempt still running. */
export const ADAPTER_WAIT = 30;

export interface AdapterOptions<Ctx> {
  /** The actions API scope the effects are recorded in. */
  scope: string;
  /** The run the calls belong to: a string, or read from the framework's context. */
  runId: string | ((ctx: Ctx) => string | undefined | null);
  /** Seconds to wait for another attempt of the same call (default 30), then InFlight. */
  wait?: number;
  /** The lease in seconds (default: the client's). */
  lease?: number;
}

export function runIdOf<Ctx>(runId: AdapterOptions<Ctx>["runId"], ctx: Ctx, what: string): string {
  const id = typeof runId === "function" ? runId(ctx) : runId;
  if (typeof id !== "string" || id === "")
    throw new TypeError(`${what}: no run id (give runId, a string or a function of the framework's context that returns one)`);
  return id;
}

/** Runs fn as the effect of calling tool `name` with `args` in run `runId`. */
export function toolEffect<T>(once: Once, opts: AdapterOptions<never>, runId: string, name: string, args: unknown, fn: () => T | Promise<T>): Promise<T> {
  const key = intentKey(runId, name, args === undefined ? null : args);
  return once.effect(
    { scope: opts.scope, key, wait: opts.wait ?? ADAPTER_WAIT, lease: opts.lease, request: { run: runId, tool: name, arguments: args ?? null } },
    fn,
  );
}
