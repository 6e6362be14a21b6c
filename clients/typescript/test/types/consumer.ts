// consumer.ts — not run: compiled with tsc --noEmit by `npm test`, through the package's own
// name and exports (@once/client, /ai, /agents, /langgraph, /mcp), as an agent imports it.
import { Once, intentKey, NotDone, InFlight, OutcomeUnknown, LimitExceeded, proxyHeaders } from "@once/client";
import { onceTools } from "@once/client/ai";
import { onceTool } from "@once/client/agents";
import { onceNode } from "@once/client/langgraph";
import { callTool } from "@once/client/mcp";
import { tool, jsonSchema } from "ai";
import { z } from "zod";

const once = new Once({ url: "http://127.0.0.1:7600", token: "t" });
// What an agent writes, type-checked against the published declarations (npm test runs
// tsc on it): the generics of the adapters reach the tools' execute.
async function main(): Promise<void> {
  const r: { id: string } = await once.effect({ scope: "s", key: intentKey("run", "x", { a: 1 }), wait: 5 }, async ({ signal }) => {
    if (signal.aborted) throw new NotDone("no");
    return { id: "1" };
  });
  try { await once.effect({ scope: "s", key: "k" }, () => 1); } catch (e) {
    if (e instanceof InFlight) console.log(e.leaseExpiresAt, e.record);
    if (e instanceof OutcomeUnknown) console.log(e.state);
    if (e instanceof LimitExceeded) console.log(e.retryAfter);
  }
  const tools = onceTools(once, { send: tool({ description: "d", inputSchema: jsonSchema<{ to: string }>({ type: "object" }), execute: async ({ to }) => ({ to }) }) }, { scope: "s", runId: "r" });
  const t = onceTool(once, { name: "n", description: "d", parameters: z.object({ a: z.string() }), execute: async ({ a }) => a.toUpperCase() }, { scope: "s", runId: "r" });
  const node = onceNode(once, "n", async (s: { x: number }) => ({ y: s.x }), { scope: "s" });
  console.log(r.id, tools, t, node, proxyHeaders("k"), callTool);
}
main();
