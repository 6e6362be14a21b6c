// mcp.test.mjs — @once/client/mcp: the MCP SDK's Client calling tools through once's MCP
// gateway (/v1/mcp/NAME) with _meta.idempotencyKey = intentKey(run, tool, arguments). The
// MCP server is the SDK's own McpServer (Streamable HTTP, in this process), counting the
// charges it makes. A call the client timed out, then retries: one charge, the same result.
// An agent process killed mid-call, then retries from another: one charge.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import path from "node:path";
import { z } from "zod";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { intentKey } from "../dist/index.js";
import { callTool, mcpOutcome, mcpKey } from "../dist/mcp.js";
import { startOnce, spawnNode, dropPgSchemas, HERE, sleep } from "./harness.mjs";

let gw, server, client;
const charges = [];
let delays = [];

function mcpServer() {
  const s = new McpServer({ name: "payments", version: "1.0.0" });
  s.registerTool(
    "charge",
    { description: "Charge an order", inputSchema: { order_id: z.string(), amount: z.number() } },
    async ({ order_id, amount }) => {
      charges.push({ order_id, amount });
      const n = charges.length;
      const delay = delays.shift();
      if (delay) await sleep(delay);
      return { content: [{ type: "text", text: `charged ${order_id} ${amount} (charge ${n})` }] };
    },
  );
  return s;
}

before(async () => {
  server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const body = chunks.length ? JSON.parse(Buffer.concat(chunks).toString("utf8")) : undefined;
    // Stateless: one server and transport per request, as the SDK's stateless example.
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    const s = mcpServer();
    res.on("close", () => {
      transport.close();
      s.close();
    });
    await s.connect(transport);
    await transport.handleRequest(req, res, body);
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  gw = await startOnce({ mcp: { pay: { url: `http://127.0.0.1:${server.address().port}/mcp`, wait: "30s" } } });
  client = new Client({ name: "agent", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(`${gw.url}/v1/mcp/pay`)));
});

after(async () => {
  await client?.close();
  await gw?.stop();
  server?.closeAllConnections();
  await new Promise((r) => server?.close(r));
  dropPgSchemas();
});

test("a call timed out by the client, then 3 retries: one charge, the same result", async () => {
  const args = { order_id: "A-1182", amount: 4200 };
  const before = charges.length;
  delays = [700];
  await assert.rejects(callTool(client, { name: "charge", arguments: args }, { runId: "run-mcp-1" }, undefined, { timeout: 200 }), /timed out|timeout/i);
  const texts = [];
  for (let i = 0; i < 3; i++) {
    const r = await callTool(client, { name: "charge", arguments: { amount: 4200, order_id: "A-1182" } }, { runId: "run-mcp-1" });
    assert.equal(mcpOutcome(r), "replayed");
    texts.push(r.content[0].text);
  }
  assert.deepEqual(texts, Array(3).fill(`charged A-1182 4200 (charge ${before + 1})`));
  assert.equal(charges.length, before + 1);
  const key = intentKey("run-mcp-1", "charge", args);
  assert.equal(mcpKey("run-mcp-1", "charge", args), key);
  const rec = await gw.api("GET", `/v1/actions/pay/${encodeURIComponent(`charge:${key}`)}`);
  assert.equal(rec.status, 200);
  assert.equal(rec.body.state, "completed");
  // Another run is another intent.
  const other = await callTool(client, { name: "charge", arguments: args }, { runId: "run-mcp-2" });
  assert.equal(mcpOutcome(other), "completed");
  assert.equal(charges.length, before + 2);
  assert.throws(() => callTool(client, { name: "charge", arguments: args }, { runId: "" }), TypeError);
});

test("an agent killed in the middle of a call, then 3 retries from another process: one charge", async () => {
  const before = charges.length;
  delays = [600];
  const child = spawnNode(path.join(HERE, "fixtures/mcp_child.mjs"), [`${gw.url}/v1/mcp/pay`, "run-mcp-crash", "B-7"]);
  await child.waitFor(/connected/);
  while (charges.length === before) await sleep(10);
  await child.kill();
  for (let i = 0; i < 3; i++) {
    const r = await callTool(client, { name: "charge", arguments: { order_id: "B-7", amount: 4200 } }, { runId: "run-mcp-crash" });
    assert.equal(mcpOutcome(r), "replayed");
    assert.equal(r.content[0].text, `charged B-7 4200 (charge ${before + 1})`);
  }
  assert.equal(charges.length, before + 1);
});
