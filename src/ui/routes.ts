/**
 * The status page and its feeds, added to the admin app (registered from admin/app.ts):
 *   GET /  → /ui/                    the page (HTML, CSS, JS, config.json {auth}: no token needed to load them)
 *   GET /admin/v1/events[?model=M&limit=N&after=SEQ]   recent events, newest first (JSON)
 *   GET /admin/v1/events/stream[?model=M]             the same as Server-Sent Events (`event: fleet-event`);
 *                                                     Last-Event-ID (BOOT:SEQ) replays what the ring still holds
 *   GET /admin/v1/view                                the page's view of the fleet (JSON)
 *   GET /admin/v1/view/stream?page&size&phase&node&q  a page of that view (default the first 100 models,
 *                                                     attention first) once (SSE `event: view`), then what
 *                                                     changed on it, model by model (`event: patch`)
 * The API routes take the admin token like every other; the streams drop a client that does not
 * read (see sse.ts) and end when the app closes.
 */
import { randomUUID } from 'node:crypto';
import type { Registry } from 'prom-client';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { FleetSpec } from '../fleet-spec/types.js';
import { EventFeed, type SnapshotSource } from '../events/feed.js';
import type { FleetEvent } from '../events/ring.js';
import { DEFAULT_SSE, SseClient, sseFrame, type SseOptions } from '../events/sse.js';
import { pageAssets, CSP } from './assets.js';
import type { EventJson, EventsJson } from '../wire/events.js';
export type { EventJson, EventsJson } from '../wire/events.js';
import { figuresText, viewBase, viewOfPage, type PageView, type ViewBase } from './view.js';
import { ALL_MODELS, MAX_PAGE_SIZE, PageDiff, viewQueryOf, type ViewQuery } from './view-page.js';
import { MODEL_PHASES } from '../reconciler/view.js';
import { FiguresWindow, readRouterCounters, type RouterFigures } from './figures.js';

export interface UiDeps {
  readonly backend: SnapshotSource & { spec(): FleetSpec | null };
  readonly checkAuth: (request: FastifyRequest, reply: FastifyReply, done: (err?: Error) => void) => void;
  readonly prefix: string;
  readonly sse?: Partial<SseOptions>;
  readonly ringSize?: number;
  /** Whether the feeds ask for the admin token (the page asks for it only then). */
  readonly authEnabled: boolean;
  /** The controller's metrics: the models' router figures come from its counters. */
  readonly registry?: Registry;
  /** How often the router's counters are read while a page looks (default 1 s). */
  readonly figuresEveryMs?: number;
  /** The window the router figures cover (default 5 s). */
  readonly figuresWindowMs?: number;
}

export const eventJson = (e: FleetEvent): EventJson => ({ ...e, at: new Date(e.at).toISOString() });

const MAX_NAME = 256;

/**
 * Where a reconnecting stream goes on from: its Last-Event-ID is `BOOT:SEQ` (the ids this stream
 * sends) or a bare SEQ. Another process's id (the controller restarted) or a number above the
 * newest means every event this process holds is new to it; no id means only what comes next.
 */
export function resumeAfter(header: string | string[] | undefined, boot: string, last: number): number | null {
  if (typeof header !== 'string' || header === '') return null;
  const m = /^(?:(.+):)?(\d+)$/.exec(header.trim());
  if (!m) return 0;
  if (m[1] !== undefined && m[1] !== boot) return 0;
  const seq = Number(m[2]);
  return seq > last ? 0 : seq;
}

/** Whether two readings' figures read the same on the page (then nothing is pushed). */
function sameFigures(a: ReadonlyMap<string, RouterFigures> | null, b: ReadonlyMap<string, RouterFigures>): boolean {
  if (a === null || a.size !== b.size) return false;
  for (const [m, f] of b) {
    const was = a.get(m);
    if (!was || figuresText(was) !== figuresText(f)) return false;
  }
  return true;
}

