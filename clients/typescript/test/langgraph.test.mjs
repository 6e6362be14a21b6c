// langgraph.test.mjs — @once/client/langgraph with LangGraph JS (StateGraph, MemorySaver),
// no model: a node's side effect keyed by the thread id and the node's name. A run aborted
// while the node acts, resumed and re-run: one effect, the same state update. A process
// killed between effect and completion, the thread run again elsewhere: one effect, and the
// node fails with OutcomeUnknown instead of acting twice. onceEffect with args acts once per
// loop iteration, however often the loop is replayed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { StateGraph, Annotation, MemorySaver, START, END } from "@langchain/langgraph";
import { Once, OutcomeUnknown } from "../dist/index.js";
import { onceNode, onceEffect } from "../dist/langgraph.js";
import { withGateway, killAfterEffect } from "./harness.mjs";

let gw, provider, once;

withGateway({}, (env) => ({ gw, provider, once } = env));

const State = Annotation.Root({ to: Annotation(), draft: Annotation(), sent: Annotation(), logged: Annotation() });

function mailGraph(opts = {}) {
  return new StateGraph(State)
    .addNode("write", (s) => ({ draft: `Hello ${s.to}` }))
    .addNode(
      "send_email",
      onceNode(
        once,
        "send_email",
        async (s) => {
          const r = await provider.effect({ to: s.to, text: s.draft });
          return { sent: r.id };
        },
        { scope: "graph-mail", ...opts },
      ),
    )
    .addNode("record", (s) => ({ logged: `sent ${s.sent}` }))
    .addEdge(START, "write")
    .addEdge("write", "send_email")
    .addEdge("send_email", "record")
    .addEdge("record", END)
    .compile({ checkpointer: new MemorySaver() });
}

test("a run aborted while the node acts, resumed, then run again on the thread: one email", async () => {
  const graph = mailGraph();
  const config = { configurable: { thread_id: "thread-lg-1" } };
  const before = provider.count;
  provider.queueDelays(600);
  const ac = new AbortController();
  const first = graph.invoke({ to: "ana@example.com" }, { ...config, signal: ac.signal });
  while (provider.count === before) await new Promise((r) => setTimeout(r, 10));
  ac.abort(new Error("timed out"));
  await assert.rejects(first);
  // Resume from the checkpoint: the node runs again and gets the first run's update.
  const resumed = await graph.invoke(null, config);
  assert.equal(resumed.sent, `eff_${before + 1}`);
  assert.equal(resumed.logged, `sent eff_${before + 1}`);
  for (let i = 0; i < 2; i++) {
    const again = await graph.invoke({ to: "ana@example.com" }, config);
    assert.equal(again.sent, `eff_${before + 1}`);
  }
  assert.equal(provider.count, before + 1);
  // Another thread is another intent.
  const other = await mailGraph().invoke({ to: "ana@example.com" }, { configurable: { thread_id: "thread-lg-2" } });
  assert.equal(other.sent, `eff_${before + 2}`);
  await assert.rejects(mailGraph().invoke({ to: "x" }), /thread_id/);
});

test("a process killed between the node's effect and its completion, the thread run again: one email", async () => {
  const thread = "thread-lg-crash";
  const before = provider.count;
  await killAfterEffect("langgraph", gw, provider, thread);
  for (let i = 0; i < 3; i++) {
    await assert.rejects(mailGraph({ wait: 5 }).invoke({ to: "ana@example.com" }, { configurable: { thread_id: thread } }), (e) => {
      assert.ok(e instanceof OutcomeUnknown, String(e));
      assert.deepEqual(e.record.request, { thread, node: "send_email", args: null });
      return true;
    });
  }
  assert.equal(provider.count, before + 1);
});

test("onceEffect keyed by args: one effect per item, however often the loop is replayed", async () => {
  const LoopState = Annotation.Root({ items: Annotation(), done: Annotation({ reducer: (a, b) => a.concat(b), default: () => [] }) });
  const graph = new StateGraph(LoopState)
    .addNode("notify", async (s, config) => {
      const ids = [];
      for (const item of s.items) {
        ids.push(await onceEffect(once, config, { scope: "graph-notify", args: { item } }, async () => (await provider.effect({ item })).id));
      }
      return { done: ids };
    })
    .addEdge(START, "notify")
    .addEdge("notify", END)
    .compile({ checkpointer: new MemorySaver() });
  const config = { configurable: { thread_id: "thread-lg-loop" } };
  const before = provider.count;
  const a = await graph.invoke({ items: ["a", "b"] }, config);
  const b = await graph.invoke({ items: ["a", "b", "c"] }, config);
  assert.deepEqual(a.done, [`eff_${before + 1}`, `eff_${before + 2}`]);
  assert.deepEqual(b.done.slice(2), [`eff_${before + 1}`, `eff_${before + 2}`, `eff_${before + 3}`]);
  assert.equal(provider.count, before + 3);
});
