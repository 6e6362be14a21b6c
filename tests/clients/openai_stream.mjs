// openai_stream.mjs — the official openai npm client (6.x) calling a chat
// completion with `stream: true` through once, for tests/integration/test_streaming.py.
//
//   node openai_stream.mjs BASE_URL API_KEY IDEMPOTENCY_KEY [abort-after-chunks]
//
// Prints one JSON line per chunk as it arrives ({"t": epoch ms, "content": "..."}),
// then {"done": true, "text": ..., "usage": ...} or {"error": ..., "status": ...}.
// openai 6.x sends nothing for its `idempotencyKey` request option (the client
// defines no idempotency header), so the key goes in `headers`.
import OpenAI from "openai";

const [baseURL, apiKey, key, abortAfter] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 30000 });
const controller = new AbortController();
const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");

try {
  const stream = await client.chat.completions.create(
    {
      model: "fake-model",
      messages: [{ role: "user", content: "plan the trip" }],
      stream: true,
      stream_options: { include_usage: true },
    },
    { headers: { "Idempotency-Key": key }, signal: controller.signal },
  );
  let text = "";
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    const content = chunk.choices?.[0]?.delta?.content ?? "";
    if (chunk.usage) usage = chunk.usage;
    text += content;
    chunks++;
    out({ t: Date.now(), content });
    if (abortAfter && chunks >= Number(abortAfter)) {
      controller.abort();
      out({ aborted: true, text });
      process.exit(0);
    }
  }
  out({ done: true, text, usage });
} catch (e) {
  out({ error: String(e?.message ?? e), status: e?.status ?? null, name: e?.constructor?.name ?? null });
}
