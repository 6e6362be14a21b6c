/*
 * langgraph.ts — @once/client/langgraph: LangGraph JS. A node's side effect is
 * keyed by the thread (config.configurable.thread_id), the node's name and,
 * when the node can run more than once in a thread, what tells its runs apart
 * (args). A node re-run after a crash, a timeout or a resume gets the recorded
 * update instead of acting again.
 */
import type { Once } from "./client.js";
import { intentKey } from "./intent.js";
import { ADAPTER_WAIT } from "./adapter.js";

/** The part of a LangGraph RunnableConfig the adapter reads. */
export type GraphConfig = { configurable?: { thread_id?: string; [k: string]: unknown }; metadata?: { langgraph_node?: string; [k: string]: unknown } };

export interface NodeOptions<S> {
  scope: string;
  /** What tells this node's runs in one thread apart (a message id, a loop counter in the
   * state); its JSON is part of the key. Without it the node acts once per thread. */
  args?: (state: S) => unknown;
  /** Seconds to wait for another attempt of the same node (default 30). */
  wait?: number;
  lease?: number;
}

function threadOf(config: GraphConfig | undefined, what: string): string {
  const id = config?.configurable?.thread_id;
  if (typeof id !== "string" || id === "") throw new TypeError(`${what}: the graph runs without configurable.thread_id, which keys its effects`);
  return id;
}

/** The effect fn inside a node, keyed by thread id, node name (config.metadata.langgraph_node,
 * or name) and args. Resolves to fn's result, or the recorded one. */
export function onceEffect<T>(
  once: Once,
  config: GraphConfig | undefined,
  opts: { scope: string; name?: string; args?: unknown; wait?: number; lease?: number },
  fn: () => T | Promise<T>,
): Promise<T> {
  const node = opts.name ?? config?.metadata?.langgraph_node;
  if (!node) throw new TypeError("onceEffect: no node name (give name, or call it from a node, whose config names it)");
  const thread = threadOf(config, `onceEffect(${node})`);
  const args = opts.args === undefined ? null : opts.args;
  return once.effect(
    { scope: opts.scope, key: intentKey(thread, node, args), wait: opts.wait ?? ADAPTER_WAIT, lease: opts.lease, request: { thread, node, args } },
    fn,
  );
}

/** A node whose whole run is one effect: its state update is recorded and replayed.
 * Add it with graph.addNode(name, onceNode(once, name, fn, {scope})). */
export function onceNode<S, U>(once: Once, name: string, fn: (state: S, config: GraphConfig) => U | Promise<U>, opts: NodeOptions<S>) {
  return (state: S, config: GraphConfig): Promise<U> =>
    onceEffect(once, config, { scope: opts.scope, name, args: opts.args ? opts.args(state) : undefined, wait: opts.wait, lease: opts.lease }, () =>
      fn(state, config),
    );
}
