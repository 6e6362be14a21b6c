// once console: the operator's page (docs/console.md). Plain ES2020, no
// framework, no build step. Everything it shows comes from the gateway's own
// API with the operator's token as a bearer header (kept in sessionStorage,
// never a cookie, never localStorage). Keys, notes, errors and request bodies
// come from agents and senders: they are put into the page with textContent
// only, never parsed as HTML.
'use strict';

(() => {
  const TOKEN_KEY = 'once-console-token';
  const PAGE = 1000;            // one list page: the counts show "1000+" beyond it
  const SHOWN = 200;            // rows shown per table
  const TRAIL_LINES = 3;        // last lines of a record's trail shown
  const SUMMARY_MAX = 120;      // characters of a request summary / error / trail line
  const COUNTED = [
    ['awaiting_approval', 'Awaiting approval'],
    ['pending', 'Pending'],
    ['unknown', 'Unknown'],
    ['held', 'Held'],
    ['denied', 'Denied'],
  ];

  const params = new URLSearchParams(window.location.search);
  const refreshSeconds = (() => {
    const v = Number(params.get('refresh'));
    return Number.isFinite(v) && v > 0 ? Math.max(1, v) : 5;
  })();

  const $ = (id) => document.getElementById(id);
  const ui = {
    status: $('status'),
    signin: $('signin'),
    token: $('token'),
    signout: $('signout'),
    refused: $('refused'),
    dashboard: $('dashboard'),
    counts: $('counts'),
    info: $('refresh-info'),
    tables: { awaiting: $('awaiting'), held: $('held'), unknown: $('unknown'), dead: $('dead') },
    agents: $('agents'),
  };

  let timer = null;
  let running = false;          // a refresh is in flight
  let again = false;            // another was asked for meanwhile
  let generation = 0;           // bumped on sign-out: late answers are dropped
  let uid = 0;                  // ids for labels

  // ------------------------------------------------------------------ DOM helpers

  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === 'class') e.className = v;
        else if (k === 'text') e.textContent = v;
        else if (k === 'dataset') Object.assign(e.dataset, v);
        else if (k === 'on') for (const [ev, fn] of Object.entries(v)) e.addEventListener(ev, fn);
        else if (k in e && typeof v !== 'string') e[k] = v;
        else e.setAttribute(k, v === true ? '' : String(v));
      }
    }
    for (const c of children) {
      if (c === null || c === undefined || c === false) continue;
      e.append(typeof c === 'string' ? document.createTextNode(c) : c);
    }
    return e;
  }

  function truncate(s, n) {
    s = String(s);
    return s.length > n ? s.slice(0, n - 1) + '…' : s;
  }

  // A text cell: the value shortened, the whole of it in the tooltip.
  function textCell(value, cls) {
    const s = value === null || value === undefined || value === '' ? '—' : String(value);
    const td = el('td', { class: cls });
    td.textContent = truncate(s, SUMMARY_MAX);
    if (s.length > SUMMARY_MAX) td.title = s;
    return td;
  }

  function setStatus(text, kind) {
    ui.status.textContent = text || '';
    ui.status.className = 'status' + (kind ? ' ' + kind : '');
  }

  // ------------------------------------------------------------------ formatting

  function age(iso, now) {
    const t = Date.parse(iso);
    if (!Number.isFinite(t)) return '—';
    let s = Math.max(0, Math.floor((now - t) / 1000));
    const d = Math.floor(s / 86400); s -= d * 86400;
    const h = Math.floor(s / 3600); s -= h * 3600;
    const m = Math.floor(s / 60); s -= m * 60;
    if (d) return `${d}d ${h}h`;
    if (h) return `${h}h ${m}m`;
    if (m) return `${m}m ${s}s`;
    return `${s}s`;
  }

  function requestSummary(req) {
    if (!req) return '—';
    if (typeof req === 'object' && typeof req.method === 'string' && typeof req.target === 'string') {
      return `${req.method} ${req.target}`;
    }
    let s;
    try { s = JSON.stringify(req); } catch (e) { s = String(req); }
    return truncate(s, 80);
  }

  function trailCell(trail) {
    const td = el('td', { class: 'trail' });
    const lines = Array.isArray(trail) ? trail.slice(-TRAIL_LINES) : [];
    if (!lines.length) td.textContent = '—';
    for (const line of lines) {
      const s = String(line);
      const div = el('div', { text: truncate(s, SUMMARY_MAX) });
      if (s.length > SUMMARY_MAX) div.title = s;
      td.append(div);
    }
    return td;
  }

  // ------------------------------------------------------------------ the API

  class ApiError extends Error {
    constructor(status, code, detail) {
      super(detail || code || `HTTP ${status}`);
      this.status = status;
      this.code = code;
    }
  }

  function token() {
    return sessionStorage.getItem(TOKEN_KEY);
  }

  async function api(method, path, body) {
    const headers = { Accept: 'application/json' };
    const t = token();
    if (t) headers.Authorization = `Bearer ${t}`;
    const init = { method, headers, credentials: 'omit', cache: 'no-store', redirect: 'error' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path, init);
    } catch (e) {
      throw new ApiError(0, 'network', `the gateway did not answer (${e.message})`);
    }
    let data = null;
    try { data = await resp.json(); } catch (e) { data = null; }
    if (!resp.ok) {
      const d = data && typeof data === 'object' ? data : {};
      const detail = d.detail || d.title || resp.statusText;
      throw new ApiError(resp.status, d.code || null, `${resp.status}${d.code ? ' ' + d.code : ''}: ${detail}`);
    }
    return data;
  }

  const seg = (s) => encodeURIComponent(s);

  // A list read page by page up to PAGE items: {items, more}; more: there
  // are others beyond them (a page can stop early, so follow `next`).
  async function list(path, query) {
    const items = [];
    let after = null;
    for (let pages = 0; ; pages++) {
      const q = new URLSearchParams(query);
      q.set('limit', String(PAGE - items.length));
      if (after) q.set('after', after);
      const j = await api('GET', `${path}?${q}`);
      if (j && Array.isArray(j.items)) items.push(...j.items);
      after = j && typeof j.next === 'string' && j.next ? j.next : null;
      if (!after) return { items, more: false };
      if (items.length >= PAGE || pages >= 50) return { items, more: true };
    }
  }

  // ------------------------------------------------------------------ views

  function showSignin(message, kind) {
    stopTimer();
    ui.signin.hidden = false;
    ui.dashboard.hidden = true;
    ui.refused.hidden = true;
    ui.signout.hidden = true;
    ui.info.hidden = true;
    setStatus(message || '', kind);
    ui.token.focus();
  }

  function showRefused(text) {
    ui.signin.hidden = true;
    ui.dashboard.hidden = true;
    ui.refused.hidden = false;
    ui.refused.textContent = text;
    ui.signout.hidden = false;
    ui.info.hidden = true;
    clearTables();
  }

  function clearTables() {
    for (const t of Object.values(ui.tables)) t.replaceChildren();
    ui.agents.replaceChildren();
    ui.counts.replaceChildren();
  }

  function renderCounts(counts) {
    const items = [];
    for (const [state, label] of COUNTED) items.push([state, label, counts[state]]);
    items.push(['dead', 'Dead events', counts.dead]);
    const frag = [];
    for (const [state, label, c] of items) {
      const value = c === undefined ? '?' : c.more ? `${c.n}+` : String(c.n);
      const cls = 'count' + (c && (c.n > 0 || c.more) && state !== 'pending' ? ' attention' : '');
      frag.push(el('div', { class: cls, dataset: { state } },
        el('dt', { text: label }),
        el('dd', { dataset: { count: state }, text: value })));
    }
    ui.counts.replaceChildren(...frag);
  }

  // A table kept across refreshes: rows are matched by id and reused, so a
  // note being typed, or the focus on a button, survives the next refresh.
  function renderTable(table, head, rows, emptyText, more) {
    if (!table.tHead) {
      table.append(el('thead', null, el('tr', null, ...head.map((h) => el('th', { scope: 'col', text: h })))));
      table.append(el('tbody'));
    }
    const body = table.tBodies[0];
    const old = new Map();
    for (const tr of Array.from(body.rows)) if (tr.dataset.rowId) old.set(tr.dataset.rowId, tr);
    const keep = [];
    for (const r of rows.slice(0, SHOWN)) {
      // Each cell names its column, for the stacked layout on phones.
      r.cells.forEach((td, i) => { td.dataset.label = head[i]; });
      let tr = old.get(r.id);
      if (tr && tr.dataset.stamp === r.stamp) {
        // Same record: only the age moves.
        tr.cells[2].textContent = r.cells[2].textContent;
      } else if (tr) {
        const actions = tr.cells[tr.cells.length - 1];
        tr.replaceChildren(...r.cells, actions);
        tr.dataset.stamp = r.stamp;
      } else {
        const actions = r.actions();
        actions.dataset.label = head[head.length - 1];
        tr = el('tr', { dataset: Object.assign({ rowId: r.id, stamp: r.stamp }, r.data) }, ...r.cells, actions);
      }
      keep.push(tr);
    }
    if (!keep.length) keep.push(el('tr', { class: 'empty' }, el('td', { colSpan: head.length, text: emptyText })));
    else if (more || rows.length > keep.length) {
      const total = more ? `${rows.length}+` : String(rows.length);
      keep.push(el('tr', { class: 'empty' },
        el('td', { colSpan: head.length, text: `Showing ${keep.length} of ${total}; the CLI (once ls) lists them all.` })));
    }
    // Reorder without detaching rows that stay (keeps focus where it is).
    let at = body.firstChild;
    for (const tr of keep) {
      if (tr === at) { at = at.nextSibling; continue; }
      body.insertBefore(tr, at);
    }
    while (at) { const next = at.nextSibling; at.remove(); at = next; }
  }

  // The agents table holds nothing to type into: it is drawn anew each time.
  function limitText(l) {
    const used = l.used === null ? '?' : String(l.used);
    const room = l.retry_after_s ? `, room in ${l.retry_after_s} s` : '';
    return `${l.limit}: ${used} of ${l.max} used${room}`;
  }

  function renderAgents(table, agents) {
    const head = el('thead', null, el('tr', null, ...AGENT_HEAD.map((h) => el('th', { scope: 'col', text: h }))));
    const rows = agents.map((a) => {
      const cells = [
        textCell(a.name, 'mono'),
        textCell(a.role),
        textCell(a.reach === 'granted' ? 'its grants' : a.reach === 'full' ? 'everything (no section)' : 'operator'),
        textCell((a.grants || []).map((g) => `${g.target}: ${g.items.join(', ')}`).join('; ')),
        textCell((a.limits || []).map(limitText).join('; ') + (a.over_limit === 'approve' ? ' (then a person)' : '')),
      ];
      cells.forEach((td, i) => { td.dataset.label = AGENT_HEAD[i]; });
      return el('tr', { dataset: { agent: a.name } }, ...cells);
    });
    if (!rows.length) rows.push(el('tr', { class: 'empty' }, el('td', { colSpan: AGENT_HEAD.length, text: 'No tokens are configured.' })));
    table.replaceChildren(head, el('tbody', null, ...rows));
  }

  function actionId(rec) {
    return `${rec.scope}\u0000${rec.key}`;
  }

  function actionRow(rec, now, buttons) {
    return {
      id: actionId(rec),
      stamp: String(rec.updated_at),
      data: { scope: rec.scope, key: rec.key },
      cells: [
        textCell(rec.scope, 'mono scope'),
        textCell(rec.key, 'mono key'),
        el('td', { class: 'age', text: age(rec.created_at, now), title: rec.created_at || '' }),
        textCell(requestSummary(rec.request), 'mono request'),
        textCell(rec.error || rec.note, 'error'),
        trailCell(rec.trail),
      ],
      actions: () => buttons(rec),
    };
  }

  function labelled(labelText, input) {
    const id = `f${++uid}`;
    input.id = id;
    return el('span', { class: 'field' }, el('label', { for: id, text: labelText }), input);
  }

  function busy(td, on) {
    for (const b of td.querySelectorAll('button, input')) b.disabled = on;
  }

  // Runs one button's call; its result or error goes to the status area.
  async function act(td, what, call) {
    busy(td, true);
    setStatus(`${what}…`);
    const gen = generation;
    try {
      await call();
      if (gen !== generation) return;
      setStatus(`${what}: done.`, 'ok');
    } catch (e) {
      if (gen !== generation) return;
      setStatus(`${what} failed: ${e.message}`, 'error');
      if (e.status === 401) { signOut(`${what} failed: ${e.message}`, 'error'); return; }
    } finally {
      busy(td, false);
    }
    refresh();
  }

  function awaitingButtons(rec) {
    const td = el('td', { class: 'actions' });
    const note = el('input', { type: 'text', name: 'note', autocomplete: 'off', maxLength: 1000 });
    const body = () => (note.value.trim() ? { note: note.value } : {});
    const path = (verb) => `/v1/actions/${seg(rec.scope)}/${seg(rec.key)}/${verb}`;
    const name = `${rec.scope}/${rec.key}`;
    td.append(el('div', { class: 'decide' },
      labelled('Note (optional)', note),
      el('span', { class: 'buttons' },
        el('button', { type: 'button', class: 'approve', text: 'Approve',
          on: { click: () => act(td, `Approve ${name}`, () => api('POST', path('approve'), body())) } }),
        el('button', { type: 'button', class: 'deny', text: 'Deny',
          on: { click: () => act(td, `Deny ${name}`, () => api('POST', path('deny'), body())) } }))));
    return td;
  }

  function resolveButtons(rec) {
    const td = el('td', { class: 'actions' });
    const pid = el('input', { type: 'text', name: 'provider_id', autocomplete: 'off', maxLength: 255 });
    const path = `/v1/actions/${seg(rec.scope)}/${seg(rec.key)}/resolve`;
    const name = `${rec.scope}/${rec.key}`;
    td.append(el('div', { class: 'decide' },
      labelled('Provider id (optional)', pid),
      el('span', { class: 'buttons' },
        el('button', { type: 'button', class: 'complete', text: 'Mark completed',
          on: { click: () => act(td, `Mark ${name} completed`, () => {
            const b = { outcome: 'completed' };
            if (pid.value.trim()) b.provider_id = pid.value.trim();
            return api('POST', path, b);
          }) } }),
        el('button', { type: 'button', class: 'release', text: 'Mark released',
          on: { click: () => act(td, `Mark ${name} released`, () => api('POST', path, { outcome: 'released' })) } }))));
    return td;
  }

  function eventRow(ev, now) {
    return {
      id: `${ev.source}\u0000${ev.event_id}`,
      stamp: String(ev.updated_at),
      data: { source: ev.source, eventId: ev.event_id },
      cells: [
        textCell(ev.source, 'mono scope'),
        textCell(ev.event_id, 'mono key'),
        el('td', { class: 'age', text: age(ev.received_at, now), title: ev.received_at || '' }),
        el('td', { class: 'num', text: String(ev.attempt ?? '—') }),
        textCell(ev.error, 'error'),
      ],
      actions: () => {
        const td = el('td', { class: 'actions' });
        const name = `${ev.source}/${ev.event_id}`;
        td.append(el('button', { type: 'button', class: 'redeliver', text: 'Redeliver',
          on: { click: () => act(td, `Redeliver ${name}`,
            () => api('POST', `/v1/events/${seg(ev.source)}/${seg(ev.event_id)}/redeliver`)) } }));
        return td;
      },
    };
  }

  const ACTION_HEAD = ['Scope', 'Key', 'Age', 'Request', 'Error / note', 'Trail', 'Decide'];
  const EVENT_HEAD = ['Source', 'Event id', 'Age', 'Attempts', 'Error', 'Decide'];
  const AGENT_HEAD = ['Name', 'Role', 'May reach', 'Grants', 'Limits'];

  // ------------------------------------------------------------------ refresh

  async function load() {
    const gen = generation;
    // An operator route first: an agent's token reads the action lists but
    // must not be mistaken for an operator's.
    try {
      await api('GET', '/v1/events?limit=1');
    } catch (e) {
      if (gen !== generation) return;
      if (e.status === 401) {
        signOut(`Sign-in refused: ${e.message}`, 'error');
        return;
      }
      if (e.status === 403) {
        showRefused("This token is an agent's; the console needs an operator token. Sign out and sign in with an operator token from the gateway's tokens_file.");
        setStatus('');
        return;
      }
      throw e;
    }
    const lists = await Promise.all([
      ...COUNTED.map(([state]) => list('/v1/actions', { status: state }).then((r) => [state, r], (e) => [state, e])),
      list('/v1/events', { status: 'dead' }).then((r) => ['dead', r], (e) => ['dead', e]),
      api('GET', '/v1/agents').then((r) => ['agents', r], (e) => ['agents', e]),
    ]);
    if (gen !== generation) return;
    const got = Object.fromEntries(lists);
    const failed = lists.filter(([, r]) => r instanceof Error);
    const refused = failed.find(([, e]) => e.status === 401);
    if (refused) {
      signOut(`Refused: ${refused[1].message}`, 'error');
      return;
    }
    if (failed.some(([, e]) => e.status === 403)) {
      showRefused("This token is an agent's; the console needs an operator token.");
      return;
    }
    const counts = {};
    for (const [state, r] of lists) {
      if (!(r instanceof Error) && state !== 'agents') counts[state] = { n: r.items.length, more: r.more };
    }

    ui.refused.hidden = true;
    ui.signin.hidden = true;
    ui.dashboard.hidden = false;
    ui.signout.hidden = false;
    renderCounts(counts);

    const now = Date.now();
    // A list that could not be read leaves its table as it was.
    const actions = (table, state, buttons, empty) => {
      const r = got[state];
      if (r instanceof Error) return;
      renderTable(table, ACTION_HEAD, r.items.map((rec) => actionRow(rec, now, buttons)), empty, r.more);
    };
    actions(ui.tables.awaiting, 'awaiting_approval', awaitingButtons, 'Nothing awaits approval.');
    actions(ui.tables.held, 'held', resolveButtons, 'No held actions.');
    actions(ui.tables.unknown, 'unknown', resolveButtons, 'No unknown actions.');
    if (!(got.agents instanceof Error)) renderAgents(ui.agents, got.agents.agents || []);
    if (!(got.dead instanceof Error)) {
      renderTable(ui.tables.dead, EVENT_HEAD, got.dead.items.map((ev) => eventRow(ev, now)), 'No dead events.',
        got.dead.more);
    }

    const when = new Date().toLocaleTimeString();
    ui.info.textContent = `Updated ${when}; refreshes every ${refreshSeconds} s.`;
    ui.info.hidden = false;
    if (failed.length) setStatus(`Could not read everything: ${failed[0][1].message}`, 'error transient');
    else if (ui.status.classList.contains('transient')) setStatus('');
  }

  async function refresh() {
    if (token() === null) return;
    if (running) { again = true; return; }
    running = true;
    stopTimer();
    const gen = generation;
    try {
      await load();
    } catch (e) {
      if (gen === generation) setStatus(`Refresh failed: ${e.message}`, 'error transient');
    } finally {
      running = false;
    }
    // Asked for meanwhile (a button, a new sign-in): now, whatever this one was.
    if (again) { again = false; refresh(); return; }
    if (gen !== generation || token() === null) return;
    timer = setTimeout(refresh, refreshSeconds * 1000);
  }

  function stopTimer() {
    if (timer !== null) { clearTimeout(timer); timer = null; }
  }

  function signOut(message, kind) {
    generation++;
    sessionStorage.clear();
    ui.token.value = '';
    clearTables();
    showSignin(message, kind);
  }

  // ------------------------------------------------------------------ start

  ui.signin.addEventListener('submit', (e) => {
    e.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, ui.token.value.trim());
    ui.token.value = '';
    generation++;
    setStatus('Signing in…', 'transient');
    ui.signin.hidden = true;
    refresh();
  });
  ui.signout.addEventListener('click', () => signOut('Signed out.'));

  if (token() === null) showSignin();
  else refresh();
})();
