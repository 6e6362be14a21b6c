// The upstream MCP server of once's MCP gateway tests (issue 17, docs/mcp.md), built with the
// official @modelcontextprotocol/sdk `McpServer` — a real server, not an imitation — so the
// tests see exactly what an MCP server written with the SDK sends: JSON or SSE answers,
// sessions, progress notifications, tool errors as isError results.
//
// Every effect appends one JSON line to --effects FILE, so a test counts effects (the yes/no
// answer to "did it happen exactly once?") even across processes and restarts.
//
//   node mcp_server.mjs --http [--json] [--port N] [--effects F] [--calls F] [--headers-log F]
//       Streamable HTTP at http://127.0.0.1:PORT/mcp (port 0 = any); prints "listening PORT".
//       Stateful: one transport + McpServer per session (Mcp-Session-Id), POST/GET/DELETE as
//       in the SDK's simpleStreamableHttp example. --json: enableJsonResponse (answers are
//       application/json rather than text/event-stream; no progress can be streamed).
//   node mcp_server.mjs --stdio [--effects F] [--calls F] [--init-delay-ms N] [--pid-file F] [--linger]
//       One McpServer on stdin/stdout (StdioServerTransport); diagnostics go to stderr.
//       --init-delay-ms N  answers initialize N ms late (a server slow to start: the tests of
//                          once's readiness need the window to be wide, not luck)
//       --pid-file F       writes its pid to F (replaced) when it starts
//       --linger           keeps running when its stdin ends, as a server with work of its own
//                          does; only a signal ends it (the tests of orphaned servers)
//
//   --effects F      one line per effect: {tool, order_id, args, n, run, pid, session, headers, t}
//   --calls F        one line per tools/call handled, effect or not (lookup included)
//   --headers-log F  (--http) one line per HTTP request: {method, path, session, headers, body, t}
//
// Tools (order_id is a string everywhere):
//   charge {order_id, amount}  effect; "charged ORDER AMOUNT" + "effect N RUN", structuredContent
//   lookup {order_id}          readOnlyHint: true; never an effect line
//   refund {order_id}          destructiveHint: true; effect
//   note   {order_id, text}    destructiveHint: false; effect (passes `approve = destructive`)
//   slow   {order_id, steps}   `steps` progress notifications ~100 ms apart, then the effect
//   charge_then_die {order_id} appends the effect, then process.exit(1) before answering —
//                              but only on the first effect for this order in the effects file:
//                              a second call (a gateway that re-sent it) is answered normally
//                              and leaves a second effect line, so re-sending is seen.
//   hang   {order_id}          appends the effect and never answers
//   fail   {order_id}          effect, then a result with isError: true ("card declined")
//   needs_consent {order_id}   first call per order in this process: a JSON-RPC error
//                              (UrlElicitationRequired, -32042) and no effect; later calls: effect
//   add_tool {name, readonly}  registers tool NAME in every session (tools/list_changed is sent);
//                              NAME {order_id} is an effect unless readonly (readOnlyHint: true)
//   reject {order_id}          answered with a JSON-RPC error -32602 "order ORDER is locked", no
//                              effect. McpServer turns every error of a tool (unknown tool, invalid
//                              arguments included) into an isError result, except
//                              UrlElicitationRequired; a server on the SDK's low-level Server
//                              (setRequestHandler, throw McpError) answers like this. So the
//                              tools/call is intercepted at the transport (its public onmessage/send).
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import { z } from 'zod';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { createMcpExpressApp } from '@modelcontextprotocol/sdk/server/express.js';
import { isInitializeRequest, UrlElicitationRequiredError } from '@modelcontextprotocol/sdk/types.js';

const argv = process.argv.slice(2);
function opt(name, dflt) {
    const i = argv.indexOf(name);
    return i >= 0 && i + 1 < argv.length ? argv[i + 1] : dflt;
}
const mode = argv.includes('--stdio') ? 'stdio' : argv.includes('--http') ? 'http' : null;
if (!mode) {
    process.stderr.write('usage: mcp_server.mjs --http [--json] [--port N] | --stdio'
        + '  [--effects F] [--calls F] [--headers-log F]\n');
    process.exit(2);
}
const jsonResponse = argv.includes('--json');
const port = Number(opt('--port', '0'));
const effectsFile = opt('--effects', null);
const callsFile = opt('--calls', null);
const headersLog = opt('--headers-log', null);
const initDelayMs = Number(opt('--init-delay-ms', '0'));
const pidFile = opt('--pid-file', null);
const linger = argv.includes('--linger');
const log = (...a) => process.stderr.write(`mcp_server[${process.pid}]: ${a.join(' ')}\n`);

