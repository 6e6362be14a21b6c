// ai.test.mjs — @once/client/ai with the Vercel AI SDK's generateText, driven by its own
// test model (MockLanguageModelV3). Each generateText is one attempt of the run; the model
// gives a new tool-call id every time. A first attempt aborted while its tool runs, then
// retries: one effect, the same result. An attempt killed between effect and completion,
// then retries: one effect, and the retries are told the outcome is unknown.
import { test } from "node:test";
import assert from "node:assert/strict";
import { generateText, tool, jsonSchema, stepCountIs } from "ai";
import { Once, OutcomeUnknown } from "../dist/index.js";
import { onceTool, onceTools } from "../dist/ai.js";
import { withGateway, killAfterEffect } from "./harness.mjs";
import { scriptedModel } from "./fixtures/models.mjs";

let gw, provider, once;
const ARGS = { to: "ana@example.com", subject: "your refund" };

withGateway({}, (env) => ({ gw, provider, once } = env));

function sendEmail(delayMs = 0) {
  return tool({
    description: "Send an email",
    inputSchema: jsonSchema({ type: "object", properties: { to: { type: "string" }, subject: { type: "string" } } }),
    execute: async (input, { toolCallId }) => {
      const r = await provider.effect({ ...input, toolCallId }, delayMs ? { "X-Fake-Delay-Ms": String(delayMs) } : {});
      return { messageId: r.id };
    },
  });
}

const outputs = (result) => result.steps.flatMap((s) => s.toolResults.map((r) => r.output));

test("an attempt aborted while its tool runs, then 3 retries: one email, one result", async () => {
  const runId = "conv-ai-1";
  const tools = onceTools(once, { send_email: sendEmail(600) }, { scope: "ai-mail", runId });
  const before = provider.count;
  const ac = new AbortController();
  const first = generateText({ model: scriptedModel("send_email", ARGS), tools, prompt: "mail her", stopWhen: stepCountIs(3), abortSignal: ac.signal });
  while (provider.count === before) await new Promise((r) => setTimeout(r, 10));
  ac.abort(new Error("the step timed out"));
  await assert.rejects(first);
  const results = [];
  for (let i = 0; i < 3; i++) {
    const r = await generateText({ model: scriptedModel("send_email", ARGS), tools, prompt: "mail her", stopWhen: stepCountIs(3) });
    assert.equal(r.text, "done");
    results.push(...outputs(r));
  }
  assert.equal(provider.count, before + 1);
  assert.deepEqual(results, Array(3).fill({ messageId: `eff_${before + 1}` }));
  // Another run with the same arguments is another intent.
  const other = onceTool(once, "send_email", sendEmail(), { scope: "ai-mail", runId: (o) => o.experimental_context.run });
  const r = await generateText({
    model: scriptedModel("send_email", ARGS),
    tools: { send_email: other },
    prompt: "mail her",
    stopWhen: stepCountIs(3),
    experimental_context: { run: "conv-ai-2" },
  });
  assert.deepEqual(outputs(r), [{ messageId: `eff_${before + 2}` }]);
});

test("an attempt killed between its effect and its completion, then 3 retries: one email", async () => {
  const runId = "conv-ai-crash";
  const before = provider.count;
  await killAfterEffect("ai", gw, provider, runId);
  const tools = onceTools(once, { send_email: sendEmail() }, { scope: "ai-mail", runId, wait: 5 });
  for (let i = 0; i < 3; i++) {
    const r = await generateText({ model: scriptedModel("send_email", ARGS), tools, prompt: "mail her", stopWhen: stepCountIs(3) });
    const errors = r.steps.flatMap((s) => s.content.filter((c) => c.type === "tool-error"));
    assert.equal(errors.length, 1);
    assert.ok(errors[0].error instanceof OutcomeUnknown, String(errors[0].error));
  }
  assert.equal(provider.count, before + 1);
});
