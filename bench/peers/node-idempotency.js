// bench/peers/node-idempotency.js — @node-idempotency/core with its Redis
// storage adapter, wrapped in the minimal Express middleware its README
// describes (its own Express package is not on the npm registry): onRequest
// before the call (SET NX of an IN_PROGRESS record: an atomic reservation in
// Redis, not fsynced), the upstream call, onResponse (the answer stored)
// before the client hears it. A repeat gets the stored answer; a repeat while
// the first is in flight gets 409.
'use strict';

const { Idempotency, IdempotencyError, IdempotencyErrorCodes } = require('@node-idempotency/core');
const { RedisStorageAdapter } = require('@node-idempotency/storage-adapter-redis');
const { forward, bodyBytes, app, start, need } = require('./common');

const STATUS_OF = {
  [IdempotencyErrorCodes.REQUEST_IN_PROGRESS]: 409,
  [IdempotencyErrorCodes.IDEMPOTENCY_FINGERPRINT_MISSMATCH]: 422,
  [IdempotencyErrorCodes.IDEMPOTENCY_KEY_MISSING]: 400,
  [IdempotencyErrorCodes.IDEMPOTENCY_KEY_LEN_EXEEDED]: 400,
};

async function setup() {
  const storage = new RedisStorageAdapter({ url: need('REDIS_URL') });
  await storage.connect();
  const idem = new Idempotency(storage, { enforceIdempotency: true, cacheTTLMS: 24 * 3600 * 1000 });

  const a = app();
  a.post('*', async (req, res) => {
    const ireq = { method: req.method, headers: req.headers, body: req.body, path: req.path };
    try {
      const stored = await idem.onRequest(ireq);
      if (stored) {
        res.status(stored.additional.status).type('application/json').send(stored.body);
        return;
      }
    } catch (err) {
      if (err instanceof IdempotencyError) {
        res.status(STATUS_OF[err.code] ?? 400).json({ error: err.code });
      } else {
        res.status(503).json({ error: String(err) });
      }
      return;
    }
    let up;
    try {
      up = await forward(req.path, bodyBytes(req));
    } catch (err) {
      // The outcome is unknown; the IN_PROGRESS record stays until its TTL.
      res.status(502).json({ error: String(err) });
      return;
    }
    await idem.onResponse(ireq, { body: up.body, additional: { status: up.status } });
    res.status(up.status).type('application/json').send(up.body);
  });
  return a;
}

start('node-idempotency', setup);
