// harness.mjs — what the client tests run against: the real `once serve` ($ONCE_BIN,
// default build/asan/once) with a config written into a temporary directory, on SQLite
// or, with ONCE_TEST_STORE=postgres, in a schema of its own on $ONCE_TEST_PG_URL; and a
// counting provider (an HTTP server in the test process that records every effect).
// Everything listens on 127.0.0.1; every wait is bounded.
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";
import { before, after } from "node:test";
import { Once } from "../dist/index.js";

export const HERE = path.dirname(fileURLToPath(import.meta.url));
export const REPO = path.resolve(HERE, "../../..");
export const ONCE_BIN = path.resolve(REPO, process.env.ONCE_BIN || "build/asan/once");
export const STORE_KIND = process.env.ONCE_TEST_STORE || "sqlite";

const SANITIZER_MARKERS = ["ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:", "SUMMARY: UndefinedBehaviorSanitizer"];

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** p, or null after ms (the timer does not keep the process alive). */
function within(p, ms) {
  let t;
  const timeout = new Promise((r) => {
    t = setTimeout(() => r(null), ms);
  });
  return Promise.race([p, timeout]).finally(() => clearTimeout(t));
}

/** Polls pred (async) every 20 ms until it is truthy or timeoutMs passes; returns its last value. */
export async function until(pred, timeoutMs = 10000) {
  const deadline = Date.now() + timeoutMs;
  let v = await pred();
  while (!v && Date.now() < deadline) {
    await sleep(20);
    v = await pred();
  }
  return v;
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

export function uniqueKey(prefix = "k") {
  return `${prefix}-${randomBytes(8).toString("hex")}`;
}

function pgSchemaUrl() {
  const base = process.env.ONCE_TEST_PG_URL;
  if (!base) throw new Error("ONCE_TEST_STORE=postgres needs ONCE_TEST_PG_URL (bash scripts/pg start DIR prints one)");
  const schema = `t_ts_${process.pid}_${randomBytes(6).toString("hex")}`;
  pgSchemas.push(schema);
  return `${base}${base.includes("?") ? "&" : "?"}once_schema=${schema}`;
}
const pgSchemas = [];

/** Drops the schemas this process made (best effort; the server may be throwaway). */
export function dropPgSchemas() {
  const base = process.env.ONCE_TEST_PG_URL;
  if (!base || !pgSchemas.length) return;
  const dirs = fs.existsSync("/usr/lib/postgresql") ? fs.readdirSync("/usr/lib/postgresql").sort() : [];
  const psql = dirs.length ? `/usr/lib/postgresql/${dirs[dirs.length - 1]}/bin/psql` : "psql";
  const sql = "SET client_min_messages = warning;\n" + pgSchemas.map((s) => `DROP SCHEMA IF EXISTS ${s} CASCADE;\n`).join("");
  pgSchemas.length = 0;
  spawnSync(psql, ["-q", "-X", "-d", base], { input: sql, timeout: 120000 });
}

function iniValue(v) {
  if (typeof v === "boolean") return v ? "yes" : "no";
  return String(v);
}

function iniSection(name, items) {
  const lines = [`[${name}]`];
  for (const [k, v] of Object.entries(items)) {
    if (v === undefined || v === null) continue;
    for (const item of Array.isArray(v) ? v : [v]) lines.push(`${k} = ${iniValue(item)}`);
  }
  return lines.join("\n");
}

/**
 * Starts `once serve`. upstreams / mcp / agents: {NAME: {key: value | [values]}} written as
 * [upstream.NAME], [mcp.NAME], [agent.NAME]; tokens: [[TOKEN, ROLE, NAME], …] written to a
 * tokens_file; server: extra [server] keys. Resolves when GET /readyz answers 200.
 */
export async function startOnce({ upstreams = {}, mcp = {}, agents = {}, tokens = null, server = {} } = {}) {
  if (!fs.existsSync(ONCE_BIN)) throw new Error(`once binary not found at ${ONCE_BIN}: build it (make build-asan) or set ONCE_BIN`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "once-ts-"));
  const port = await freePort();
  const store = STORE_KIND === "postgres" ? pgSchemaUrl() : `sqlite:${path.join(dir, "once.db")}`;
  const cfg = {
    listen: `127.0.0.1:${port}`,
    store,
    max_body: "1MiB",
    lease: "30s",
    retention: "24h",
    loop_interval: "200ms",
    shutdown_grace: "10s",
    ...server,
  };
  if (tokens) {
    const file = path.join(dir, "tokens");
    fs.writeFileSync(file, tokens.map((t) => t.join(" ")).join("\n") + "\n");
    cfg.tokens_file = file;
  }
  const sections = [iniSection("server", cfg)];
  for (const [n, u] of Object.entries(upstreams)) sections.push(iniSection(`upstream.${n}`, u));
  for (const [n, m] of Object.entries(mcp)) sections.push(iniSection(`mcp.${n}`, m));
  for (const [n, a] of Object.entries(agents)) sections.push(iniSection(`agent.${n}`, a));
  const configPath = path.join(dir, "once.ini");
  fs.writeFileSync(configPath, sections.join("\n\n") + "\n");

  const gw = {
    dir,
    port,
    store,
    url: `http://127.0.0.1:${port}`,
    configPath,
    proc: null,
    runs: 0,
    logs: [],
    stderr() {
      return this.logs.map((f) => (fs.existsSync(f) ? fs.readFileSync(f, "utf8") : "")).join("");
    },
    async start() {
      this.runs++;
      const log = path.join(dir, `stderr.${this.runs}.log`);
      this.logs.push(log);
      const fd = fs.openSync(log, "w");
      const env = { ...process.env, ASAN_OPTIONS: process.env.ASAN_OPTIONS || "detect_leaks=1:abort_on_error=0" };
      delete env.ONCE_STORE;
      this.proc = spawn(ONCE_BIN, ["serve", "--config", configPath], { cwd: dir, stdio: ["ignore", fd, fd], env });
      fs.closeSync(fd);
      const exited = new Promise((resolve) => this.proc.once("exit", (code, signal) => resolve({ code, signal })));
      this.exited = exited;
      const deadline = Date.now() + 15000;
      let last = "";
      while (Date.now() < deadline) {
        const gone = await Promise.race([exited, sleep(0).then(() => null)]);
        if (gone) throw new Error(`once serve exited ${JSON.stringify(gone)} during start-up:\n${this.stderr().slice(-4000)}`);
        try {
          const r = await fetch(`${this.url}/readyz`, { signal: AbortSignal.timeout(1000) });
          if (r.status === 200) return this;
          last = `${r.status} ${await r.text()}`;
        } catch (e) {
          last = String(e);
        }
        await sleep(50);
      }
      this.proc.kill("SIGKILL");
      throw new Error(`once serve: /readyz not 200 within 15 s (last: ${last}):\n${this.stderr().slice(-4000)}`);
    },
    /** SIGTERM, then SIGKILL after 20 s; throws if a sanitizer reported anything. */
    async stop() {
      if (this.proc && this.proc.exitCode === null && this.proc.signalCode === null) {
        this.proc.kill("SIGTERM");
        const done = await within(this.exited, 20000);
        if (!done) {
          this.proc.kill("SIGKILL");
          await this.exited;
        }
      }
      const text = this.stderr();
      const found = SANITIZER_MARKERS.filter((m) => text.includes(m));
      if (found.length) throw new Error(`once serve reported ${found.join(", ")}:\n${text.slice(-6000)}`);
      fs.rmSync(dir, { recursive: true, force: true });
    },
    /** SIGKILL, as a crash. */
    async kill() {
      if (this.proc && this.proc.exitCode === null && this.proc.signalCode === null) {
        this.proc.kill("SIGKILL");
        await this.exited;
      }
    },
    /** An operator's request (the test's own, not the client's). */
    async api(method, p, body, token) {
      const headers = { "Content-Type": "application/json" };
      if (token) headers.Authorization = `Bearer ${token}`;
      const r = await fetch(this.url + p, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
      const text = await r.text();
      return { status: r.status, body: text ? JSON.parse(text) : null, headers: r.headers };
    },
  };
  await gw.start();
  return gw;
}

/**
 * A provider that counts effects: every request that is not GET/HEAD is one, recorded with
 * its method, path, headers and body before anything else. Answers JSON: for a path ending in
 * /chat/completions an OpenAI chat completion, else {"id":"eff_N","object":"effect",...}.
 * X-Fake-Delay-Ms: N (or the queued delays) waits N ms after recording, before answering.
 * X-Fake-Status: N answers that status.
 */
export async function startProvider() {
  const effects = [];
  const delays = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", async () => {
      const body = Buffer.concat(chunks).toString("utf8");
      if (req.method === "GET" && req.url === "/_count") {
        res.writeHead(200, { "Content-Type": "application/json" });
        return res.end(JSON.stringify({ count: effects.length }));
      }
      if (req.method === "GET" || req.method === "HEAD") {
        res.writeHead(200, { "Content-Type": "application/json" });
        return res.end(JSON.stringify({ id: null, object: "list", data: [] }));
      }
      const n = effects.length + 1;
      effects.push({ n, method: req.method, path: req.url, headers: req.headers, body });
      const delay = Number(req.headers["x-fake-delay-ms"] || delays.shift() || 0);
      if (delay) await sleep(delay);
      const status = Number(req.headers["x-fake-status"] || 200);
      let answer;
      if (req.url.endsWith("/chat/completions")) {
        answer = {
          id: `chatcmpl-${n}`,
          object: "chat.completion",
          created: 1700000000,
          model: "fake-model",
          choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", content: `generation ${n}` } }],
          usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 },
        };
      } else {
        answer = { id: `eff_${n}`, object: "effect", n, path: req.url, idempotency_key: req.headers["idempotency-key"] ?? null };
      }
      res.writeHead(status, { "Content-Type": "application/json", "Request-Id": `req_${n}` });
      res.end(JSON.stringify(answer));
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${server.address().port}`;
  return {
    url,
    effects,
    get count() {
      return effects.length;
    },
    /** Delays (ms) for the next effects, for callers that cannot set headers. */
    queueDelays(...ms) {
      delays.push(...ms);
    },
    /** One effect: what an agent's own SDK call to the provider would do. */
    async effect(what, extra = {}) {
      const r = await fetch(`${url}/v1/effects`, {
        method: "POST",
        headers: { "Content-Type": "application/json", ...extra },
        body: JSON.stringify(what),
      });
      return r.json();
    },
    close() {
      server.closeAllConnections?.();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

/** Runs `node FILE ARGS…` and resolves with the first stdout line matching re, leaving the
 * child running (the caller kills it). */
export function spawnNode(file, args, env = {}) {
  const child = spawn(process.execPath, [file, ...args], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } });
  let out = "";
  let err = "";
  const waiters = [];
  child.stdout.on("data", (d) => {
    out += d;
    for (const w of [...waiters]) {
      const m = out.match(w.re);
      if (m) {
        waiters.splice(waiters.indexOf(w), 1);
        w.resolve(m);
      }
    }
  });
  child.stderr.on("data", (d) => (err += d));
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  return {
    child,
    exited,
    get stdout() {
      return out;
    },
    get stderr() {
      return err;
    },
    waitFor(re, timeoutMs = 15000) {
      const m = out.match(re);
      if (m) return Promise.resolve(m);
      return new Promise((resolve, reject) => {
        const t = setTimeout(() => reject(new Error(`no ${re} from ${file} within ${timeoutMs} ms; stdout: ${out} stderr: ${err}`)), timeoutMs);
        waiters.push({ re, resolve: (m) => (clearTimeout(t), resolve(m)) });
        exited.then((e) => {
          clearTimeout(t);
          reject(new Error(`${file} exited ${JSON.stringify(e)} before ${re}; stdout: ${out} stderr: ${err}`));
        });
      });
    },
    async kill() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      return exited;
    },
  };
}

/**
 * The usual fixture of a test file: a counting provider and a gateway, started before its
 * tests and stopped after them. config: startOnce's options, or a function of the provider
 * that returns them; token: the Once client's. assign is given {gw, provider, once}.
 */
export function withGateway(config, assign, token) {
  let env = {};
  before(async () => {
    const provider = await startProvider();
    env.provider = provider;
    env.gw = await startOnce(typeof config === "function" ? config(provider) : config);
    env.once = new Once({ url: env.gw.url, token });
    assign(env);
  });
  after(async () => {
    await env.gw?.stop();
    await env.provider?.close();
    dropPgSchemas();
  });
}

/** Runs fixtures/adapter_child.mjs (the framework's tool call in a process of its own) and
 * SIGKILLs it between its effect and the effect's completion. */
export async function killAfterEffect(adapter, gw, provider, runId) {
  const child = spawnNode(path.join(HERE, "fixtures/adapter_child.mjs"), [adapter, gw.url, provider.url, runId]);
  await child.waitFor(/effect-done/);
  await child.kill();
}
