// agents.test.mjs — @once/client/agents with the OpenAI Agents SDK's run(), driven by a
// scripted model that implements its Model interface. The conversation id (from the run's
// context) is the run id. The SDK's own tool timeout (timeoutMs) cuts the first call while
// its effect goes on; the model calls the tool again (a new call id, the same arguments)
// and gets the recorded result: one effect. A run killed between effect and completion,
// then retried: one effect, and the model reads that the outcome is unknown.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Agent, run, Usage, setTracingDisabled } from "@openai/agents";
import { z } from "zod";
import { Once, intentKey } from "../dist/index.js";
import { onceTool } from "../dist/agents.js";
import { withGateway, killAfterEffect } from "./harness.mjs";
import { scriptedAgentsModel } from "./fixtures/models.mjs";
import { randomUUID } from "node:crypto";

let gw, provider, once;
const ARGS = { to: "ana@example.com", subject: "your refund" };
const parameters = z.object({ to: z.string(), subject: z.string() });

setTracingDisabled(true);

withGateway({}, (env) => ({ gw, provider, once } = env));

function sendEmail(opts, delayMs = 0, extra = {}) {
  return onceTool(
    once,
    {
      name: "send_email",
      description: "Send an email",
      parameters,
      ...extra,
      execute: async (input) => {
        const r = await provider.effect(input, delayMs ? { "X-Fake-Delay-Ms": String(delayMs) } : {});
        return { messageId: r.id };
      },
    },
    { scope: "agents-mail", runId: (ctx) => ctx.context.conversationId, ...opts },
  );
}

// A model that calls the tool until it has a result that is not a timeout, then answers.
function retryingModel() {
  return {
    calls: 0,
    async getResponse(request) {
      this.calls++;
      const results = request.input.filter((i) => i.type === "function_call_result");
      const last = results.at(-1);
      const text = last ? JSON.stringify(last.output) : "";
      const done = last && !/timed out|timeout/i.test(text);
      const output = done
        ? [{ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: `sent: ${text}` }] }]
        : [{ type: "function_call", callId: `call_${randomUUID()}`, name: "send_email", arguments: JSON.stringify(ARGS), status: "completed" }];
      return { usage: new Usage({ requests: 1, inputTokens: 1, outputTokens: 1, totalTokens: 2 }), output, responseId: `resp_${randomUUID()}` };
    },
    async *getStreamedResponse() {
      throw new Error("not streamed");
    },
  };
}

test("the SDK's tool timeout cuts the first call; the model's retry gets the recorded result: one email", async () => {
  const before = provider.count;
  // The first email takes 600 ms; each tool call is cut after 200 ms by the SDK, so the
  // model's next calls time out too until the first one's result is recorded.
  provider.queueDelays(600);
  const tool = sendEmail({}, 0, { timeoutMs: 200 });
  const model = retryingModel();
  const agent = new Agent({ name: "mailer", instructions: "mail", tools: [tool], model });
  const result = await run(agent, "mail her", { context: { conversationId: "conv-agents-1" }, maxTurns: 30 });
  assert.ok(model.calls >= 3, "tool call, timed out; tool call again …; answer");
  assert.match(result.finalOutput, new RegExp(`eff_${before + 1}`));
  assert.equal(provider.count, before + 1);
  // Later runs of the same conversation and arguments: replayed, no new email.
  for (let i = 0; i < 2; i++) {
    const again = await run(new Agent({ name: "mailer", instructions: "mail", tools: [sendEmail({})], model: scriptedAgentsModel("send_email", ARGS) }), "mail her", {
      context: { conversationId: "conv-agents-1" },
    });
    assert.equal(again.finalOutput, "done");
  }
  assert.equal(provider.count, before + 1);
  const rec = await once.get("agents-mail", intentKey("conv-agents-1", "send_email", ARGS));
  assert.equal(rec.state, "completed");
  assert.deepEqual(rec.request, { run: "conv-agents-1", tool: "send_email", arguments: ARGS });
});

test("a run killed between its effect and its completion, then 3 retries: one email", async () => {
  const runId = "conv-agents-crash";
  const before = provider.count;
  await killAfterEffect("agents", gw, provider, runId);
  for (let i = 0; i < 3; i++) {
    const model = scriptedAgentsModel("send_email", ARGS);
    const seen = [];
    const spy = { ...model, getResponse: async (req) => (seen.push(req.input), model.getResponse(req)) };
    const agent = new Agent({ name: "mailer", instructions: "mail", tools: [sendEmail({ wait: 5 })], model: spy });
    const r = await run(agent, "mail her", { context: { conversationId: runId } });
    assert.equal(r.finalOutput, "done");
    const toolOutput = JSON.stringify(seen.at(-1).find((x) => x.type === "function_call_result").output);
    assert.match(toolOutput, /may have performed|outcome_unknown|resolve it/i, toolOutput);
  }
  assert.equal(provider.count, before + 1);
});
