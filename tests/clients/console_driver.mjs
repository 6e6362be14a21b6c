// console_driver.mjs — drives the operator console (GET /console) in headless
// Chromium with puppeteer-core, for tests/integration/test_console.py.
//
//   node console_driver.mjs '{"url": "http://127.0.0.1:PORT", "scenario": "overview", ...}'
//
// Runs one scenario (below) in a fresh browser and prints one JSON object on
// stdout: {"ok": true, "result": {...}, "watch": {...}} or {"ok": false,
// "error": "...", "watch": {...}}. "watch" is what the page did, for the
// caller to assert on: every request's URL, console messages, uncaught page
// errors, Content-Security-Policy violations, dialogs (alert() and the
// like), cookies, localStorage. Every wait is bounded; the browser only
// talks to the gateway on 127.0.0.1.
import puppeteer from 'puppeteer-core';

const cfg = JSON.parse(process.argv[2] || '{}');
const CHROMIUM = cfg.chromium || '/usr/bin/chromium';
const WAIT_MS = cfg.wait_ms || 20000;       // one condition in the page
const TOTAL_MS = cfg.total_ms || 150000;    // the whole scenario
const origin = new URL(cfg.url).origin;
const refresh = cfg.refresh || 1;

const watch = {
  requests: [], console: [], page_errors: [], csp: [], dialogs: [], cookies: null, document_cookie: null,
  local_storage: null,
};
let browser = null;

function finish(out, code) {
  process.stdout.write(JSON.stringify(Object.assign(out, { watch })) + '\n');
  process.exit(code);
}

