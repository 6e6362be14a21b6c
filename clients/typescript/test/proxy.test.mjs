// proxy.test.mjs — calls through once's proxy: proxyFetch with proxyHeaders, and the
// official openai and stripe npm clients pointed at once (a base URL, or an upstream's own
// listen address, plus the key as a header). Retries of one intent, a first attempt timed
// out by the client included, make one effect at the counting provider.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import Stripe from "stripe";
import { Once, proxyHeaders, intentKey, InFlight } from "../dist/index.js";
import { startOnce, startProvider, dropPgSchemas, uniqueKey, freePort } from "./harness.mjs";

const TOKEN = "agent_token_coder_0123456789abcdef";
let gw, provider, once, stripePort;

before(async () => {
  provider = await startProvider();
  stripePort = await freePort();
  gw = await startOnce({
    tokens: [[TOKEN, "agent", "coder"]],
    upstreams: {
      api: { url: provider.url },
      openai: { url: `${provider.url}/v1`, header: "Authorization: Bearer sk-provider-secret" },
      stripe: {
        url: provider.url,
        listen: `127.0.0.1:${stripePort}`,
        forward_key_as: "Idempotency-Key",
        header: "Authorization: Bearer sk_test_provider_secret",
      },
    },
  });
  once = new Once({ url: gw.url, token: TOKEN });
});

after(async () => {
  await gw?.stop();
  await provider?.close();
  dropPgSchemas();
});

test("proxyFetch: completed, then replayed; the upstream's own 4xx is resolved as it is", async () => {
  const key = intentKey("run-7", "create_ticket", { title: "printer on fire" });
  const before = provider.count;
  const init = { method: "POST", headers: { "Content-Type": "application/json" }, body: '{"title":"printer on fire"}' };
  const first = await once.proxyFetch("api", "/v1/tickets", init, { key });
  assert.equal(first.status, 200);
  assert.equal(first.outcome, "completed");
  const body = await first.json();
  for (let i = 0; i < 3; i++) {
    const again = await once.proxyFetch("api", "/v1/tickets", init, { key });
    assert.equal(again.outcome, "replayed");
    assert.equal(again.replayed, true);
    assert.deepEqual(await again.json(), body);
  }
  assert.equal(provider.count, before + 1);
  assert.equal(provider.effects.at(-1).headers.authorization, undefined, "once's token is never forwarded");
  const bad = await once.proxyFetch("api", "/v1/tickets", { ...init, headers: { ...init.headers, "X-Fake-Status": "400" } }, { key: uniqueKey() });
  assert.equal(bad.status, 400);
  assert.equal(bad.outcome, "completed");
});

test("proxyFetch: a key in flight is InFlight, or waited for with wait", async () => {
  const key = uniqueKey("pf");
  const before = provider.count;
  const init = { method: "POST", headers: { "X-Fake-Delay-Ms": "800" }, body: "{}" };
  const first = once.proxyFetch("api", "/v1/slow", init, { key });
  while (provider.count === before) await new Promise((r) => setTimeout(r, 10));
  await assert.rejects(once.proxyFetch("api", "/v1/slow", init, { key }), (e) => e instanceof InFlight && e.code === "key_in_flight");
  const waited = await once.proxyFetch("api", "/v1/slow", init, { key, wait: 10 });
  assert.equal(waited.outcome, "replayed");
  assert.equal((await first).outcome, "completed");
  assert.equal(provider.count, before + 1);
  assert.deepEqual(proxyHeaders("k", { wait: 90 }), { "Idempotency-Key": "k", Prefer: "wait=60" });
});

test("the openai client through once: baseURL and the key header; a timed-out first attempt, one generation", async () => {
  const openai = new OpenAI({ baseURL: once.proxyUrl("openai"), apiKey: TOKEN, maxRetries: 0 });
  const messages = [{ role: "user", content: "Summarise ticket 4411" }];
  const key = intentKey("run-8", "summarise", { messages });
  const before = provider.count;
  provider.queueDelays(1000);
  // The first attempt gives up after 300 ms; once goes on and records the answer.
  await assert.rejects(
    openai.chat.completions.create({ model: "gpt-test", messages }, { headers: proxyHeaders(key), timeout: 300 }),
    (e) => e instanceof OpenAI.APIConnectionTimeoutError,
  );
  // Retries with the same intent wait for it and get the same generation.
  const texts = [];
  for (let i = 0; i < 3; i++) {
    const { data, response } = await openai.chat.completions
      .create({ model: "gpt-test", messages }, { headers: proxyHeaders(key, { wait: 10 }) })
      .withResponse();
    assert.equal(response.headers.get("once-outcome"), "replayed");
    texts.push(data.choices[0].message.content);
  }
  assert.deepEqual(texts, Array(3).fill(`generation ${before + 1}`));
  assert.equal(provider.count, before + 1);
  const seen = provider.effects.at(-1);
  assert.equal(seen.path, "/v1/chat/completions");
  assert.equal(seen.headers.authorization, "Bearer sk-provider-secret", "the provider's key is once's, not the agent's");
});

test("the stripe client through an upstream's listen address: its idempotencyKey is the intent", async () => {
  const stripe = new Stripe(TOKEN, { host: "127.0.0.1", port: stripePort, protocol: "http", maxNetworkRetries: 0 });
  const params = { charge: "ch_3PqW", amount: 4200 };
  const key = intentKey("run-9", "refund", params);
  const before = provider.count;
  provider.queueDelays(1000);
  await assert.rejects(
    new Stripe(TOKEN, { host: "127.0.0.1", port: stripePort, protocol: "http", maxNetworkRetries: 0, timeout: 300 }).refunds.create(params, {
      idempotencyKey: key,
    }),
    (e) => e.type === "StripeConnectionError",
  );
  // stripe-node retries a 409 (key_in_flight) by itself until the first attempt is recorded.
  const patient = new Stripe(TOKEN, { host: "127.0.0.1", port: stripePort, protocol: "http", maxNetworkRetries: 6 });
  const first = await patient.refunds.create(params, { idempotencyKey: key });
  for (let i = 0; i < 2; i++) assert.deepEqual(await stripe.refunds.create(params, { idempotencyKey: key }), first);
  assert.equal(first.id, `eff_${before + 1}`);
  assert.equal(provider.count, before + 1);
  const seen = provider.effects.at(-1);
  assert.equal(seen.path, "/v1/refunds");
  assert.equal(seen.headers["idempotency-key"], key, "forward_key_as: the provider dedupes on the same key");
  assert.equal(seen.headers.authorization, "Bearer sk_test_provider_secret");
});

test("an unknown agent token through the openai client is a 401 from once, not a provider call", async () => {
  const openai = new OpenAI({ baseURL: once.proxyUrl("openai"), apiKey: "wrong", maxRetries: 0 });
  const before = provider.count;
  await assert.rejects(
    openai.chat.completions.create({ model: "m", messages: [] }, { headers: proxyHeaders(uniqueKey()) }),
    (e) => e.status === 401,
  );
  await assert.rejects(
    new Once({ url: gw.url, token: "wrong" }).proxyFetch("api", "/v1/x", { method: "POST" }, { key: uniqueKey() }),
    (e) => e.status === 401 && e.code === "unauthorized",
  );
  assert.equal(provider.count, before);
});
