// The agent of once's MCP gateway tests (issue 17, docs/mcp.md): the official
// @modelcontextprotocol/sdk `Client` over `StreamableHTTPClientTransport` — the client real
// agents use, not an imitation — driven by a JSON script, so the Python tests (run as a
// subprocess) see exactly what an SDK agent sees through once: results with their _meta,
// progress notifications, errors.
//
//   node mcp_client.mjs URL [SCRIPT|-] [--token T] [--header 'Name: value']... [--sessions N]
//                       [--timeout-ms MS] [--deadline-ms MS] [--no-delete]
//                       [--oauth-client ID:SECRET [--oauth-scope S]]
//
// SCRIPT (a file, or stdin when '-' or absent) is a JSON array of steps:
//   {"op":"list"}                                  -> {"op":"list","tools":[...]}
//   {"op":"call","tool":T,"args":{..},"meta":{..},  -> {"op":"call","tool":T,"result":CallToolResult,
//    "progress":true,"timeout_ms":N,                    "progress":[{progress,total,message,t}],
//    "headers":{"Idempotency-Key":"k"}}                "t0":ms,"t1":ms}   or  {"op":"call","error":..,"code":..}
//   {"op":"sleep","ms":N}                          -> {"op":"sleep"}
//   {"op":"notifications"}                         -> {"op":"notifications","received":[...]}
//   {"op":"delete"}                                -> terminates the session (HTTP DELETE)
// "headers" of a step are added to that step's POSTs only (through the transport's fetch);
// --header lines go on every request (requestInit.headers), --token as Authorization: Bearer.
// --oauth-client makes the SDK's own ClientCredentialsProvider the transport's authProvider: on
// once's 401 the SDK reads the protected-resource metadata, finds the authorization server and
// gets a token for the resource with client credentials (docs/auth.md) — given nothing but the URL.
// Each session first prints {"op":"connect","session":ID,"protocol":V,"server":{..}} (or an
// error, and the process exits 2). Times (t, t0, t1) are epoch milliseconds.
//
// --sessions N opens N sessions (N clients, N Mcp-Session-Ids) and runs every step in all of
// them at the same moment (a barrier per step); each line then carries "s": the session index,
// and the text {s} anywhere in a step is replaced by it (e.g. an order id per session).
// At the end each session is terminated (DELETE) unless --no-delete, and a last line
// {"op":"end","errors":[...]} lists what the transport reported through onerror before that
// (a failed final DELETE included; the abort of the GET stream by close() is not an error).
// One JSON object per line on stdout; exit 0 when the script ran (step errors are data),
// 2 when a session could not connect, 3 when --deadline-ms (default 120000) passed.
import fs from 'node:fs';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ClientCredentialsProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js';
import {
    LoggingMessageNotificationSchema, ToolListChangedNotificationSchema
} from '@modelcontextprotocol/sdk/types.js';

const args = process.argv.slice(2);
const positional = [];
const headers = {};
let token = null, sessions = 1, timeoutMs = 60000, deadlineMs = 120000, del = true;
let oauthClient = null, oauthScope = undefined;
for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === '--token') token = args[++i];
    else if (a === '--header') {
        const h = args[++i];
        const c = h.indexOf(':');
        headers[h.slice(0, c).trim()] = h.slice(c + 1).trim();
    } else if (a === '--sessions') sessions = Number(args[++i]);
    else if (a === '--timeout-ms') timeoutMs = Number(args[++i]);
    else if (a === '--deadline-ms') deadlineMs = Number(args[++i]);
    else if (a === '--no-delete') del = false;
    else if (a === '--oauth-client') oauthClient = args[++i];
    else if (a === '--oauth-scope') oauthScope = args[++i];
    else positional.push(a);
}
if (positional.length < 1) {
    process.stderr.write('usage: mcp_client.mjs URL [SCRIPT|-] [--token T] [--header "N: v"] [--sessions N]\n');
    process.exit(64);
}
const url = new URL(positional[0]);
const fromFile = positional[1] && positional[1] !== '-';
const scriptSrc = fs.readFileSync(fromFile ? positional[1] : 0, 'utf8');
const script = JSON.parse(scriptSrc || '[]');
if (token) headers.Authorization = `Bearer ${token}`;

const out = obj => process.stdout.write(JSON.stringify(obj) + '\n');
const errors = [];
const errText = e => (e && (e.message || String(e))) || 'error';

setTimeout(() => {
    out({ op: 'deadline', ms: deadlineMs });
    process.exit(3);
}, deadlineMs).unref();

