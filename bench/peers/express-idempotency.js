// bench/peers/express-idempotency.js — the express-idempotency middleware
// with its default data adapter (in memory: the package ships no Redis
// adapter, only a separate MongoDB one), as its README shows: the middleware
// looks the key up, records the request, and the route handler checks isHit()
// before calling the upstream; the answer is stored when it is sent
// (after the client has it). A repeat while the first is in flight gets 409.
'use strict';

const { idempotency, getSharedIdempotencyService } = require('express-idempotency');
const { forward, bodyBytes, app, start } = require('./common');

async function setup() {
  const a = app();
  a.post('*', idempotency(), async (req, res) => {
    const service = getSharedIdempotencyService();
    if (service.isHit(req)) return;
    try {
      const up = await forward(req.path, bodyBytes(req));
      if (up.status >= 500) await service.reportError(req);
      res.status(up.status).type('application/json').send(up.body);
    } catch (err) {
      await service.reportError(req);
      res.status(502).json({ error: String(err) });
    }
  });
  // The middleware hands conflicts and misuse to next(err) with the status set.
  a.use((err, req, res, next) => { // eslint-disable-line no-unused-vars
    res.status(res.statusCode >= 400 ? res.statusCode : 500).json({ error: err.message });
  });
  return a;
}

start('express-idempotency', setup);
