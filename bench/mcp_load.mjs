// bench/mcp_load.mjs — the load driver of bench/mcp.sh: C sessions of the official MCP
// TypeScript SDK client (@modelcontextprotocol/sdk, from tests/clients/node_modules: run
// `npm ci` there first), each calling one tool back to back, bounded in time and in count.
//
//   node bench/mcp_load.mjs --url URL --mode new|replay|read|prime|add-tool [options]
//
// Modes (tools of tests/clients/mcp_server.mjs):
//   new       charge {order_id: TAG-SESSION-I, amount: 1}: distinct arguments every call, so
//             through once every call is a new ledger key (and one effect at the server)
//   replay    charge {order_id: TAG-replay, amount: 1}, the same arguments every call
//   prime     one call of the replay run's charge (its first, recorded call); then exits
//   read      peek {order_id: TAG}: a read-only tool (readOnlyHint: true), passed through
//   add-tool  add_tool {name: peek, readonly: true} (made once, direct to the server)
// Options:
//   --sessions C [8]      client sessions (Client + StreamableHTTPClientTransport each)
//   --seconds D [10]      measured duration;  --warmup W [1]: seconds of calls before it, not measured
//   --max-calls N [200000] calls in all (warm-up included); the run stops at whichever comes first
//   --expect OUTCOME      every result's _meta["once/outcome"] must be OUTCOME (`none`: absent)
//   --tag T               prefix of the order ids (unique per run)
//   --timeout-ms [30000]  of one call (the SDK's request timeout); --deadline-ms [120000] of the whole run
//
// Prints one line, `result key=value …`: calls (measured), rate (measured calls per second
// of the measured window), p50/p99/max (ms, measured calls), ok (every call that returned a
// valid result, warm-up included), bad (a result with the wrong outcome or isError), errors
// (thrown: timeouts, transport errors), cpu_ms (this process, user + system, whole run) and
// outcomes (counts by _meta["once/outcome"], all calls). Samples of errors go to stderr.
// Exit status: 0, or 1 when a call failed or answered wrongly, 2 when a session did not connect,
// 3 when --deadline-ms passed.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { performance } from 'node:perf_hooks';

const here = path.dirname(fileURLToPath(import.meta.url));
const clients = path.resolve(here, '../tests/clients');
// The SDK's package root, looked up along tests/clients' node_modules path as require does
// (its exports hide package.json); its ESM build is imported.
const sdkRoot = (createRequire(path.join(clients, 'package.json')).resolve.paths('@modelcontextprotocol/sdk') ?? [])
    .map(d => path.join(d, '@modelcontextprotocol/sdk')).find(d => fs.existsSync(path.join(d, 'dist/esm/client/index.js')));
if (!sdkRoot) {
    process.stderr.write(`bench/mcp_load.mjs: @modelcontextprotocol/sdk is not installed in ${clients} (cd tests/clients && npm ci)\n`);
    process.exit(2);
}
const sdk = p => import(pathToFileURL(path.join(sdkRoot, 'dist/esm', p)).href);
const { Client } = await sdk('client/index.js');
const { StreamableHTTPClientTransport } = await sdk('client/streamableHttp.js');

const argv = process.argv.slice(2);
function opt(name, dflt) {
    const i = argv.indexOf(name);
    return i >= 0 && i + 1 < argv.length ? argv[i + 1] : dflt;
}
const url = new URL(opt('--url', ''));
const mode = opt('--mode', 'new');
const nsessions = Number(opt('--sessions', '8'));
const seconds = Number(opt('--seconds', '10'));
const warmup = Number(opt('--warmup', '1'));
const maxCalls = Number(opt('--max-calls', '200000'));
const expect = opt('--expect', null);
const tag = opt('--tag', `t${Date.now()}`);
const timeoutMs = Number(opt('--timeout-ms', '30000'));
const deadlineMs = Number(opt('--deadline-ms', '120000'));
if (!['new', 'replay', 'read', 'prime', 'add-tool'].includes(mode) || !(nsessions >= 1) || !(seconds >= 0) ||
    !(warmup >= 0) || !(maxCalls >= 1)) {
    process.stderr.write('usage: mcp_load.mjs --url URL --mode new|replay|read|prime|add-tool [--sessions C] [--seconds D] [--warmup W] [--max-calls N] [--expect OUTCOME] [--tag T]\n');
    process.exit(64);
}