async function open(index) {
    const session = { index, stepHeaders: null, notifications: [] };
    const fetchWithStepHeaders = (input, init = {}) => {
        if (session.stepHeaders && (init.method || 'GET') === 'POST') {
            const h = new Headers(init.headers);
            for (const [k, v] of Object.entries(session.stepHeaders)) h.set(k, v);
            init = { ...init, headers: h };
        }
        return fetch(input, init);
    };
    const authProvider = oauthClient ? new ClientCredentialsProvider({
        clientId: oauthClient.slice(0, oauthClient.indexOf(':')),
        clientSecret: oauthClient.slice(oauthClient.indexOf(':') + 1),
        scope: oauthScope
    }) : undefined;
    session.transport = new StreamableHTTPClientTransport(url, {
        requestInit: { headers },
        fetch: fetchWithStepHeaders,
        authProvider
    });
    session.client = new Client({ name: 'once-tests-agent', version: '1.0.0' }, { capabilities: {} });
    // what the transport reports before the end (closing aborts the GET stream: not an error)
    session.client.onerror = e => {
        if (!session.closing) errors.push({ s: index, error: errText(e) });
    };
    session.client.setNotificationHandler(ToolListChangedNotificationSchema, n => {
        session.notifications.push({ method: n.method, t: Date.now() });
    });
    session.client.setNotificationHandler(LoggingMessageNotificationSchema, n => {
        session.notifications.push({ method: n.method, params: n.params, t: Date.now() });
    });
    await session.client.connect(session.transport);
    return session;
}

async function step(session, st) {
    const tag = sessions > 1 ? { s: session.index } : {};
    switch (st.op) {
        case 'list': {
            const r = await session.client.listTools();
            return { op: 'list', ...tag, tools: r.tools };
        }
        case 'call': {
            const progress = [];
            const params = { name: st.tool, arguments: st.args ?? {} };
            if (st.meta) params._meta = st.meta;
            const options = { timeout: st.timeout_ms ?? timeoutMs };
            if (st.progress) {
                options.onprogress = p => progress.push({ ...p, t: Date.now() });
                options.resetTimeoutOnProgress = true;
            }
            session.stepHeaders = st.headers ?? null;
            const t0 = Date.now();
            try {
                const result = await session.client.callTool(params, undefined, options);
                return { op: 'call', ...tag, tool: st.tool, result, progress, t0, t1: Date.now() };
            } catch (e) {
                return {
                    op: 'call', ...tag, tool: st.tool, error: errText(e), code: e?.code ?? null, data: e?.data ?? null,
                    progress, t0, t1: Date.now()
                };
            } finally {
                session.stepHeaders = null;
            }
        }
        case 'sleep':
            await new Promise(r => setTimeout(r, st.ms ?? 0));
            return { op: 'sleep', ...tag };
        case 'notifications':
            return { op: 'notifications', ...tag, received: session.notifications };
        case 'delete':
            session.closing = true;   // the session ends here: its GET stream ending is no error
            try {
                await session.transport.terminateSession();
                return { op: 'delete', ...tag, ok: true };
            } catch (e) {
                return { op: 'delete', ...tag, ok: false, error: errText(e) };
            }
        default:
            return { op: st.op, ...tag, error: `unknown op ${st.op}` };
    }
}

const opened = await Promise.all(Array.from({ length: sessions }, (_, i) => open(i).then(
    s => ({ s }), e => ({ e, i }))));
let failed = false;
for (const o of opened) {
    const tag = sessions > 1 ? { s: o.s ? o.s.index : o.i } : {};
    if (o.e) {
        failed = true;
        out({ op: 'connect', ...tag, error: errText(o.e), code: o.e?.code ?? null });
    } else {
        out({ op: 'connect', ...tag, session: o.s.transport.sessionId ?? null,
              protocol: o.s.transport.protocolVersion ?? null, server: o.s.client.getServerVersion() ?? null });
    }
}
if (failed) {
    out({ op: 'end', errors });
    process.exit(2);
}
const all = opened.map(o => o.s);
for (const st of script) {
    const results = await Promise.all(all.map(s => {
        const mine = sessions > 1 ? JSON.parse(JSON.stringify(st).replaceAll('{s}', String(s.index))) : st;
        return step(s, mine).catch(e => ({ op: st.op, s: s.index, error: errText(e) }));
    }));
    for (const r of results) out(r);
}
for (const s of all) {
    s.closing = true;
    if (del && s.transport.sessionId) {
        try {
            await s.transport.terminateSession();
        } catch (e) {
            errors.push({ s: s.index, error: `DELETE: ${errText(e)}` });
        }
    }
    await s.client.close().catch(() => {});
}
out({ op: 'end', errors });
process.exit(0);