let effectCount = 0;   // effects performed by this process
let readCount = 0;     // read-only calls answered by this process
const consentAsked = new Set();
const extraTools = new Map();   // name -> {readonly}, added by add_tool; shared by every session
const servers = new Set();      // live McpServer of every session

function appendLine(file, obj) {
    if (file) fs.appendFileSync(file, JSON.stringify(obj) + '\n');
}

function effectsFor(order_id) {
    if (!effectsFile || !fs.existsSync(effectsFile)) return [];
    return fs.readFileSync(effectsFile, 'utf8').split('\n').filter(Boolean)
        .map(l => JSON.parse(l)).filter(e => e.order_id === order_id);
}

function context(extra) {
    return {
        pid: process.pid,
        session: extra?.sessionId ?? null,
        headers: extra?.requestInfo?.headers ?? null,
        t: Date.now() / 1000
    };
}

function effect(tool, args, extra) {
    effectCount += 1;
    const e = { tool, order_id: args.order_id, args, n: effectCount, run: randomUUID(), ...context(extra) };
    appendLine(effectsFile, e);
    return e;
}

function called(tool, args, extra) {
    appendLine(callsFile, { tool, order_id: args?.order_id, args, ...context(extra) });
}

const text = t => ({ type: 'text', text: t });
const sleep = ms => new Promise(r => setTimeout(r, ms));

function registerExtraTool(server, name, readonly) {
    server.registerTool(name, {
        description: `${readonly ? 'Reads' : 'Acts on'} an order: ${name} (added by add_tool)`,
        inputSchema: { order_id: z.string() },
        annotations: readonly ? { readOnlyHint: true } : { destructiveHint: false }
    }, async (args, extra) => {
        called(name, args, extra);
        if (readonly) {
            readCount += 1;
            return { content: [text(`${name} ${args.order_id} read #${readCount}`)] };
        }
        const e = effect(name, args, extra);
        return { content: [text(`${name} ${args.order_id}`), text(`effect ${e.n} ${e.run}`)] };
    });
}

