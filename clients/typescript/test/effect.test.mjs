// effect.test.mjs — Once.effect against the real `once serve` (SQLite, or PostgreSQL with
// ONCE_TEST_STORE=postgres) and a provider that counts effects: one effect per intent
// whatever the retries, concurrency and crashes; NotDone releases; other errors leave the
// action unknown; the lease is renewed; once's refusals are typed errors.
import { test } from "node:test";
import assert from "node:assert/strict";
import path from "node:path";
import {
  Once,
  intentKey,
  NotDone,
  InFlight,
  OutcomeUnknown,
  Held,
  Unauthorized,
  NotAllowed,
  LimitExceeded,
  StaleToken,
  ScopeReserved,
  AwaitingApproval,
  Denied,
  BadRequest,
  StoreUnavailable,
  ServiceUnavailable,
  TransportError,
  errorFor,
} from "../dist/index.js";
import { spawn } from "node:child_process";
import { withGateway, spawnNode, uniqueKey, freePort, HERE, sleep, STORE_KIND } from "./harness.mjs";

let gw, provider, once;

withGateway((provider) => ({
  upstreams: {
    pay: { url: provider.url, actions_api: true, approve: "POST /v1/refunds" },
    mail: { url: provider.url },
  },
}), (env) => ({ gw, provider, once } = env));

const effectOf = (what) => async () => (await provider.effect(what)).id;

test("a new key runs the effect once; the same key replays the recorded result", async () => {
  const key = intentKey("run-1", "send_email", { to: "a@example.com", body: "hi" });
  const before = provider.count;
  let runs = 0;
  const fn = async () => {
    runs++;
    const r = await provider.effect({ key });
    return { sent: r.id, at: new Date(0) };
  };
  const first = await once.run({ scope: "mail-out", key }, fn);
  assert.equal(first.replayed, false);
  assert.equal(first.attempt, 1);
  assert.deepEqual(first.result, { sent: `eff_${before + 1}`, at: "1970-01-01T00:00:00.000Z" });
  for (let i = 0; i < 4; i++) {
    const again = await once.run({ scope: "mail-out", key }, fn);
    assert.equal(again.replayed, true);
    assert.deepEqual(again.result, first.result);
  }
  assert.equal(runs, 1);
  assert.equal(provider.count, before + 1);
  const rec = await once.get("mail-out", key);
  assert.equal(rec.state, "completed");
});

test("concurrent attempts of one intent wait for the first and get its result: one effect", async () => {
  const key = uniqueKey("conc");
  const before = provider.count;
  provider.queueDelays(400);
  const results = await Promise.all(
    Array.from({ length: 6 }, () => once.effect({ scope: "conc", key, wait: 10 }, effectOf({ key }))),
  );
  assert.equal(provider.count, before + 1);
  assert.equal(new Set(results).size, 1);
});

test("a key in flight beyond the wait is InFlight, carrying the record", async () => {
  const key = uniqueKey("flight");
  let release;
  const gate = new Promise((r) => (release = r));
  const first = once.effect({ scope: "flight", key }, async () => {
    await gate;
    return "first";
  });
  await sleep(100);
  const t0 = Date.now();
  await assert.rejects(once.effect({ scope: "flight", key, wait: 0.5 }, () => "second"), (e) => {
    assert.ok(e instanceof InFlight, e.stack);
    assert.equal(e.code, "key_in_flight");
    assert.equal(e.record.state, "pending");
    assert.equal(e.key, key);
    return true;
  });
  assert.ok(Date.now() - t0 >= 450, "it waited");
  release();
  assert.equal(await first, "first");
  assert.equal(await once.effect({ scope: "flight", key }, () => "third"), "first");
});

test("the lease is renewed while the effect runs (a lease of 1 s, an effect of 2.5 s)", async () => {
  const key = uniqueKey("lease");
  const short = new Once({ url: gw.url, lease: 1 });
  let seen;
  const running = short.effect({ scope: "lease", key }, async (ctx) => {
    await sleep(2500);
    seen = ctx.signal.aborted;
    return "done";
  });
  await sleep(1900);
  // Past one lease and more than one loop: without renewals the action would be unknown.
  await assert.rejects(once.effect({ scope: "lease", key }, () => "dup"), InFlight);
  assert.equal(await running, "done");
  assert.equal(seen, false);
  const rec = await once.get("lease", key);
  assert.equal(rec.state, "completed");
  assert.equal(rec.attempt, 1);
});

