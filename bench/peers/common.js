// bench/peers/common.js — what the three peer servers share: the upstream
// call (a keep-alive agent, as a production Node service would use), the
// Express app with a JSON body parser, and start-up (one process, or a
// node:cluster of PEER_WORKERS processes sharing the port).
//
// Environment: PORT (required), UPSTREAM (the fast nginx upstream, required),
// SLOW_UPSTREAM (the 200 ms counting upstream of the concurrency test; paths
// under /slow/ go there), REDIS_URL, PEER_WORKERS [1].
'use strict';

const cluster = require('node:cluster');
const http = require('node:http');
const express = require('express');

const agent = new http.Agent({ keepAlive: true, maxSockets: 256 });

function need(name) {
  const v = process.env[name];
  if (!v) {
    console.error(`${process.argv[1]}: ${name} is not set`);
    process.exit(2);
  }
  return v;
}

// POST `body` (a Buffer) to the upstream that serves `path`, and resolve with
// { status, body } (body a string). Paths under /slow/ go to SLOW_UPSTREAM
// with the prefix kept, so the counting upstream sees which run sent them.
function forward(path, body) {
  const base = path.startsWith('/slow/') ? need('SLOW_UPSTREAM') : need('UPSTREAM');
  const url = new URL(path, base);
  return new Promise((resolve, reject) => {
    const req = http.request(url, {
      method: 'POST',
      agent,
      headers: { 'Content-Type': 'application/json', 'Content-Length': body.length },
    }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

// The request body as the bytes to forward: re-serialised from the parsed
// JSON, as an Express handler that forwards what it parsed would do.
function bodyBytes(req) {
  return Buffer.from(JSON.stringify(req.body ?? {}));
}

function app() {
  const a = express();
  a.disable('x-powered-by');
  a.disable('etag');
  a.use(express.json({ limit: '1mb', type: '*/*' }));
  return a;
}

// Runs `setup()` (which resolves to an Express app) in each worker and
// listens on PORT; with PEER_WORKERS > 1 the primary only forks.
function start(name, setup) {
  const port = Number(need('PORT'));
  need('UPSTREAM');
  const workers = Number(process.env.PEER_WORKERS || '1');
  if (!Number.isInteger(workers) || workers < 1) {
    console.error(`${name}: PEER_WORKERS must be a positive integer`);
    process.exit(2);
  }
  if (workers > 1 && cluster.isPrimary) {
    for (let i = 0; i < workers; i++) cluster.fork();
    cluster.on('exit', (w, code, sig) => {
      console.error(`${name}: worker ${w.process.pid} ended (${sig || code})`);
      process.exit(1);
    });
    return;
  }
  setup().then((a) => {
    const server = a.listen(port, '127.0.0.1', () => console.error(`${name}: listening on 127.0.0.1:${port}`));
    server.keepAliveTimeout = 60000;
    process.on('SIGTERM', () => server.close(() => process.exit(0)));
  }).catch((err) => {
    console.error(`${name}: start failed:`, err);
    process.exit(1);
  });
}

module.exports = { forward, bodyBytes, app, start, need };
