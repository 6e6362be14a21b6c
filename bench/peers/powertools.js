// bench/peers/powertools.js — AWS Lambda Powertools Idempotency for
// TypeScript (@aws-lambda-powertools/idempotency) with its Redis persistence
// layer (CachePersistenceLayer over @redis/client), in an Express handler:
// makeIdempotent wraps the upstream call. The key is the Idempotency-Key
// header (eventKeyJmesPath); the record is put IN_PROGRESS with SET NX
// (atomic in Redis, not fsynced) before the call and COMPLETED before the
// client hears the answer; a call that throws deletes its record.
//
// Payload validation (payloadValidationJmesPath) is off: in 2.35.0 the cache
// layer's _updateRecord drops the stored payload hash when it completes a
// record, so with validation on every replay fails with
// IdempotencyValidationError (seen here; docs/benchmarks.md).
// The config is given a context whose remaining time is 30 s (what a Lambda
// deadline would be): without one, Powertools logs a warning on every call
// and the in-progress record has no expiry of its own.
'use strict';

const { createClient } = require('@redis/client');
const {
  makeIdempotent, IdempotencyConfig, IdempotencyAlreadyInProgressError,
  IdempotencyValidationError, IdempotencyKeyError,
} = require('@aws-lambda-powertools/idempotency');
const { CachePersistenceLayer } = require('@aws-lambda-powertools/idempotency/cache');
const { forward, app, start, need } = require('./common');

async function setup() {
  const client = createClient({ url: need('REDIS_URL') });
  client.on('error', (err) => console.error('powertools: redis:', err.message));
  await client.connect();

  const persistenceStore = new CachePersistenceLayer({ client });
  const config = new IdempotencyConfig({
    eventKeyJmesPath: 'key',
    throwOnNoIdempotencyKey: true,
    expiresAfterSeconds: 24 * 3600,
  });
  config.registerLambdaContext({ getRemainingTimeInMillis: () => 30000 });
  const call = makeIdempotent(async (payload) => {
    const up = await forward(payload.path, Buffer.from(JSON.stringify(payload.body)));
    return { status: up.status, body: up.body };
  }, { persistenceStore, config });

  const a = app();
  a.post('*', async (req, res) => {
    if (!req.get('idempotency-key')) {
      res.status(400).json({ error: 'key_required' });
      return;
    }
    try {
      const out = await call({ key: req.get('idempotency-key'), path: req.path, body: req.body ?? {} });
      res.status(out.status).type('application/json').send(out.body);
    } catch (err) {
      if (err instanceof IdempotencyAlreadyInProgressError) res.status(409).json({ error: 'in_progress' });
      else if (err instanceof IdempotencyValidationError) res.status(422).json({ error: 'payload_mismatch' });
      else if (err instanceof IdempotencyKeyError) res.status(400).json({ error: 'key_required' });
      else res.status(502).json({ error: String(err) });
    }
  });
  return a;
}

start('powertools', setup);