function makeServer() {
    const server = new McpServer({ name: 'once-test-upstream', version: '1.0.0' },
        { capabilities: { tools: { listChanged: true } } });

    server.registerTool('charge', {
        description: 'Charges an order (an effect: money moves)',
        inputSchema: { order_id: z.string(), amount: z.number() },
        outputSchema: { order_id: z.string(), amount: z.number(), n: z.number(), run: z.string() },
        annotations: { idempotentHint: false, openWorldHint: true }
    }, async (args, extra) => {
        called('charge', args, extra);
        const e = effect('charge', args, extra);
        return {
            content: [text(`charged ${args.order_id} ${args.amount}`), text(`effect ${e.n} ${e.run}`)],
            structuredContent: { order_id: args.order_id, amount: args.amount, n: e.n, run: e.run }
        };
    });

    server.registerTool('lookup', {
        description: 'Looks an order up (read-only)',
        inputSchema: { order_id: z.string() },
        annotations: { readOnlyHint: true }
    }, async (args, extra) => {
        called('lookup', args, extra);
        readCount += 1;
        const n = effectsFor(args.order_id).length;
        return { content: [text(`order ${args.order_id}: ${n} effects; read #${readCount}`)] };
    });

    server.registerTool('refund', {
        description: 'Refunds an order',
        inputSchema: { order_id: z.string() },
        annotations: { destructiveHint: true }
    }, async (args, extra) => {
        called('refund', args, extra);
        const e = effect('refund', args, extra);
        return { content: [text(`refunded ${args.order_id}`), text(`effect ${e.n} ${e.run}`)] };
    });

    server.registerTool('note', {
        description: 'Adds a note to an order (not destructive)',
        inputSchema: { order_id: z.string(), text: z.string() },
        annotations: { destructiveHint: false }
    }, async (args, extra) => {
        called('note', args, extra);
        const e = effect('note', args, extra);
        return { content: [text(`noted ${args.order_id}: ${args.text}`), text(`effect ${e.n} ${e.run}`)] };
    });

    server.registerTool('slow', {
        description: 'Works in steps, reporting progress, then has its effect',
        inputSchema: { order_id: z.string(), steps: z.number().int().min(0).max(1000) }
    }, async (args, extra) => {
        called('slow', args, extra);
        const token = extra._meta?.progressToken;
        for (let i = 1; i <= args.steps; i++) {
            if (token !== undefined) {
                try {
                    await extra.sendNotification({
                        method: 'notifications/progress',
                        params: {
                            progressToken: token, progress: i, total: args.steps, message: `step ${i}/${args.steps}`
                        }
                    });
                } catch (err) {
                    // The stream to the caller is gone; the work goes on, as real work does.
                    log(`progress ${i} not sent: ${err}`);
                }
            }
            await sleep(100);
        }
        const e = effect('slow', args, extra);
        return {
            content: [text(`slow ${args.order_id} done after ${args.steps} steps`), text(`effect ${e.n} ${e.run}`)]
        };
    });

    server.registerTool('charge_then_die', {
        description: 'Charges, then the server dies before answering',
        inputSchema: { order_id: z.string() }
    }, async (args, extra) => {
        called('charge_then_die', args, extra);
        const before = effectsFor(args.order_id).length;
        const e = effect('charge_then_die', args, extra);
        if (before === 0 || !effectsFile) {
            log(`charge_then_die ${args.order_id}: effect written, dying`);
            process.exit(1);
        }
        return {
            content: [text(`charged ${args.order_id} AGAIN (effect ${before + 1})`), text(`effect ${e.n} ${e.run}`)]
        };
    });

    server.registerTool('hang', {
        description: 'Has its effect and never answers',
        inputSchema: { order_id: z.string() }
    }, async (args, extra) => {
        called('hang', args, extra);
        effect('hang', args, extra);
        return new Promise(() => {});
    });

    server.registerTool('fail', {
        description: 'Has its effect and reports a tool error',
        inputSchema: { order_id: z.string() }
    }, async (args, extra) => {
        called('fail', args, extra);
        const e = effect('fail', args, extra);
        return { content: [text(`card declined for ${args.order_id}`), text(`effect ${e.n} ${e.run}`)], isError: true };
    });

    server.registerTool('needs_consent', {
        description: 'The first call asks for consent at a URL (a JSON-RPC error, nothing done); later calls act',
        inputSchema: { order_id: z.string() }
    }, async (args, extra) => {
        called('needs_consent', args, extra);
        if (!consentAsked.has(args.order_id)) {
            consentAsked.add(args.order_id);
            throw new UrlElicitationRequiredError([{
                mode: 'url', elicitationId: `consent-${args.order_id}`,
                url: `https://example.invalid/consent/${encodeURIComponent(args.order_id)}`,
                message: 'The user must consent first'
            }]);
        }
        const e = effect('needs_consent', args, extra);
        return { content: [text(`consented action on ${args.order_id}`), text(`effect ${e.n} ${e.run}`)] };
    });

    server.registerTool('add_tool', {
        description: 'Adds a tool to this server (sends notifications/tools/list_changed)',
        inputSchema: { name: z.string().regex(/^[a-z_]{1,32}$/), readonly: z.boolean() }
    }, async (args, extra) => {
        called('add_tool', args, extra);
        if (!extraTools.has(args.name)) {
            extraTools.set(args.name, { readonly: args.readonly });
            for (const s of servers) {
                try {
                    registerExtraTool(s, args.name, args.readonly);
                } catch (err) {
                    log(`add_tool ${args.name}: ${err}`);
                }
            }
        }
        return { content: [text(`tool ${args.name} added (readonly ${args.readonly})`)] };
    });

    server.registerTool('reject', {
        description: 'Refuses with a JSON-RPC error (invalid params: the order is locked); nothing done',
        inputSchema: { order_id: z.string() }
    }, async () => {
        throw new Error('not reached: reject is answered at the transport');
    });

    for (const [name, t] of extraTools) registerExtraTool(server, name, t.readonly);
    servers.add(server);
    return server;
}

// The `reject` tool's JSON-RPC error, sent as a server on the low-level Server API would: a
// response with the request's id and an error member. Called after server.connect(transport).
function interceptReject(transport) {
    const deliver = transport.onmessage;
    transport.onmessage = (message, extra) => {
        if (message?.method === 'tools/call' && message.params?.name === 'reject' && message.id !== undefined) {
            const args = message.params.arguments ?? {};
            called('reject', args, { sessionId: transport.sessionId, requestInfo: extra?.requestInfo });
            transport.send({
                jsonrpc: '2.0', id: message.id,
                error: { code: -32602, message: `order ${args.order_id} is locked` }
            }, { relatedRequestId: message.id }).catch(err => log(`reject: ${err}`));
            return;
        }
        deliver?.(message, extra);
    };
}