const guard = setTimeout(() => {
  finish({ ok: false, error: `scenario ${cfg.scenario} did not finish within ${TOTAL_MS} ms` }, 3);
}, TOTAL_MS);

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls fn in the page until it returns a true value (returned), or fails.
// (A poll from here, not waitForFunction: nothing is evaluated by the page's
// own means, so the page's CSP has nothing to object to.)
async function waitFor(page, what, fn, ...args) {
  const deadline = Date.now() + WAIT_MS;
  let last;
  for (;;) {
    last = await page.evaluate(fn, ...args);
    if (last) return last;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${WAIT_MS} ms (last: ${JSON.stringify(last)})`);
    await sleep(50);
  }
}

// ------------------------------------------------------------------ the page's state

function snapshotInPage() {
  const vis = (e) => Boolean(e) && !e.closest('[hidden]');
  const rows = (id) => Array.from(document.querySelectorAll(`#${id} tbody tr`))
    .filter((tr) => tr.dataset.scope !== undefined || tr.dataset.source !== undefined)
    .map((tr) => ({
      scope: tr.dataset.scope, key: tr.dataset.key, source: tr.dataset.source, event_id: tr.dataset.eventId,
      cells: Array.from(tr.cells).slice(0, -1).map((td) => td.textContent),
      buttons: Array.from(tr.querySelectorAll('button')).map((b) => b.textContent),
      inputs: Array.from(tr.querySelectorAll('input')).map((i) => ({
        name: i.name, label: i.labels && i.labels[0] ? i.labels[0].textContent : null })),
    }));
  const counts = {};
  for (const dd of document.querySelectorAll('#counts dd[data-count]')) counts[dd.dataset.count] = dd.textContent;
  const status = document.getElementById('status');
  return {
    signin: vis(document.getElementById('signin')),
    dashboard: vis(document.getElementById('dashboard')),
    refused: vis(document.getElementById('refused')) ? document.getElementById('refused').textContent : null,
    signout: vis(document.getElementById('signout')),
    status: status.textContent,
    status_role: status.getAttribute('role'),
    status_class: status.className,
    counts_text: document.getElementById('counts').textContent,
    counts,
    tables: { awaiting: rows('awaiting'), held: rows('held'), unknown: rows('unknown'), dead: rows('dead') },
    agents: Array.from(document.querySelectorAll('#agents tbody tr[data-agent]'))
      .map((tr) => ({ agent: tr.dataset.agent, cells: Array.from(tr.cells).map((td) => td.textContent) })),
    action_rows: document.querySelectorAll('tr[data-scope]').length,
    event_rows: document.querySelectorAll('tr[data-event-id]').length,
    visible_buttons: Array.from(document.querySelectorAll('button')).filter((b) => vis(b) && b.offsetParent !== null)
      .map((b) => b.textContent),
    images: document.querySelectorAll('img').length,
    session_keys: Object.keys(sessionStorage),
    body_text: document.body.innerText,
  };
}

const snapshot = (page) => page.evaluate(snapshotInPage);

// The input or button of a table's row with these data-* values (found in the
// page, so that keys full of quotes and brackets need no escaping in a selector).
async function inRow(page, table, attrs, pick) {
  const h = await page.evaluateHandle((table, attrs, pick) => {
    const tr = Array.from(document.querySelectorAll(`#${table} tbody tr`))
      .find((r) => Object.entries(attrs).every(([k, v]) => r.dataset[k] === v));
    if (!tr) return null;
    if (pick.button) return Array.from(tr.querySelectorAll('button')).find((b) => b.textContent === pick.button) || null;
    return tr.querySelector(`input[name="${pick.input}"]`);
  }, table, attrs, pick);
  const e = h.asElement();
  if (!e) throw new Error(`no ${JSON.stringify(pick)} in ${table} row ${JSON.stringify(attrs)}`);
  return e;
}

async function waitRow(page, table, attrs, present) {
  await waitFor(page, `${table} row ${JSON.stringify(attrs)} ${present ? 'shown' : 'gone'}`,
    (table, attrs, present) => {
      const tr = Array.from(document.querySelectorAll(`#${table} tbody tr`))
        .find((r) => Object.entries(attrs).every(([k, v]) => r.dataset[k] === v));
      return present ? Boolean(tr) : !tr;
    }, table, attrs, present);
}

// Clicks a row's button, waits until the row has left its table, returns the status line.
// With lingerMs, waits that long (several refreshes) after typing, and reports
// whether what was typed, and the focus, survived them.
async function clickAndWaitGone(page, table, attrs, button, inputs, lingerMs) {
  const typed = {};
  for (const [name, text] of Object.entries(inputs || {})) {
    const input = await inRow(page, table, attrs, { input: name });
    await input.type(text);
    if (lingerMs) {
      await sleep(lingerMs);
      typed[name] = await input.evaluate((i) => ({ value: i.value, focused: document.activeElement === i,
        connected: i.isConnected }));
    }
  }
  const b = await inRow(page, table, attrs, { button });
  await b.click();
  await waitRow(page, table, attrs, false);
  const status = await waitFor(page, 'status after the click', () => {
    const s = document.getElementById('status');
    return /done|failed/.test(s.textContent) ? { text: s.textContent, class: s.className } : null;
  });
  return Object.assign(status, { typed });
}

// ------------------------------------------------------------------ setup

async function open(viewport) {
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run', '--no-default-browser-check',
      '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-extensions',
      '--disable-features=Translate,MediaRouter,OptimizationHints,AutofillServerCommunication'],
    protocolTimeout: WAIT_MS * 2,
  });
  const page = await browser.newPage();
  page.setDefaultTimeout(WAIT_MS);
  await page.setViewport(viewport || { width: 1280, height: 800 });
  page.on('request', (r) => watch.requests.push(r.url()));
  page.on('console', (m) => watch.console.push({ type: m.type(), text: m.text(), url: (m.location() || {}).url || null }));
  page.on('pageerror', (e) => watch.page_errors.push(String(e && e.message ? e.message : e)));
  page.on('dialog', async (d) => { watch.dialogs.push(`${d.type()}: ${d.message()}`); await d.dismiss(); });
  // Violations of the page's CSP, reported by the browser itself (this runs
  // before the page's own script, through the debugger, not the page).
  await page.evaluateOnNewDocument(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation', (e) => {
      window.__csp.push(`${e.violatedDirective} blocked ${e.blockedURI || '(inline)'} at ${e.sourceFile}:${e.lineNumber}`);
    });
  });
  return page;
}

async function goto(page) {
  const r = await page.goto(`${origin}/console?refresh=${refresh}`, { waitUntil: 'load', timeout: WAIT_MS });
  if (!r || r.status() !== 200) throw new Error(`GET /console: ${r ? r.status() : 'no answer'}`);
  return { status: r.status(), csp: r.headers()['content-security-policy'] || null };
}

// Types the token into input[name=token] and submits: with Enter (keyboard)
// or the Sign in button. Waits for the dashboard, or the refusal.
async function signIn(page, token, keyboard) {
  await waitFor(page, 'the sign-in form', () => {
    const f = document.getElementById('signin');
    return f && !f.hidden;
  });
  const input = await page.$('input[name=token]');
  if (!input) throw new Error('no input[name=token]');
  await input.focus();
  if (token) await page.keyboard.type(token);
  if (keyboard) await page.keyboard.press('Enter');
  else await (await page.$('#signin button[type=submit]')).click();
  await waitFor(page, 'the dashboard or a refusal', () => {
    const d = document.getElementById('dashboard');
    const r = document.getElementById('refused');
    return (d && !d.hidden && document.querySelector('#counts dd')) || (r && !r.hidden) ||
      /refused/i.test(document.getElementById('status').textContent);
  });
}