test("NotDone releases the key: a later attempt runs the effect", async () => {
  const key = uniqueKey("notdone");
  await assert.rejects(
    once.effect({ scope: "nd", key }, () => {
      throw new NotDone("card declined before charging");
    }),
    NotDone,
  );
  const rec = await once.get("nd", key);
  assert.equal(rec.state, "released");
  assert.match(rec.error, /card declined/);
  const r = await once.run({ scope: "nd", key }, () => "charged");
  assert.equal(r.result, "charged");
  assert.equal(r.attempt, 2);
});

test("any other error marks the action unknown: retries never run it again", async () => {
  const key = uniqueKey("unknown");
  const before = provider.count;
  const boom = new Error("socket hang up after sending");
  await assert.rejects(
    once.effect({ scope: "unk", key }, async () => {
      await provider.effect({ key });
      throw boom;
    }),
    (e) => e === boom,
  );
  for (let i = 0; i < 3; i++) {
    await assert.rejects(once.effect({ scope: "unk", key }, effectOf({ key })), (e) => {
      assert.ok(e instanceof OutcomeUnknown);
      assert.ok(["unknown", "held"].includes(e.record.state));
      assert.match(e.record.error, /socket hang up/);
      return true;
    });
  }
  assert.equal(provider.count, before + 1);
});

test("a result without a JSON form marks the action unknown (the effect ran)", async () => {
  const key = uniqueKey("nojson");
  await assert.rejects(once.effect({ scope: "unk", key }, () => 10n), TypeError);
  assert.ok(["unknown", "held"].includes((await once.get("unk", key)).state));
});

test("an attempt killed between its effect and its completion: N retries, one effect", async () => {
  const key = intentKey("run-crash", "charge", { order: "A-1182", amount: 4200 });
  const before = provider.count;
  const child = spawnNode(path.join(HERE, "fixtures/effect_child.mjs"), [gw.url, "crash", key, provider.url, "1"]);
  await child.waitFor(/effect-done/);
  await child.kill();
  assert.equal(provider.count, before + 1);
  // Retries: in flight until the dead attempt's lease runs out, then unknown, then held.
  const errors = [];
  for (let i = 0; i < 3; i++) {
    try {
      await once.effect({ scope: "crash", key, wait: 5 }, effectOf({ key }));
      errors.push(null);
    } catch (e) {
      errors.push(e);
    }
  }
  assert.equal(provider.count, before + 1, "no retry ran the effect again");
  for (const e of errors) assert.ok(e instanceof OutcomeUnknown, String(e));
  assert.ok(errors.at(-1) instanceof Held || errors.at(-1).state === "unknown");
  // A person settles it as done; retries replay (a hand-resolved action has no result).
  const r = await gw.api("POST", `/v1/actions/crash/${key}/resolve`, { outcome: "completed", note: "charged, per the provider" });
  assert.equal(r.status, 200);
  const again = await once.run({ scope: "crash", key }, effectOf({ key }));
  assert.equal(again.replayed, true);
  assert.equal(again.result, null);
  assert.equal(provider.count, before + 1);
});