/** Registers the page and its feeds on the admin app; returns the feed (its ring) for the caller. */
export function registerUi(app: FastifyInstance, deps: UiDeps): EventFeed {
  const feed = new EventFeed(deps.backend, deps.ringSize !== undefined ? { ringSize: deps.ringSize } : {});
  const boot = randomUUID();
  const sseOpts: SseOptions = { ...DEFAULT_SSE, ...(deps.sse ?? {}) };
  const clients = new Set<SseClient>();
  const assets = pageAssets();

  let figures: Map<string, RouterFigures> | null = null;
  // what every page of a snapshot shares: once per snapshot (a figure tick does not rebuild it)
  let base: { for: unknown; value: ViewBase } | null = null;
  const currentBase = (): ViewBase => {
    const s = feed.current;
    if (base?.for !== s) base = { for: s, value: viewBase(s, deps.backend.spec()) };
    return base.value;
  };
  const currentView = (q: ViewQuery): PageView => viewOfPage(currentBase(), q, figures);

  // each client's page: its whole view once, then what changed, model by model (view-page.ts)
  const viewClients = new Map<SseClient, { readonly q: ViewQuery; readonly diff: PageDiff }>();
  const sendView = (c: SseClient, v: { readonly q: ViewQuery; readonly diff: PageDiff }): void => {
    const page = currentView(v.q);
    if (c.behind) {
      // a client still reading the frame before gets one whole view when it has (only the newest is kept)
      v.diff.whole(page);
      c.latest(sseFrame('view', page));
      return;
    }
    const patch = v.diff.patch(page);
    if (patch !== null) c.send(sseFrame('patch', patch));
  };
  const broadcast = (): void => {
    for (const [c, v] of viewClients) sendView(c, v);
  };
  feed.onSnapshot(broadcast);

  // The router's figures, read only while a page looks: the first page's subscription takes the
  // window's first reading at once (what happens from then on counts), then one every second, each
  // giving the figures over the last window (a change shows within a second). The last page gone,
  // the readings are forgotten: a later page's window never spans the time nobody looked.
  const registry = deps.registry;
  const readings = new FiguresWindow(deps.figuresWindowMs ?? 5000);
  let figuresTimer: NodeJS.Timeout | null = null;
  let sampling = 0; // which run of readings a read belongs to (a read that ends after a stop is dropped)
  const sample = (run: number): void => {
    if (!registry) return;
    void readRouterCounters(registry, Date.now())
      .then((next) => {
        if (run !== sampling || figuresTimer === null) return;
        const f = readings.add(next);
        if (f === null || sameFigures(figures, f)) return;
        figures = f;
        broadcast();
      })
      .catch(() => undefined);
  };
  const startFigures = (): void => {
    if (!registry || figuresTimer !== null) return;
    const run = ++sampling;
    figuresTimer = setInterval(() => sample(run), deps.figuresEveryMs ?? 1000);
    figuresTimer.unref();
    sample(run);
  };
  const stopFigures = (): void => {
    if (figuresTimer === null) return;
    clearInterval(figuresTimer);
    figuresTimer = null;
    sampling++;
    readings.clear();
    figures = null;
  };

  app.addHook('preClose', async () => {
    stopFigures();
    feed.stop();
    for (const c of clients) c.close();
  });

  const open = (reply: FastifyReply): SseClient => {
    void reply.hijack();
    const c = new SseClient(reply.raw, sseOpts);
    clients.add(c);
    c.whenEnded(() => clients.delete(c));
    return c;
  };

  // ------------------------------------------------------------------ the page (static, no token)
  const page = (type: string, body: string) => async (_req: FastifyRequest, reply: FastifyReply) =>
    reply
      .header('content-type', type)
      .header('content-security-policy', CSP)
      .header('x-content-type-options', 'nosniff')
      .header('referrer-policy', 'no-referrer')
      .header('x-frame-options', 'DENY')
      .header('cache-control', 'no-cache')
      .send(body);
  app.get('/', async (_req, reply) => reply.redirect('/ui/', 302));
  app.get('/ui', async (_req, reply) => reply.redirect('/ui/', 301));
  app.get('/ui/', page('text/html; charset=utf-8', assets.html));
  app.get('/ui/app.css', page('text/css; charset=utf-8', assets.css));
  app.get('/ui/app.js', page('text/javascript; charset=utf-8', assets.js));
  app.get('/ui/models-page.js', page('text/javascript; charset=utf-8', assets.modelsJs));
  app.get('/ui/rollout-panel.js', page('text/javascript; charset=utf-8', assets.rolloutJs));
  app.get('/ui/icon.svg', page('image/svg+xml', assets.icon));
  app.get('/favicon.ico', async (_req, reply) => reply.redirect('/ui/icon.svg', 301));
  // whether to show the token form before asking for anything (a refused request is noise in the console)
  app.get('/ui/config.json', page('application/json; charset=utf-8', JSON.stringify({ auth: deps.authEnabled })));

  // ------------------------------------------------------------------ the feeds (admin token)
  void app.register(
    async (api) => {
      api.addHook('onRequest', deps.checkAuth);

      api.get<{ Querystring: { model?: string; limit?: number; after?: number } }>(
        '/events',
        {
          schema: {
            querystring: {
              type: 'object',
              additionalProperties: false,
              properties: {
                model: { type: 'string', minLength: 1, maxLength: MAX_NAME },
                limit: { type: 'integer', minimum: 1, maximum: 100_000 },
                after: { type: 'integer', minimum: 0 },
              },
            },
          },
        },
        async (req, reply) => {
          const model = req.query.model === undefined ? undefined : (deps.backend.spec()?.modelNames[req.query.model] ?? req.query.model);
          const events = feed.ring.list({ ...(model !== undefined ? { model } : {}), ...(req.query.limit !== undefined ? { limit: req.query.limit } : {}), ...(req.query.after !== undefined ? { after: req.query.after } : {}) });
          const body: EventsJson = { events: events.map(eventJson), last: feed.ring.last, first: feed.ring.first, boot };
          return reply.header('cache-control', 'no-store').send(body);
        },
      );

      api.get<{ Querystring: { model?: string } }>(
        '/events/stream',
        { schema: { querystring: { type: 'object', additionalProperties: false, properties: { model: { type: 'string', minLength: 1, maxLength: MAX_NAME } } } } },
        async (req, reply) => {
          const model = req.query.model === undefined ? undefined : (deps.backend.spec()?.modelNames[req.query.model] ?? req.query.model);
          const lastId = resumeAfter(req.headers['last-event-id'], boot, feed.ring.last);
          const c = open(reply);
          c.send(sseFrame('hello', { boot, last: feed.ring.last, first: feed.ring.first }));
          const matches = (e: FleetEvent): boolean => model === undefined || e.model === model;
          // what it missed while away (as far as the ring still holds it), oldest first
          if (lastId !== null) for (const e of feed.ring.list({ after: lastId }).reverse()) if (matches(e)) c.send(sseFrame('fleet-event', eventJson(e), `${boot}:${e.seq}`));
          const off = feed.ring.subscribe((e) => {
            if (matches(e)) c.send(sseFrame('fleet-event', eventJson(e), `${boot}:${e.seq}`));
          });
          c.whenEnded(off);
        },
      );

      // a page of the models (page, size), a phase, a node, a search (q): the page's view; none: the whole fleet's
      const viewQuerySchema = {
        querystring: {
          type: 'object',
          additionalProperties: false,
          properties: {
            page: { type: 'integer', minimum: 0, maximum: 1_000_000 },
            size: { type: 'integer', minimum: 1, maximum: MAX_PAGE_SIZE },
            phase: { type: 'string', enum: [...MODEL_PHASES] },
            node: { type: 'string', minLength: 1, maxLength: MAX_NAME },
            q: { type: 'string', maxLength: MAX_NAME },
          },
        },
      };
      type ViewQs = { Querystring: { page?: number; size?: number; phase?: string; node?: string; q?: string } };
      api.get<ViewQs>('/view', { schema: viewQuerySchema }, async (req, reply) => {
        const q = Object.keys(req.query).length === 0 ? ALL_MODELS : viewQueryOf(req.query);
        return reply.header('cache-control', 'no-store').send(currentView(q));
      });

      api.get<ViewQs>('/view/stream', { schema: viewQuerySchema }, async (req, reply) => {
        // the stream is always paged (default 100 models): one frame of the whole fleet passed a client's budget
        const v = { q: viewQueryOf(req.query), diff: new PageDiff() };
        const c = open(reply);
        viewClients.set(c, v);
        startFigures();
        c.whenEnded(() => {
          viewClients.delete(c);
          if (viewClients.size === 0) stopFigures();
        });
        const page = currentView(v.q);
        v.diff.whole(page);
        c.latest(sseFrame('view', page));
      });
    },
    { prefix: deps.prefix },
  );
  return feed;
}