async function collect(page) {
  try {
    watch.csp = await page.evaluate(() => window.__csp || []);
    watch.document_cookie = await page.evaluate(() => document.cookie);
    watch.local_storage = await page.evaluate(() => localStorage.length);
    const cookies = typeof browser.cookies === 'function' ? await browser.cookies() : await page.cookies();
    watch.cookies = cookies.map((c) => `${c.name}@${c.domain}`);
  } catch (e) {
    watch.collect_error = String(e);
  }
}

// ------------------------------------------------------------------ scenarios

const scenarios = {
  // Sign in with the keyboard, read everything, screenshot, keyboard focus,
  // phone viewport, sign out.
  async overview(page) {
    const out = {};
    out.page = await goto(page);
    out.initial = await snapshot(page);
    await signIn(page, cfg.token, true);
    await waitFor(page, 'every table drawn', () => ['awaiting', 'held', 'unknown', 'dead']
      .every((id) => document.querySelector(`#${id} tbody tr`)));
    if (cfg.wait_rows) {
      for (const [table, attrs] of cfg.wait_rows) await waitRow(page, table, attrs, true);
    }
    out.signed_in = await snapshot(page);
    if (cfg.screenshot) {
      await page.evaluate(() => { document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0); });
      await page.screenshot({ path: cfg.screenshot, type: 'png' });
      out.screenshot = cfg.screenshot;
    }
    // Keyboard: Tab reaches an Approve button; the focused button has a visible outline.
    await page.evaluate(() => { document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0); });
    let focus = null;
    for (let i = 0; i < 60; i++) {
      await page.keyboard.press('Tab');
      focus = await page.evaluate(() => {
        const e = document.activeElement;
        if (!e) return null;
        const cs = getComputedStyle(e);
        return { tag: e.tagName, text: e.textContent, name: e.getAttribute('name'),
          outline: `${cs.outlineStyle} ${cs.outlineWidth}`, focus_visible: e.matches(':focus-visible') };
      });
      if (focus && focus.tag === 'BUTTON' && focus.text === 'Approve') break;
    }
    out.keyboard_focus = focus;
    // A phone: reloaded (the token stays in this tab's sessionStorage), no sideways
    // scrolling of the page, every button on screen and the topmost element at its centre.
    await page.setViewport({ width: 390, height: 844, isMobile: true, hasTouch: true, deviceScaleFactor: 1 });
    await page.reload({ waitUntil: 'load', timeout: WAIT_MS });
    await waitFor(page, 'the dashboard after reload', () => {
      const d = document.getElementById('dashboard');
      return d && !d.hidden && document.querySelector('#dead tbody tr');
    });
    out.phone = await page.evaluate(async () => {
      const w = window.innerWidth;
      const res = { inner_width: w, doc_scroll_width: document.documentElement.scrollWidth,
        body_scroll_width: document.body.scrollWidth, buttons: 0, bad: [] };
      const buttons = Array.from(document.querySelectorAll('#dashboard button, #signout'));
      for (const b of buttons) {
        b.scrollIntoView({ block: 'center', inline: 'nearest' });
        await new Promise((r) => requestAnimationFrame(r));
        const r = b.getBoundingClientRect();
        const x = r.left + r.width / 2, y = r.top + r.height / 2;
        const top = document.elementFromPoint(x, y);
        res.buttons++;
        if (r.width < 24 || r.height < 24 || r.left < 0 || r.right > w || !(top === b || b.contains(top))) {
          res.bad.push({ text: b.textContent, left: r.left, right: r.right, width: r.width, height: r.height,
            top: top ? top.tagName : null });
        }
      }
      window.scrollTo(0, 0);
      return res;
    });
    if (cfg.phone_screenshot) await page.screenshot({ path: cfg.phone_screenshot, type: 'png' });
    out.phone_snapshot = await snapshot(page);
    // Sign out: the token leaves sessionStorage, the data leaves the page.
    await (await page.$('#signout')).click();
    await waitFor(page, 'the sign-in form after sign-out', () => !document.getElementById('signin').hidden);
    out.signed_out = await snapshot(page);
    return out;
  },

  // Held rows: "Mark completed" with a provider id, "Mark released".
  async resolve(page) {
    await goto(page);
    await signIn(page, cfg.token);
    const [c, r] = cfg.rows;
    await waitRow(page, 'held', c, true);
    await waitRow(page, 'held', r, true);
    const out = { before: await snapshot(page) };
    out.completed = await clickAndWaitGone(page, 'held', c, 'Mark completed', { provider_id: cfg.provider_id });
    out.released = await clickAndWaitGone(page, 'held', r, 'Mark released');
    out.after = await snapshot(page);
    return out;
  },

  // Awaiting rows: Approve (with a note), Deny (with a note).
  async decide(page) {
    await goto(page);
    await signIn(page, cfg.token);
    const [a, d] = cfg.rows;
    await waitRow(page, 'awaiting', a, true);
    await waitRow(page, 'awaiting', d, true);
    const out = { before: await snapshot(page) };
    out.approved = await clickAndWaitGone(page, 'awaiting', a, 'Approve', { note: cfg.approve_note },
      refresh * 2500);
    out.denied = await clickAndWaitGone(page, 'awaiting', d, 'Deny', { note: cfg.deny_note });
    out.after = await snapshot(page);
    return out;
  },

  // A dead event: Redeliver.
  async redeliver(page) {
    await goto(page);
    await signIn(page, cfg.token);
    await waitRow(page, 'dead', cfg.row, true);
    const out = { before: await snapshot(page) };
    out.redelivered = await clickAndWaitGone(page, 'dead', cfg.row, 'Redeliver');
    out.after = await snapshot(page);
    return out;
  },

  // A row made after the page loaded appears without a reload.
  async refresh(page) {
    await goto(page);
    await signIn(page, cfg.token);
    await waitFor(page, 'the awaiting table', () => document.querySelector('#awaiting tbody tr'));
    const out = { before: await snapshot(page) };
    const c = cfg.create;
    const t0 = Date.now();
    const r = await fetch(origin + c.path, { method: c.method, headers: c.headers, body: c.body });
    out.created_status = r.status;
    await r.text();
    await waitRow(page, c.table, c.row, true);
    out.appeared_after_ms = Date.now() - t0;
    out.navigations = watch.requests.filter((u) => new URL(u).pathname === '/console').length;
    out.after = await snapshot(page);
    return out;
  },

  // An agent's token: a clear refusal, no tables, no buttons; still so after refreshes.
  async agent(page) {
    await goto(page);
    await signIn(page, cfg.token);
    await waitFor(page, 'the refusal', () => !document.getElementById('refused').hidden);
    const out = { first: await snapshot(page) };
    const before = watch.requests.filter((u) => u.includes('/v1/events')).length;
    await sleep(refresh * 2500);
    out.events_calls_during_wait = watch.requests.filter((u) => u.includes('/v1/events')).length - before;
    out.later = await snapshot(page);
    return out;
  },

  // A decision someone else made first: the page's Approve gets 409, shown in the status area.
  async conflict(page) {
    await goto(page);
    await signIn(page, cfg.token);
    await waitRow(page, 'awaiting', cfg.row, true);
    const s = cfg.side;
    const r = await fetch(origin + s.path, { method: s.method, headers: s.headers, body: s.body });
    const out = { side_status: r.status };
    await r.text();
    await (await inRow(page, 'awaiting', cfg.row, { button: 'Approve' })).click();
    out.status = await waitFor(page, 'the error in the status area', () => {
      const st = document.getElementById('status');
      return /failed/.test(st.textContent) ? { text: st.textContent, class: st.className, role: st.getAttribute('role'),
        live: st.getAttribute('aria-live'), visible: st.offsetParent !== null && st.getBoundingClientRect().height > 0 } : null;
    });
    await waitRow(page, 'awaiting', cfg.row, false);
    out.after = await snapshot(page);
    return out;
  },

  // A token the gateway does not know: 401, back to the sign-in form, token forgotten.
  async badtoken(page) {
    await goto(page);
    await signIn(page, cfg.token);
    await waitFor(page, 'the sign-in form again', () => !document.getElementById('signin').hidden);
    return { snapshot: await snapshot(page) };
  },

  // Sign in (no tokens_file: an empty token) and read the page.
  async signin(page) {
    await goto(page);
    await signIn(page, cfg.token || '');
    await waitFor(page, 'every table drawn', () => ['awaiting', 'held', 'unknown', 'dead']
      .every((id) => document.querySelector(`#${id} tbody tr`)));
    return { snapshot: await snapshot(page) };
  },
};

// ------------------------------------------------------------------ main

try {
  const run = scenarios[cfg.scenario];
  if (!run) throw new Error(`no scenario ${cfg.scenario}`);
  const page = await open(cfg.viewport);
  let result;
  try {
    result = await run(page);
  } finally {
    await collect(page);
  }
  clearTimeout(guard);
  await browser.close();
  finish({ ok: true, result }, 0);
} catch (e) {
  clearTimeout(guard);
  if (browser) await browser.close().catch(() => {});
  finish({ ok: false, error: String(e && e.stack ? e.stack : e) }, 1);
}