test("awaiting approval and denied are typed errors carrying the record", async () => {
  const key = uniqueKey("refund");
  // The proxy stores the request for a person to approve ...
  const p = await fetch(`${gw.url}/v1/proxy/pay/v1/refunds`, {
    method: "POST",
    headers: { "Idempotency-Key": key, "Content-Type": "application/json" },
    body: '{"amount":100}',
  });
  assert.equal(p.status, 202);
  // ... and an agent acting on the same key through the actions API waits for it.
  let runs = 0;
  await assert.rejects(
    once.effect({ scope: "pay", key }, () => runs++),
    (e) => {
      assert.ok(e instanceof AwaitingApproval, String(e));
      assert.equal(e.record.state, "awaiting_approval");
      assert.equal(e.record.waits_for, "approval");
      return true;
    },
  );
  assert.equal((await gw.api("POST", `/v1/actions/pay/${key}/deny`, { note: "not this one" })).status, 200);
  await assert.rejects(
    once.effect({ scope: "pay", key }, () => runs++),
    (e) => {
      assert.ok(e instanceof Denied, String(e));
      assert.equal(e.code, "denied");
      assert.equal(e.note, "not this one");
      assert.equal(e.record.state, "denied");
      return true;
    },
  );
  assert.equal(runs, 0);
});

test("409 stale_token, 403 scope_reserved, 400 invalid_key are typed, with the problem's detail", async () => {
  const key = uniqueKey("stale");
  const res = await once.reserve("stale", key);
  assert.equal(res.status, "reserved");
  const other = res.token.slice(0, -1) + (res.token.endsWith("0") ? "1" : "0");
  await assert.rejects(once.complete("stale", key, other, 1), (e) => {
    assert.ok(e instanceof StaleToken, String(e));
    assert.equal(e.status, 409);
    assert.ok(e.detail);
    return true;
  });
  await once.complete("stale", key, res.token, { ok: true });
  await assert.rejects(once.effect({ scope: "mail", key }, () => 1), (e) => e instanceof ScopeReserved && e.status === 403);
  await assert.rejects(once.effect({ scope: "s", key: "" }, () => 1), (e) => e instanceof BadRequest && e.code === "invalid_key");
});

test("503 store_unavailable when the SQLite store is locked by another writer; nothing runs", { skip: STORE_KIND !== "sqlite" && "the store is made unavailable by locking the SQLite file" }, async () => {
  const file = gw.store.slice("sqlite:".length);
  const script = "import sqlite3, sys\nc = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None)\nc.execute('BEGIN EXCLUSIVE')\nprint('locked', flush=True)\nsys.stdin.read()\nc.execute('ROLLBACK')\n";
  const lock = spawn("/usr/bin/python3", ["-c", script, file], { stdio: ["pipe", "pipe", "inherit"] });
  try {
    await new Promise((resolve, reject) => {
      lock.stdout.once("data", resolve);
      lock.once("exit", (code) => reject(new Error(`the lock holder exited ${code}`)));
    });
    let runs = 0;
    await assert.rejects(new Once({ url: gw.url, timeout: 60 }).effect({ scope: "locked", key: uniqueKey() }, () => runs++), (e) => {
      assert.ok(e instanceof StoreUnavailable, String(e));
      assert.equal(e.status, 503);
      assert.ok(e.detail);
      return true;
    });
    assert.equal(runs, 0);
  } finally {
    lock.stdin.end();
    await new Promise((r) => (lock.exitCode === null ? lock.once("exit", r) : r()));
  }
});

test("no answer at all is a TransportError; nothing runs", async () => {
  let runs = 0;
  const port = await freePort();
  await assert.rejects(new Once({ url: `http://127.0.0.1:${port}`, timeout: 5 }).effect({ scope: "s", key: "k" }, () => runs++), (e) => {
    assert.ok(e instanceof TransportError, String(e));
    assert.equal(e.status, 0);
    return true;
  });
  assert.equal(runs, 0);
});

test("a 503's problem is a typed error too (the mapping of every status)", () => {
  const h = new Headers({ "Retry-After": "7" });
  const e = errorFor(503, { code: "store_unavailable", detail: "the store does not answer", status: 503 }, h, "reserve s/k");
  assert.ok(e instanceof StoreUnavailable && e instanceof ServiceUnavailable);
  assert.equal(e.detail, "the store does not answer");
  assert.equal(e.retryAfter, 7);
  const s = errorFor(503, { code: "shutting_down" }, new Headers(), "x");
  assert.ok(s instanceof ServiceUnavailable && !(s instanceof StoreUnavailable));
  assert.ok(errorFor(409, { code: "outcome_unknown", state: "held" }, new Headers(), "x") instanceof Held);
});