const cpu0 = process.cpuUsage();
setTimeout(() => {
    process.stdout.write(`result deadline=${deadlineMs}\n`);
    process.exit(3);
}, deadlineMs).unref();

const errText = e => (e && (e.message || String(e))) || 'error';
const samples = [];
const sample = s => { if (samples.length < 5) samples.push(s); };

async function open(i) {
    const transport = new StreamableHTTPClientTransport(url);
    const client = new Client({ name: `once-bench-${i}`, version: '1.0.0' }, { capabilities: {} });
    client.onerror = e => sample(`session ${i}: ${errText(e)}`);
    await client.connect(transport);
    await client.listTools(); // as an agent does; the SDK then checks structuredContent against outputSchema
    return { i, client, transport, n: 0 };
}

function params(s) {
    switch (mode) {
        case 'new': return { name: 'charge', arguments: { order_id: `${tag}-${s.i}-${s.n}`, amount: 1 } };
        case 'replay': case 'prime': return { name: 'charge', arguments: { order_id: `${tag}-replay`, amount: 1 } };
        case 'read': return { name: 'peek', arguments: { order_id: tag } };
        case 'add-tool': return { name: 'add_tool', arguments: { name: 'peek', readonly: true } };
    }
}

const one = ['prime', 'add-tool'].includes(mode);
let sessions;
try {
    sessions = await Promise.all(Array.from({ length: one ? 1 : nsessions }, (_, i) => open(i)));
} catch (e) {
    process.stdout.write(`result connect_error=${JSON.stringify(errText(e))}\n`);
    process.exit(2);
}

const outcomes = {};
const lat = [];
let started = 0, ok = 0, bad = 0, errors = 0, measured = 0, tLast = 0;
const t0 = performance.now();
const tMeasure = one ? t0 : t0 + warmup * 1000;
const tEnd = one ? Infinity : tMeasure + seconds * 1000;

async function loop(s) {
    while (started < (one ? 1 : maxCalls) && performance.now() < tEnd) {
        started++;
        const p = params(s);
        s.n++;
        const a = performance.now();
        try {
            const r = await s.client.callTool(p, undefined, { timeout: timeoutMs });
            const b = performance.now();
            const o = r?._meta?.['once/outcome'] ?? 'none';
            outcomes[o] = (outcomes[o] ?? 0) + 1;
            if (r?.isError || (expect && o !== expect)) {
                bad++;
                sample(`${p.name} ${JSON.stringify(p.arguments)}: outcome ${o}, isError ${!!r?.isError}: ${JSON.stringify(r?.content ?? null).slice(0, 200)}`);
            } else {
                ok++;
            }
            if (a >= tMeasure) {
                measured++;
                lat.push(b - a);
                tLast = Math.max(tLast, b);
            }
        } catch (e) {
            errors++;
            sample(`${p.name} ${JSON.stringify(p.arguments)}: ${errText(e)}`);
        }
    }
}
await Promise.all(sessions.map(loop));
const cpu = process.cpuUsage(cpu0);

for (const s of sessions) {
    try {
        await s.transport.terminateSession();
    } catch (e) {
        sample(`session ${s.i} DELETE: ${errText(e)}`);
    }
    await s.client.close().catch(() => {});
}

lat.sort((x, y) => x - y);
const pct = q => (lat.length ? lat[Math.min(lat.length - 1, Math.floor(q * lat.length))] : 0);
const window = tLast > tMeasure ? (tLast - tMeasure) / 1000 : 0;
const f = x => x.toFixed(3);
process.stdout.write(`result calls=${measured} rate=${window > 0 ? (measured / window).toFixed(1) : 0} ` +
    `p50=${f(pct(0.5))} p99=${f(pct(0.99))} max=${f(lat.length ? lat[lat.length - 1] : 0)} ` +
    `ok=${ok} bad=${bad} errors=${errors} started=${started} window=${window.toFixed(3)} ` +
    `cpu_ms=${((cpu.user + cpu.system) / 1000).toFixed(0)} ` +
    `outcomes=${Object.entries(outcomes).map(([k, v]) => `${k}:${v}`).join(',') || '-'}\n`);
for (const s of samples) process.stderr.write(`bench/mcp_load.mjs: ${s}\n`);
process.exit(bad || errors ? 1 : 0);
