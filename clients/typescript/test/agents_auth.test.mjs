// agents_auth.test.mjs — what a gateway with tokens and agents answers the client: 401
// without a token, 403 not_allowed outside the agent's grants, 429 limit_exceeded past its
// limit (with Retry-After), each a typed error with the problem's detail; nothing runs and
// no retry loop hides them.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Once, Unauthorized, NotAllowed, LimitExceeded, Forbidden } from "../dist/index.js";
import { startOnce, startProvider, dropPgSchemas, uniqueKey } from "./harness.mjs";

const AGENT = "agent_token_support_0123456789abcdef";
const OPERATOR = "operator_token_alice_0123456789abcdef";
let gw, provider;

before(async () => {
  provider = await startProvider();
  gw = await startOnce({
    upstreams: { mail: { url: provider.url } },
    tokens: [
      [AGENT, "agent", "support"],
      [OPERATOR, "operator", "alice"],
    ],
    agents: { support: { allow: ["actions: support-*", "mail: POST /v3/mail/send"], limit: ["actions: support-mail 2/1h"] } },
  });
});

after(async () => {
  await gw?.stop();
  await provider?.close();
  dropPgSchemas();
});

test("401 without a token or with a wrong one", async () => {
  for (const token of [undefined, "not-a-token"]) {
    let runs = 0;
    await assert.rejects(new Once({ url: gw.url, token }).effect({ scope: "support-x", key: uniqueKey() }, () => runs++), (e) => {
      assert.ok(e instanceof Unauthorized, String(e));
      assert.equal(e.status, 401);
      assert.equal(e.code, "unauthorized");
      return true;
    });
    assert.equal(runs, 0);
  }
});

test("403 not_allowed outside the agent's grants, names the agent", async () => {
  const once = new Once({ url: gw.url, token: AGENT });
  let runs = 0;
  await assert.rejects(once.effect({ scope: "billing", key: uniqueKey() }, () => runs++), (e) => {
    assert.ok(e instanceof NotAllowed && e instanceof Forbidden, String(e));
    assert.equal(e.code, "not_allowed");
    assert.match(e.detail, /support/);
    return true;
  });
  assert.equal(runs, 0);
  // Through the proxy too: a path its grants do not name.
  await assert.rejects(
    once.proxyFetch("mail", "/v3/mail/delete", { method: "POST", body: "{}" }, { key: uniqueKey() }),
    (e) => e instanceof NotAllowed && e.status === 403,
  );
  assert.equal(provider.count, 0);
  // An agent's token on an operator route.
  await assert.rejects(once.get("support-x", "k").then(() => null), (e) => e.status === 404);
});

test("429 limit_exceeded past the agent's limit, with retryAfter; replays are not counted", async () => {
  const once = new Once({ url: gw.url, token: AGENT });
  const keys = [uniqueKey("m1"), uniqueKey("m2"), uniqueKey("m3")];
  assert.equal(await once.effect({ scope: "support-mail", key: keys[0] }, () => "one"), "one");
  assert.equal(await once.effect({ scope: "support-mail", key: keys[1] }, () => "two"), "two");
  assert.equal(await once.effect({ scope: "support-mail", key: keys[0] }, () => "again"), "one");
  let runs = 0;
  await assert.rejects(once.effect({ scope: "support-mail", key: keys[2] }, () => runs++), (e) => {
    assert.ok(e instanceof LimitExceeded, String(e));
    assert.equal(e.status, 429);
    assert.equal(e.code, "limit_exceeded");
    assert.match(e.detail, /2\/1h/);
    assert.ok(Number.isInteger(e.retryAfter) && e.retryAfter > 0 && e.retryAfter <= 3660, `retryAfter ${e.retryAfter}`);
    return true;
  });
  assert.equal(runs, 0);
  // The operator's token lists what the agent did.
  const r = await gw.api("GET", "/v1/actions?scope=support-mail", undefined, OPERATOR);
  assert.equal(r.body.items.length, 2);
  assert.ok(r.body.items.every((a) => a.agent === "support"));
});