// ------------------------------------------------------------------------------ stdio

// --init-delay-ms: initialize reaches the server that much later. Called after
// server.connect(transport), as interceptReject.
function delayInitialize(transport, ms) {
    const deliver = transport.onmessage;
    transport.onmessage = (message, extra) => {
        if (message?.method === 'initialize') {
            log(`initialize: answering in ${ms} ms`);
            setTimeout(() => deliver?.(message, extra), ms);
            return;
        }
        deliver?.(message, extra);
    };
}

if (mode === 'stdio') {
    if (pidFile) fs.writeFileSync(pidFile, `${process.pid}\n`);
    const server = makeServer();
    const transport = new StdioServerTransport();
    if (!linger) transport.onclose = () => process.exit(0);
    await server.connect(transport);
    interceptReject(transport);
    if (initDelayMs > 0) delayInitialize(transport, initDelayMs);
    log('stdio server ready');
    if (linger) {
        // Nothing to say any more, and nobody to say it to: a closed stdout or stderr
        // (EPIPE) must not end it either.
        process.stdout.on('error', () => {});
        process.stderr.on('error', () => {});
        setInterval(() => {}, 1 << 30);
    } else {
        process.stdin.on('end', () => process.exit(0));
    }
}

// ------------------------------------------------------------------------------ http

if (mode === 'http') {
    const sessions = new Map();   // Mcp-Session-Id -> {transport, server}
    const app = createMcpExpressApp({ host: '127.0.0.1' });

    app.use((req, res, next) => {
        appendLine(headersLog, {
            method: req.method, path: req.originalUrl, session: req.headers['mcp-session-id'] ?? null,
            headers: req.headers, body: req.body ?? null, t: Date.now() / 1000
        });
        next();
    });

    const rpcError = (res, status, code, message) =>
        res.status(status).json({ jsonrpc: '2.0', error: { code, message }, id: null });
    const notFound = res => rpcError(res, 404, -32001, 'Session not found');

    app.post('/mcp', async (req, res) => {
        const sid = req.headers['mcp-session-id'];
        try {
            const session = sid ? sessions.get(sid) : undefined;
            if (session) {
                await session.transport.handleRequest(req, res, req.body);
                return;
            }
            if (sid) {
                notFound(res);
                return;
            }
            if (!isInitializeRequest(req.body)) {
                rpcError(res, 400, -32000, 'Bad Request: No valid session ID provided');
                return;
            }
            const server = makeServer();
            const transport = new StreamableHTTPServerTransport({
                sessionIdGenerator: () => randomUUID(),
                enableJsonResponse: jsonResponse,
                onsessioninitialized: id => sessions.set(id, { transport, server })
            });
            transport.onclose = () => {
                if (transport.sessionId) sessions.delete(transport.sessionId);
                servers.delete(server);
            };
            await server.connect(transport);
            interceptReject(transport);
            await transport.handleRequest(req, res, req.body);
        } catch (err) {
            log(`POST /mcp: ${err?.stack || err}`);
            if (!res.headersSent) {
                rpcError(res, 500, -32603, 'Internal server error');
            }
        }
    });

    const bySession = async (req, res) => {
        const sid = req.headers['mcp-session-id'];
        if (!sid) {
            res.status(400).send('Missing session ID');
            return;
        }
        const session = sessions.get(sid);
        if (!session) {
            notFound(res);
            return;
        }
        try {
            await session.transport.handleRequest(req, res);
        } catch (err) {
            log(`${req.method} /mcp: ${err?.stack || err}`);
            if (!res.headersSent) res.status(500).send('Internal server error');
        }
    };
    app.get('/mcp', bySession);
    app.delete('/mcp', bySession);

    const httpServer = app.listen(port, '127.0.0.1', err => {
        if (err) {
            log(`listen: ${err}`);
            process.exit(1);
        }
        process.stdout.write(`listening ${httpServer.address().port}\n`);
    });
    httpServer.on('error', err => {
        log(`server error: ${err}`);
        process.exit(1);
    });
    const stop = () => {
        for (const { transport } of sessions.values()) transport.close().catch(() => {});
        httpServer.close();
        process.exit(0);
    };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
}
