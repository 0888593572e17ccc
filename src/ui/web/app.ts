/**
 * The status page's script (runs in the browser; compiled by tsconfig.web.json). It renders what
 * the controller derives (GET /admin/v1/view and its stream: src/ui/view.ts) and the event
 * timeline (/admin/v1/events and its stream). The admin token, where one is needed, is asked for
 * once, kept in this tab's sessionStorage and sent only as the Authorization header: the streams
 * are read with fetch (EventSource cannot send headers), never with the token in a URL.
 */

import type { Reason, PageModel, PageView, FleetEvent, ViewPatch } from './page-shapes.js';
import { applyPatch, query, queryString, wireModelsFilter } from './models-page.js';
import { rolloutPanel, tickCountdowns } from './rollout-panel.js';

const API = '/admin/v1';
const TOKEN_KEY = 'llmgw.adminToken';
const MAX_EVENTS = 300;

// ------------------------------------------------------------------ DOM helpers
type Child = Node | string | null | undefined | false;
function h(tag: string, attrs: Record<string, string> = {}, ...children: Child[]): HTMLElement {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, v);
  for (const c of children) if (c !== null && c !== undefined && c !== false) el.append(c);
  return el;
}
const byId = (id: string): HTMLElement => document.getElementById(id)!;

function ago(iso: string | null): string {
  if (!iso) return 'never';
  const d = Date.now() + skew - Date.parse(iso);
  const s = Math.max(0, Math.floor(d / 1000));
  if (s < 2) return 'just now';
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m${s % 60 ? `${s % 60}s` : ''} ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${Math.floor((s % 3600) / 60)}m ago`;
  return `${Math.floor(s / 86400)}d ago`;
}
const ms = (n: number): string => (n < 1000 ? `${n}ms` : `${(n / 1000).toFixed(1)}s`);
const reasonText = (r: Reason): string => `${r.message} [${r.code}]`;

// ------------------------------------------------------------------ state
let token: string | null = sessionStorage.getItem(TOKEN_KEY);
let view: PageView | null = null;
/** Server time minus browser time (so ages do not depend on the browser's clock). */
let skew = 0;
let events: FleetEvent[] = [];
let lastSeq = 0;
/** Which controller process numbered the events (a restart numbers from 1 again). */
let boot = '';
let generation = 0;
const knownModels = new Set<string>();
const headers = (extra: Record<string, string> = {}): Record<string, string> => ({ ...extra, ...(token ? { authorization: `Bearer ${token}` } : {}) });

class AuthNeeded extends Error {}

async function api<T>(path: string, init: RequestInit = {}): Promise<T> {
  const r = await fetch(API + path, { ...init, headers: headers({ accept: 'application/json', ...((init.headers as Record<string, string> | undefined) ?? {}) }), cache: 'no-store', credentials: 'omit' });
  if (r.status === 401) throw new AuthNeeded();
  const body = (await r.json()) as T & { error?: Reason };
  if (!r.ok) throw new Error(body.error ? reasonText(body.error) : `HTTP ${r.status}`);
  return body;
}

function setConn(text: string, state: 'live' | 'down' | 'wait'): void {
  const c = byId('conn');
  c.textContent = text;
  c.className = `conn ${state === 'live' ? 'ok' : state === 'down' ? 'bad' : ''}`;
  c.dataset.state = state;
}

// ------------------------------------------------------------------ rendering
function fact(dl: HTMLElement, k: string, v: Child, cls = ''): void {
  dl.append(h('dt', {}, k), h('dd', cls ? { class: cls } : {}, v));
}

function renderHeader(v: PageView): void {
  const s = v.status;
  const dl = byId('fleet');
  dl.replaceChildren();
  fact(dl, 'revision', s.revision ? h('span', {}, h('code', {}, s.revision.slice(0, 12)), ` in force; synced `, h('span', { 'data-ago': s.sync.lastOk ?? '' }, ago(s.sync.lastOk))) : 'none applied yet');
  if (s.sync.error) fact(dl, 'git sync', `FAILED: ${reasonText(s.sync.error)} — ${s.sync.error.hint}`, 'bad');
  fact(dl, 'spec', v.rejected ? `revision ${v.rejected.revision.slice(0, 12)} REJECTED (below)` : s.spec.valid ? 'valid' : 'not valid', v.rejected ? 'bad' : '');
  for (const [k, text, problem] of v.control) fact(dl, k || ' ', text, problem ? 'bad' : '');
  if (s.lastPass) {
    const p = s.lastPass;
    fact(dl, 'last pass', h('span', {}, `${p.result === 'ok' ? 'ok' : 'FAILED'} `, h('span', { 'data-ago': p.startedAt }, ago(p.startedAt)), `: ${p.actions} action${p.actions === 1 ? '' : 's'} in ${ms(p.durationMs)}${p.error ? `; ${reasonText(p.error)}` : ''}`), p.result === 'ok' ? '' : 'bad');
  } else fact(dl, 'last pass', 'none yet');
  if (s.stateError) fact(dl, 'state file', `FAILED: ${reasonText(s.stateError)} — ${s.stateError.hint}`, 'bad');
  fact(dl, 'nodes', `${s.nodes.reachable} of ${s.nodes.total} reachable`, s.nodes.reachable < s.nodes.total ? 'warn' : '');

  const rej = byId('rejected');
  rej.replaceChildren();
  if (v.rejected) {
    const r = v.rejected;
    rej.append(
      h(
        'div',
        { class: 'card', role: 'alert', id: 'rejected-card' },
        h('h3', { class: 'bad' }, `Rejected: revision `, h('code', {}, r.revision.slice(0, 12)), ` (${r.problems.length} problem${r.problems.length === 1 ? '' : 's'}); ${s.revision ? `${s.revision.slice(0, 12)} stays in force` : 'nothing is applied'}`),
        h('ul', {}, ...r.problems.map((p) => h('li', {}, h('code', { class: 'where' }, p.where), `: ${p.message} [${p.code}]`))),
        h('p', {}, `Fix: ${r.hint}`),
      ),
    );
  }
}

function modelCard(m: PageModel): HTMLElement {
  const kv = h('dl', { class: 'kv' });
  const row = (k: string, v: Child): void => void kv.append(h('dt', {}, k), h('dd', {}, v));
  // parked and unplaceable: the detail is the reason below; a rollout: its panel below
  if (m.detail !== '-' && !m.rollout && !(m.reason && (m.phase === 'parked' || m.phase === 'unplaceable'))) row('detail', m.detail);
  if (m.reason) {
    row(m.phase === 'parked' ? 'last error' : m.phase === 'unplaceable' ? 'reason' : 'last error', h('span', { class: 'reason' }, reasonText(m.reason)));
    row('fix', m.reason.hint);
  }
  if (m.unplaceable) {
    const u = m.unplaceable;
    row('needs', u.needText ?? 'unknown');
    row('largest free', u.largestFreeText ?? 'no node with known free memory');
    row('nodes checked', `${u.nodesChecked}${u.excludedBySelector ? `, ${u.excludedBySelector} excluded by selector` : ''}${u.unknownNodes ? `, ${u.unknownNodes} unknown` : ''}`);
  }
  if (m.unpark) row('unpark', h('code', {}, m.unpark));
  row('scaling', m.scaling);
  if (m.memory) row('memory', `${m.memory} per replica`);
  if (m.router) row('router', h('span', { class: 'figures' }, m.router));
  const card = h('article', { class: 'card model', 'data-model': m.name, 'data-phase': m.phase }, h('h4', {}, h('span', { class: `tag ${tagClass(m.phase)}` }, m.phase), m.name, ` — ${m.ready} ready`), kv);
  if (m.rollout) card.append(rolloutPanel(m.name, m.rollout, h, Date.now() + skew, ago));
  if (m.retry) {
    const b = h('button', { type: 'button', id: `retry-${m.name}`, 'aria-describedby': `retry-msg-${m.name}` }, m.phase === 'parked' ? `Retry ${m.name}` : `Retry ${m.name} now`) as HTMLButtonElement;
    b.addEventListener('click', () => void retry(m.name, b));
    card.append(h('p', {}, b, ' ', h('span', { id: `retry-msg-${m.name}`, role: 'status' }, retryMessages.get(m.name) ?? '')));
  }
  if (m.replicas.length) {
    // a device column where a replica runs on a device (its layers K/M and the device bytes reserved)
    const gpu = m.replicas.some((r) => r.device);
    const rpc = m.replicas.some((r) => r.group); // an RPC group's hosts and shares (#40)
    const cols = ['replica', 'node', 'port', 'phase', 'since', ...(gpu ? ['device'] : []), ...(rpc ? ['rpc group'] : [])];
    const deviceCell = (r: PageModel['replicas'][number]): HTMLElement[] => [...(gpu ? [h('td', { class: 'device' }, r.device ?? '-')] : []), ...(rpc ? [h('td', { class: 'group' }, r.group ?? '-')] : [])];
    card.append(
      h(
        'div',
        { class: 'table-wrap' },
        h(
          'table',
          {},
          h('caption', { class: 'legend' }, `Replicas of ${m.name}`),
          h('thead', {}, h('tr', {}, ...cols.map((c) => h('th', { scope: 'col' }, c)))),
          h('tbody', {}, ...m.replicas.map((r) => h('tr', { 'data-replica': r.id }, h('td', { class: 'mono' }, r.id), h('td', { class: 'node' }, r.node), h('td', {}, r.port), h('td', {}, r.phase), h('td', {}, h('span', { 'data-ago': r.since }, ago(r.since))), ...deviceCell(r)))),
        ),
      ),
    );
  }
  return card;
}

const tagClass = (phase: string): string => (phase === 'parked' || phase === 'unplaceable' || phase === 'failing' ? 'bad' : phase === 'ready' ? 'ok' : phase === 'idle' ? '' : 'warn');

function renderModels(v: PageView): void {
  const s = v.status.models;
  const counts = Object.entries(s.byPhase).filter(([, n]) => n > 0).map(([p, n]) => `${n} ${p}`);
  byId('models-summary').textContent = `${s.total} model${s.total === 1 ? '' : 's'}${counts.length ? ` (${counts.join(', ')})` : ''}; replicas ${s.ready} of ${s.desired} wanted now are ready`;
  const p = v.page;
  const shown = v.groups.reduce((n, g) => n + g.models.length, 0);
  byId('models-page').textContent = p
    ? `${p.matched === 0 ? 'no model matches' : `${p.page * p.size + 1}–${p.page * p.size + shown} of ${p.matched}${p.matched === s.total ? '' : ' matching'}`}, page ${p.page + 1} of ${p.pages}; those that need attention first`
    : '';
  (byId('models-prev') as HTMLButtonElement).disabled = !p || p.page <= 0;
  (byId('models-next') as HTMLButtonElement).disabled = !p || p.page >= p.pages - 1;
  if (p && p.page !== query.page) query.page = p.page;
  const groups = byId('groups');
  groups.replaceChildren(
    ...v.groups.map((g) => h('section', { class: 'group', 'data-group': g.phase, 'aria-label': `${g.phase} models` }, h('h3', {}, `${g.phase.toUpperCase()} (${g.models.length})${g.blurb ? `: ${g.blurb}` : ''}`), ...g.models.map(modelCard))),
  );
  if (v.groups.length === 0) groups.append(h('p', {}, s.total === 0 ? 'no models in the fleet spec' : 'no model on this page matches'));
  for (const g of v.groups) for (const m of g.models) addModelOption(m.name);
}

function renderNodes(v: PageView): void {
  byId('nodes').replaceChildren(
    ...v.nodes.map((n) => {
      const cap = n.capacity;
      const pct = (b: number): string => (cap && cap.bytes > 0 ? `${Math.min(100, (b / cap.bytes) * 100).toFixed(2)}%` : '0%');
      const summary = cap
        ? `${cap.text} ${cap.source === 'declared' ? '(declared capacity)' : '(observed)'}: ${n.taken.text} taken by llmgw replicas, ${n.reserve.text} reserve, ${n.free!.text} free for placement`
        : 'memory unknown (not observed yet)';
      const bar = cap
        ? h('div', { class: 'bar', role: 'img', 'aria-label': summary }, h('span', { class: 'taken' }), h('span', { class: 'reserve' }), h('span', { class: 'free' }))
        : null;
      if (bar && cap) {
        // widths through the CSSOM (a style attribute would be inline style, which the CSP forbids)
        const [t, r, f] = [...bar.children] as HTMLElement[];
        t!.style.width = pct(n.taken.bytes);
        r!.style.width = pct(Math.min(n.reserve.bytes, Math.max(0, cap.bytes - n.taken.bytes)));
        f!.style.width = pct(n.free!.bytes);
      }
      return h(
        'article',
        { class: 'card node', 'data-node': n.name },
        h('h4', {}, n.name, ' ', h('span', { class: `tag ${n.reachable ? 'ok' : 'bad'}` }, n.reachable ? 'reachable' : 'UNREACHABLE')),
        n.error ? h('p', { class: 'bad' }, `${reasonText(n.error)} — ${n.error.hint}`) : null,
        bar,
        h('p', { class: 'mem' }, summary),
        n.replicas.length ? h('ul', {}, ...n.replicas.map((r) => h('li', { 'data-replica': r.id }, r.text))) : h('p', { class: 'legend' }, 'no llmgw replicas'),
      );
    }),
  );
}

function render(v: PageView): void {
  view = v;
  skew = Date.parse(v.at) - Date.now();
  const focused = document.activeElement?.id ?? '';
  renderHeader(v);
  renderModels(v);
  renderNodes(v);
  if (focused) document.getElementById(focused)?.focus();
}

function addModelOption(name: string): void {
  if (knownModels.has(name)) return;
  knownModels.add(name);
  byId('events-model').append(h('option', { value: name }, name));
}

function renderEvents(): void {
  const filter = (byId('events-model') as HTMLSelectElement).value;
  const shown = events.filter((e) => !filter || e.model === filter);
  byId('events').replaceChildren(
    ...shown.map((e) =>
      h(
        'li',
        { 'data-kind': e.kind, 'data-seq': String(e.seq) },
        h('time', { datetime: e.at }, new Date(e.at).toLocaleTimeString()),
        h('span', { class: `tag ${/failed|parked|rejected|unreachable|unplaceable/.test(e.kind) ? 'bad' : ''}` }, e.kind),
        e.message,
        e.code ? ` [${e.code}]` : '',
      ),
    ),
  );
  if (shown.length === 0) byId('events').append(h('li', {}, 'no events yet'));
}

/** The controller restarted: its events are numbered afresh (the ones shown stay, the new ones go on top). */
function newBoot(b: string): void {
  if (b === boot) return;
  boot = b;
  lastSeq = 0;
}

function addEvent(e: FleetEvent): void {
  if (e.seq <= lastSeq) return;
  lastSeq = e.seq;
  events.unshift(e);
  if (events.length > MAX_EVENTS) events.length = MAX_EVENTS;
  if (e.model) addModelOption(e.model);
  renderEvents();
}

// ------------------------------------------------------------------ actions
const retryMessages = new Map<string, string>();

async function retry(model: string, b: HTMLButtonElement): Promise<void> {
  b.disabled = true;
  const say = (t: string): void => {
    retryMessages.set(model, t);
    const el = document.getElementById(`retry-msg-${model}`);
    if (el) el.textContent = t;
  };
  say('asking the controller…');
  try {
    const r = await api<{ message: string }>(`/models/${encodeURIComponent(model)}/retry`, { method: 'POST' });
    say(r.message);
  } catch (e) {
    if (e instanceof AuthNeeded) return needToken('The token is no longer accepted.');
    say(`retry failed: ${(e as Error).message}`);
  } finally {
    b.disabled = false;
  }
}

// ------------------------------------------------------------------ streams
/** Reads a Server-Sent Events response with fetch (headers, no token in the URL) until it ends. */
async function readStream(path: string, alive: () => boolean, lastId: () => string | null, onFrame: (event: string, data: string) => void): Promise<void> {
  const id = lastId();
  const r = await fetch(API + path, { headers: headers({ accept: 'text/event-stream', ...(id !== null ? { 'last-event-id': id } : {}) }), cache: 'no-store', credentials: 'omit' });
  if (r.status === 401) throw new AuthNeeded();
  if (!r.ok || !r.body) throw new Error(`HTTP ${r.status}`);
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done || !alive()) {
      void reader.cancel().catch(() => undefined);
      return;
    }
    buf += value;
    let end: number;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      let event = 'message';
      const data: string[] = [];
      for (const line of block.split('\n')) {
        if (line.startsWith('event:')) event = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      }
      if (data.length) onFrame(event, data.join('\n'));
    }
  }
}

/** Keeps a stream open: when it ends or fails, waits a little and opens it again (a restart, a failover). */
async function keepReading(path: string, alive: () => boolean, lastId: () => string | null, onFrame: (event: string, data: string) => void, onOpen: () => void): Promise<void> {
  let wait = 500;
  while (alive()) {
    try {
      const opened = readStream(path, alive, lastId, (e, d) => {
        wait = 500;
        onFrame(e, d);
      });
      onOpen();
      await opened;
    } catch (e) {
      if (e instanceof AuthNeeded) return needToken('The token is no longer accepted.');
    }
    if (!alive()) return;
    setConn('connection lost; reconnecting…', 'down');
    await new Promise((r) => setTimeout(r, wait));
    wait = Math.min(5000, wait * 2);
  }
}

let liveSince = 0;
/** (Re)opens the view stream for the page asked for: its whole view, then its changes. */
let viewGeneration = 0;
function startViewStream(): void {
  const gen = generation;
  const vgen = ++viewGeneration;
  void keepReading(
    `/view/stream${queryString()}`,
    () => gen === generation && vgen === viewGeneration,
    () => null,
    (event, data) => {
      if (event === 'view') render(JSON.parse(data) as PageView);
      else if (event === 'patch' && view) render(applyPatch(view, JSON.parse(data) as ViewPatch));
      else return;
      liveSince = Date.now();
      setConn('live', 'live');
    },
    () => undefined,
  );
}

function startStreams(): void {
  const gen = ++generation;
  startViewStream();
  void (async () => {
    // the events so far, then the stream from the newest of them (after a restart the numbers start again)
    for (;;) {
      try {
        const first = await api<{ events: FleetEvent[]; last: number; boot: string }>(`/events?limit=${MAX_EVENTS}`);
        newBoot(first.boot);
        for (const e of [...first.events].reverse()) addEvent(e);
        renderEvents();
        break;
      } catch (e) {
        if (e instanceof AuthNeeded) return needToken('The token is no longer accepted.');
        await new Promise((r) => setTimeout(r, 1000));
        if (gen !== generation) return;
      }
    }
    await keepReading(
      '/events/stream',
      () => gen === generation,
      () => (boot ? `${boot}:${lastSeq}` : null),
      (event, data) => {
        if (event === 'hello') newBoot((JSON.parse(data) as { boot: string }).boot);
        if (event === 'fleet-event') addEvent(JSON.parse(data) as FleetEvent);
      },
      () => undefined,
    );
  })();
}

// ------------------------------------------------------------------ the token
function needToken(message = ''): void {
  generation++;
  token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  byId('app').hidden = true;
  byId('login').hidden = false;
  byId('login-error').textContent = message;
  setConn('admin token needed', 'wait');
  (byId('token') as HTMLInputElement).focus();
}

async function open(): Promise<void> {
  try {
    render(await api<PageView>(`/view${queryString()}`));
  } catch (e) {
    if (e instanceof AuthNeeded) return needToken(token ? 'That token is not valid.' : '');
    setConn(`cannot reach the controller: ${(e as Error).message}; trying again…`, 'down');
    setTimeout(() => void open(), 2000);
    return;
  }
  byId('login').hidden = true;
  byId('app').hidden = false;
  setConn('live', 'live');
  startStreams();
}

function init(): void {
  byId('login-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const input = byId('token') as HTMLInputElement;
    const t = input.value.trim();
    input.value = '';
    if (!t) return;
    token = t;
    sessionStorage.setItem(TOKEN_KEY, t);
    void open();
  });
  byId('events-model').addEventListener('change', renderEvents);
  // the models' page, phase and search: the view stream again for that page
  wireModelsFilter(() => {
    if (view) startViewStream();
  });
  void (async () => {
    // ask for the token first where one is needed (no refused request to begin with)
    try {
      const r = await fetch('/ui/config.json', { cache: 'no-store', credentials: 'omit' });
      const cfg = (await r.json()) as { auth: boolean };
      if (cfg.auth && !token) return needToken();
    } catch {
      // the controller is not there yet: open() says so and tries again
    }
    await open();
  })();
  byId('events-filter').addEventListener('submit', (ev) => ev.preventDefault());
  // ages tick without a new view
  setInterval(() => {
    for (const el of document.querySelectorAll<HTMLElement>('[data-ago]')) el.textContent = ago(el.dataset.ago || null);
    tickCountdowns(Date.now() + skew);
    if (view && byId('conn').dataset.state === 'live' && Date.now() - liveSince > 60_000) setConn('live (no change in the last minute)', 'live');
  }, 1000);
}

init();
