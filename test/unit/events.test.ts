/**
 * Fleet events: what deriveEvents finds between two snapshots (a table), the ring (bound, order,
 * filter), the page's view (groups in ctl's order and words, the node bars' numbers), and the
 * feeds over real sockets: GET /admin/v1/events, the stream with Last-Event-ID, a client that does
 * not read is dropped with the server's buffer bounded, a client that goes is forgotten, and the
 * app closes with streams open.
 */
import { strict as assert } from 'node:assert';
import { connect, type Socket } from 'node:net';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { after, before, describe, test } from 'node:test';
import Fastify, { type FastifyInstance } from 'fastify';
import { deriveEvents, type FleetEventDraft, type FleetEventKind } from '../../src/events/derive.js';
import { EventRing } from '../../src/events/ring.js';
import type { EventFeed } from '../../src/events/feed.js';
import { registerUi, resumeAfter, type EventsJson } from '../../src/ui/routes.js';
import { figuresText, pageView } from '../../src/ui/view.js';
import { FiguresWindow, routerFigures } from '../../src/ui/figures.js';
import { Registry } from 'prom-client';
import { createRouterMetrics } from '../../src/metrics/router.js';
import { NO_REASON } from '../../src/metrics/ports.js';
import { CSP } from '../../src/ui/assets.js';
import { adminAuth } from '../../src/admin/auth.js';
import { renderAdminError } from '../../src/admin/errors.js';
import { STANDALONE, type FleetSnapshot, type ModelView, type ReplicaView } from '../../src/reconciler/view.js';
import type { FleetSpec } from '../../src/fleet-spec/types.js';
import { fakeSpec } from '../harness/fake-fleet-view.js';
import { modelView, nodeView, replicaView, snapshot } from '../harness/views.js';
import { until } from '../harness/wait.js';
import { run as runCtl } from '../../src/cli/main.js';

const GiB = 2 ** 30;
const SPEC: FleetSpec = fakeSpec({ models: { good: {}, kev: {}, huge: {} }, settings: { placementReserveBytes: GiB } });

const replica = (id: string, model: string, phase: ReplicaView['phase'], node = 'node-1'): ReplicaView =>
  replicaView(id, model, { node, phase, endpoint: phase === 'ready' ? 'http://10.0.0.1:8001' : '' });
const model = (name: string, over: Partial<ModelView> = {}): ModelView => modelView(SPEC.models[name]!, { memoryBytes: GiB, ...over });
const snap = (at: number, models: ModelView[], over: Partial<FleetSnapshot> = {}): FleetSnapshot =>
  snapshot({ at, appliedRevision: 'aaaaaaaaaaaaaaaa', lastSyncOk: at, models, nodes: [nodeView('node-1')], ...over });

const ARCH = { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: "unknown model architecture: 'kev'" };
const ROLLOUT: NonNullable<ModelView['rollout']> = { phase: 'checking', stableDigest: 'sha256:111111111111aaaa', canaryDigest: 'sha256:222222222222bbbb', step: 0, share: 0, since: 1, until: null, verdict: null };
const kinds = (ds: readonly FleetEventDraft[]): FleetEventKind[] => ds.map((d) => d.kind);

describe('deriveEvents', () => {
  const cases: { name: string; prev: FleetSnapshot | null; next: FleetSnapshot; want: FleetEventKind[]; check?: (d: FleetEventDraft[]) => void }[] = [
    { name: 'the first snapshot says nothing happened', prev: null, next: snap(2, [model('good', { replicas: [replica('g1', 'good', 'ready')] })]), want: [] },
    { name: 'nothing changed', prev: snap(1, [model('good')]), next: snap(2, [model('good')]), want: [] },
    { name: 'a start begins', prev: snap(1, [model('good')]), next: snap(2, [model('good', { replicas: [replica('g1', 'good', 'starting')] })]), want: ['replica-starting'] },
    {
      name: 'a replica becomes ready',
      prev: snap(1, [model('good', { replicas: [replica('g1', 'good', 'starting')] })]),
      next: snap(2, [model('good', { replicas: [replica('g1', 'good', 'ready')] })]),
      want: ['replica-ready'],
      check: (d) => assert.equal(d[0]!.replica, 'g1'),
    },
    {
      name: 'a start fails, with its code and hint',
      prev: snap(1, [model('kev', { replicas: [replica('k1', 'kev', 'starting')] })]),
      next: snap(2, [model('kev', { consecutiveFailures: 1, lastError: ARCH })]),
      want: ['replica-stopped', 'start-failed'],
      check: (d) => {
        assert.equal(d[1]!.code, 'REPLICA_UNKNOWN_ARCHITECTURE');
        assert.match(d[1]!.hint ?? '', /architecture/);
      },
    },
    {
      name: 'the fifth failure parks',
      prev: snap(1, [model('kev', { consecutiveFailures: 4, lastError: ARCH })]),
      next: snap(2, [model('kev', { consecutiveFailures: 5, lastError: ARCH, parked: { since: 2, lastError: ARCH } })]),
      want: ['start-failed', 'parked'],
      check: (d) => assert.match(d[1]!.hint ?? '', /llmgw ctl retry kev/),
    },
    {
      name: 'a retry unparks',
      prev: snap(1, [model('kev', { consecutiveFailures: 5, lastError: ARCH, parked: { since: 1, lastError: ARCH } })]),
      next: snap(2, [model('kev', { lastHandledRetry: 'api-1' })]),
      want: ['unparked', 'retry'],
    },
    {
      name: 'a commit is rejected (file:line in the message)',
      prev: snap(1, []),
      next: snap(2, [], { specValid: false, rejected: { revision: 'bbbbbbbbbbbbbbbb', problems: [{ file: 'models/x.yaml', line: 4, col: 1, code: 'SPEC_SCHEMA', message: 'replicas must be integer' } as never] } }),
      want: ['revision-rejected'],
      check: (d) => assert.match(d[0]!.message, /models\/x\.yaml:4: replicas must be integer/),
    },
    { name: 'a new revision is applied', prev: snap(1, []), next: snap(2, [], { appliedRevision: 'cccccccccccccccc' }), want: ['revision-applied'] },
    {
      name: 'the leader changes',
      prev: snap(1, [], { control: { ...STANDALONE, mode: 'etcd', leader: { id: 'a', label: 'a', since: 1, epoch: 1 } } }),
      next: snap(2, [], { control: { ...STANDALONE, mode: 'etcd', leader: { id: 'b', label: 'host-b', since: 2, epoch: 2 } } }),
      want: ['leader-changed'],
      check: (d) => assert.match(d[0]!.message, /host-b leads \(epoch 2\)/),
    },
    {
      name: 'a model fits nowhere',
      prev: snap(1, [model('huge')]),
      next: snap(2, [model('huge', { unplaceable: { code: 'PLACEMENT_NO_ROOM', reason: 'needs 1 TiB', needBytes: 2 ** 40, largestFree: null, checked: 1, excludedBySelector: 0, unknown: 0, avoided: 0 } })]),
      want: ['unplaceable'],
    },
    {
      name: 'a rollout moves: its canary step begins, then it is rolled back with the verdict',
      prev: snap(1, [model('good', { rollout: ROLLOUT })]),
      next: snap(2, [model('good', { rollout: { ...ROLLOUT, phase: 'canary', step: 1, share: 0.5 } })]),
      want: ['rollout'],
      check: (d) => assert.equal(d[0]!.message, 'good: canary of revision 222222222222 at 50% (step 2)'),
    },
    {
      name: 'a rolled-back rollout says why, with the code and its hint',
      prev: snap(1, [model('good', { rollout: { ...ROLLOUT, phase: 'canary', share: 0.1 } })]),
      next: snap(2, [model('good', { rollout: { ...ROLLOUT, phase: 'rolled_back', verdict: { code: 'ROLLOUT_ROLLED_BACK', message: 'canary rolled back at 10%: error rate 31% vs 0%' } } })]),
      want: ['rollout'],
      check: (d) => {
        assert.equal(d[0]!.message, 'good: revision 222222222222 rolled back: canary rolled back at 10%: error rate 31% vs 0%');
        assert.equal(d[0]!.code, 'ROLLOUT_ROLLED_BACK');
        assert.match(d[0]!.hint ?? '', /ctl retry/);
      },
    },
    { name: 'an unchanged rollout says nothing', prev: snap(1, [model('good', { rollout: ROLLOUT })]), next: snap(2, [model('good', { rollout: { ...ROLLOUT } })]), want: [] },
    {
      name: 'a node becomes unreachable',
      prev: snap(1, []),
      next: { ...snap(2, []), nodes: [{ ...snap(2, []).nodes[0]!, reachable: false, error: { code: 'NODE_UNREACHABLE', message: 'connect refused' } }] },
      want: ['node-unreachable'],
    },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const d = deriveEvents(c.prev, c.next);
      assert.deepEqual(kinds(d), c.want);
      for (const e of d) assert.equal(e.at, c.next.at);
      c.check?.(d);
    });
  }
});

const ev = (model: string | null, message = 'x'): FleetEventDraft => ({ at: 1, kind: 'retry', model, node: null, replica: null, code: null, message, hint: null });

describe('EventRing', () => {
  test('keeps at most its size: the oldest fall off, numbers go on', () => {
    const r = new EventRing(3);
    r.push([ev('a', '1'), ev('a', '2')]);
    r.push([ev('b', '3'), ev('a', '4'), ev('b', '5')]);
    assert.deepEqual(r.list().map((e) => e.message), ['5', '4', '3']);
    assert.deepEqual(r.list().map((e) => e.seq), [5, 4, 3]);
    assert.equal(r.first, 3);
    assert.equal(r.last, 5);
  });
  test('newest first; filtered by model; limited; after a number', () => {
    const r = new EventRing(100);
    r.push(['a', 'b', 'a', null, 'a'].map((m, i) => ev(m, String(i + 1))));
    assert.deepEqual(r.list({ model: 'a' }).map((e) => e.message), ['5', '3', '1']);
    assert.deepEqual(r.list({ limit: 2 }).map((e) => e.message), ['5', '4']);
    assert.deepEqual(r.list({ after: 3 }).map((e) => e.seq), [5, 4]);
    assert.deepEqual(r.list({ after: 5 }), []);
  });
  test('listeners hear each event in order, until they leave', () => {
    const r = new EventRing(2);
    const heard: number[] = [];
    const off = r.subscribe((e) => heard.push(e.seq));
    r.push([ev('a'), ev('a'), ev('a')]);
    off();
    r.push([ev('a')]);
    assert.deepEqual(heard, [1, 2, 3]);
    assert.equal(r.listeners, 0);
  });
  test('a ring of no size is refused', () => assert.throws(() => new EventRing(0)));
});

describe('resumeAfter (Last-Event-ID)', () => {
  const cases: [string | undefined, number | null][] = [
    [undefined, null],
    ['', null],
    ['B:3', 3],
    ['3', 3],
    ['B:9', 0], // above the newest: numbered by an earlier process
    ['A:2', 0], // another process's id (a restart): all of this one's are new
    ['junk', 0],
  ];
  for (const [header, want] of cases) test(`${JSON.stringify(header)} → ${want}`, () => assert.equal(resumeAfter(header, 'B', 5), want));
});

describe('routerFigures', () => {
  const reading = (at: number, req: number, b: [number, number][], cached: number, evaluated: number, queue = 0) => ({
    at,
    requests: new Map([['good', req]]),
    buckets: new Map([['good', new Map(b)]]),
    queue: new Map([['good', queue]]),
    promptEvaluated: new Map([['good', evaluated]]),
    promptCached: new Map([['good', cached]]),
  });
  test('rate, median and cache share over the window between two readings', () => {
    const a = reading(0, 10, [[0.1, 5], [0.5, 10], [Infinity, 10]], 0, 100);
    const b = reading(5000, 20, [[0.1, 5], [0.5, 18], [Infinity, 20]], 300, 200, 2);
    const f = routerFigures(a, b).get('good')!;
    assert.equal(f.requestsPerSecond, 2);
    assert.equal(f.p50Seconds, 0.5); // 10 new: 0 ≤ 0.1 s, 8 ≤ 0.5 s
    assert.equal(f.queueDepth, 2);
    assert.equal(f.cacheShare, 0.75);
    assert.equal(figuresText(f), '2.0 req/s, p50 ≤ 500 ms, queue 2, 75% of prompt tokens from cache');
  });
  test('the first reading has no rate; counters that went down count from 0', () => {
    assert.equal(routerFigures(null, reading(0, 10, [[Infinity, 10]], 0, 0)).get('good')!.requestsPerSecond, 0);
    const f = routerFigures(reading(0, 50, [], 0, 0), reading(1000, 4, [[1, 4], [Infinity, 4]], 0, 0)).get('good')!;
    assert.equal(f.requestsPerSecond, 4);
    assert.equal(f.p50Seconds, 1);
    assert.equal(f.cacheShare, null);
  });
  test('a sliding window: from the newest reading a window old, else from the first; none before two, none after a clear', () => {
    const w = new FiguresWindow(5000);
    const at = (t: number, req: number) => reading(t, req, [[0.1, req], [Infinity, req]], 0, 0);
    const rps = (f: Map<string, { requestsPerSecond: number }> | null): number | null => (f ? f.get('good')!.requestsPerSecond : null);
    assert.equal(rps(w.add(at(0, 0))), null, 'one reading: no rate yet');
    assert.equal(rps(w.add(at(1000, 2))), 2, 'the window is as long as the readings go back');
    assert.equal(rps(w.add(at(2000, 2))), 1);
    for (let t = 3000; t < 5000; t += 1000) w.add(at(t, 2));
    assert.equal(rps(w.add(at(5000, 2))), 0.4, '2 requests over the last 5 s');
    assert.equal(rps(w.add(at(6000, 2))), 0, 'they left the window');
    assert.equal(w.size, 6, 'readings older than the window’s start are let go');
    assert.equal(rps(w.add(at(5500, 3))), null, 'a reading older than the newest ends no window');
    w.clear();
    assert.equal(rps(w.add(at(60_000, 50))), null, 'after a clear it starts again: no window spans the gap');
    assert.equal(rps(w.add(at(61_000, 51))), 1);
  });
});

describe('pageView', () => {
  test('groups in ctl status order with its words; node bars count what placement counts', () => {
    const s = snap(10_000, [
      model('good', { phase: 'ready', ready: 1, replicas: [replica('g1', 'good', 'ready')] }),
      model('kev', { phase: 'parked', consecutiveFailures: 5, lastError: ARCH, parked: { since: 5000, lastError: ARCH }, replicas: [replica('k1', 'kev', 'failed')] }),
      model('huge', { phase: 'unplaceable', memoryBytes: 2 ** 40, unplaceable: { code: 'PLACEMENT_NO_ROOM', reason: 'needs 1 TiB; largest free 6 GiB on node-1', needBytes: 2 ** 40, largestFree: { node: 'node-1', bytes: 6 * GiB }, checked: 1, excludedBySelector: 0, unknown: 0, avoided: 0 } }),
    ]);
    const v = pageView(s, SPEC);
    assert.deepEqual(v.groups.map((g) => g.phase), ['parked', 'unplaceable', 'ready']);
    const kev = v.groups[0]!.models[0]!;
    assert.equal(v.groups[0]!.blurb, 'not started again until the cause is fixed and a retry is handled');
    assert.equal(kev.reason?.code, 'REPLICA_UNKNOWN_ARCHITECTURE');
    assert.match(kev.unpark ?? '', /^llmgw ctl retry kev/);
    assert.equal(kev.retry, true);
    const huge = v.groups[1]!.models[0]!;
    assert.equal(huge.unplaceable?.needText, '1 TiB');
    assert.equal(huge.unplaceable?.largestFreeText, '6 GiB on node-1');
    assert.equal(v.groups[2]!.models[0]!.retry, false);
    assert.equal(v.groups[2]!.models[0]!.replicas[0]!.port, '8001');
    const n = v.nodes[0]!;
    // observed 8 GiB (no declared capacity), 1 GiB reserve, good's 1 GiB taken (kev's failed replica takes none)
    assert.deepEqual([n.capacity?.bytes, n.capacity?.source, n.reserve.bytes, n.taken.bytes, n.free?.bytes], [8 * GiB, 'observed', GiB, GiB, 6 * GiB]);
  });
  test('a declared capacity is what the bar shows', () => {
    const spec: FleetSpec = { ...SPEC, nodes: { 'node-1': { ...SPEC.nodes['node-1']!, capacity: { memoryBytes: 4 * GiB, cpus: null } } } };
    const v = pageView(snap(1, []), spec);
    assert.deepEqual([v.nodes[0]!.capacity?.bytes, v.nodes[0]!.capacity?.source, v.nodes[0]!.free?.bytes], [4 * GiB, 'declared', 3 * GiB]);
  });
});

// ------------------------------------------------------------------ the feeds over real sockets

class Source {
  current: FleetSnapshot = snap(1, [model('good')]);
  private listeners = new Set<(s: FleetSnapshot) => void>();
  snapshot(): FleetSnapshot {
    return this.current;
  }
  spec(): FleetSpec {
    return SPEC;
  }
  onSnapshot(l: (s: FleetSnapshot) => void): () => void {
    this.listeners.add(l);
    return () => this.listeners.delete(l);
  }
  publish(s: FleetSnapshot): void {
    this.current = s;
    for (const l of this.listeners) l(s);
  }
}

const TOKEN = 'events-test-token';
const MAX_BUFFER = 64 * 1024;

/** A raw HTTP/1.1 GET whose answer is read (or not) by the test. */
function rawGet(port: number, path: string, headers: Record<string, string> = {}): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1', () => {
      const h = Object.entries({ host: `127.0.0.1:${port}`, authorization: `Bearer ${TOKEN}`, ...headers }).map(([k, v]) => `${k}: ${v}\r\n`).join('');
      s.write(`GET ${path} HTTP/1.1\r\n${h}\r\n`);
      resolve(s);
    });
    s.once('error', reject);
  });
}

function readUntil(s: Socket, re: RegExp, ms = 5000): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    const t = setTimeout(() => reject(new Error(`no ${re} in ${JSON.stringify(text.slice(-500))}`)), ms);
    const on = (d: Buffer): void => {
      text += d.toString();
      if (re.test(text)) {
        clearTimeout(t);
        s.off('data', on);
        resolve(text);
      }
    };
    s.on('data', on);
  });
}

describe('the events API and streams', () => {
  let app: FastifyInstance;
  let feed: EventFeed;
  let port: number;
  const source = new Source();
  // What the server holds for each client: its response's buffer (Node 22 and later keep it there;
  // the socket's own writableLength stays 0) and its socket's (Node 20 counts it on both).
  const serverResponses = new Set<ServerResponse>();

  before(async () => {
    app = Fastify();
    app.setErrorHandler((e, _req, reply) => {
      const r = renderAdminError(e);
      void reply.code(r.status).send(r.body);
    });
    const auth = adminAuth(TOKEN);
    feed = registerUi(app, {
      backend: source,
      authEnabled: true,
      prefix: '/admin/v1',
      checkAuth: (req, _reply, done) => {
        try {
          auth.check(req.headers);
          done();
        } catch (e) {
          done(e as Error);
        }
      },
      sse: { maxBufferedBytes: MAX_BUFFER, heartbeatMs: 60_000 },
      ringSize: 50,
    });
    app.server.on('request', (_req: IncomingMessage, res: ServerResponse) => {
      serverResponses.add(res);
      res.once('close', () => serverResponses.delete(res));
    });
    await app.listen({ host: '127.0.0.1', port: 0 });
    port = (app.server.address() as { port: number }).port;
  });
  after(() => app.close());

  test('GET /events: newest first, filtered by model (an alias resolves), limited; the page has a CSP and no token', async () => {
    source.publish(snap(2, [model('good', { replicas: [replica('g1', 'good', 'starting')] })]));
    source.publish(snap(3, [model('good', { replicas: [replica('g1', 'good', 'ready')] }), model('kev', { replicas: [replica('k1', 'kev', 'starting')] })]));
    const get = async (q: string): Promise<EventsJson> => (await app.inject({ url: `/admin/v1/events${q}`, headers: { authorization: `Bearer ${TOKEN}` } })).json();
    const all = await get('');
    assert.deepEqual(all.events.map((e) => e.kind), ['replica-starting', 'replica-ready', 'replica-starting']);
    assert.deepEqual(all.events.map((e) => e.seq), [3, 2, 1]);
    assert.equal(all.events[0]!.model, 'kev');
    assert.equal(all.events[0]!.at, new Date(3).toISOString());
    assert.deepEqual((await get('?model=good')).events.map((e) => e.seq), [2, 1]);
    assert.deepEqual((await get('?limit=1')).events.map((e) => e.seq), [3]);
    assert.deepEqual((await get('?after=2')).events.map((e) => e.seq), [3]);
    assert.equal((await app.inject({ url: '/admin/v1/events' })).statusCode, 401);
    const html = await app.inject({ url: '/ui/' });
    assert.equal(html.statusCode, 200);
    assert.equal(html.headers['content-security-policy'], CSP);
    assert.doesNotMatch(html.body, /<script>|style=/);
    assert.equal((await app.inject({ url: '/' })).headers.location, '/ui/');
    // small: everything the page loads, well under 150 kB
    let bytes = 0;
    for (const u of ['/ui/', '/ui/app.css', '/ui/app.js', '/ui/icon.svg', '/ui/config.json']) {
      const r = await app.inject({ url: u });
      assert.equal(r.statusCode, 200, u);
      assert.equal(r.headers['content-security-policy'], CSP, u);
      bytes += r.rawPayload.length;
    }
    assert.ok(bytes < 150_000, `the page is ${bytes} bytes`);
    assert.doesNotMatch((await app.inject({ url: '/ui/app.js' })).body, /not built/);
  });

  test('the stream replays what came after Last-Event-ID, then goes on live', async () => {
    const s = await rawGet(port, '/admin/v1/events/stream', { 'last-event-id': '1' });
    const first = await readUntil(s, /id: [0-9a-f-]+:3\n/);
    assert.match(first, /text\/event-stream/);
    assert.match(first, /event: hello\ndata: \{"boot":"[0-9a-f-]+","last":3,"first":1\}/);
    assert.doesNotMatch(first, /id: [0-9a-f-]+:1\n/);
    assert.match(first, /id: [0-9a-f-]+:2\nevent: fleet-event\ndata: \{.*"kind":"replica-ready"/);
    source.publish(snap(4, [model('good', { replicas: [replica('g1', 'good', 'ready')] }), model('kev', { consecutiveFailures: 1, lastError: ARCH })]));
    const live = await readUntil(s, /"kind":"start-failed"/);
    assert.match(live, /REPLICA_UNKNOWN_ARCHITECTURE/);
    s.destroy();
    await until('the stream closed', 5000, () => feed.ring.listeners === 0);
  });

  test('a client that goes away is forgotten', async () => {
    const before = 0;
    const s = await rawGet(port, '/admin/v1/events/stream');
    await readUntil(s, /retry: /);
    assert.equal(feed.ring.listeners, before + 1);
    s.destroy();
    await until('the gone client forgotten', 5000, () => feed.ring.listeners === before);
  });

  test('a client that does not read is dropped; the server never holds more than its bound for it', async () => {
    const before = 0;
    const s = await rawGet(port, '/admin/v1/events/stream');
    await readUntil(s, /retry: /);
    assert.equal(feed.ring.listeners, 1);
    s.pause(); // reads nothing more: the kernel's buffers fill, then the server's
    const big = 'x'.repeat(8 * 1024);
    let most = 0;
    for (let i = 0; i < 4000 && feed.ring.listeners > before; i++) {
      feed.ring.push([ev('good', big)]);
      if (i % 50 === 0) await new Promise((r) => setImmediate(r));
      most = Math.max(most, ...[...serverResponses].map((r) => Math.max(r.writableLength, r.socket?.writableLength ?? 0)));
    }
    assert.equal(feed.ring.listeners, before, 'the slow client was dropped');
    assert.ok(most > 0, 'the socket did fill');
    assert.ok(most <= MAX_BUFFER, `the server held ${most} bytes for it (bound ${MAX_BUFFER})`);
    s.destroy();
  });

  test('the view stream sends the page’s view, then a new one on each snapshot', async () => {
    const s = await rawGet(port, '/admin/v1/view/stream');
    const first = await readUntil(s, /event: view\ndata: .*\n\n/);
    assert.match(first, /"groups":/);
    source.publish(snap(5, [model('kev', { phase: 'parked', consecutiveFailures: 5, lastError: ARCH, parked: { since: 5, lastError: ARCH } })]));
    await readUntil(s, /"phase":"parked"/);
    s.destroy();
  });

  test('llmgw ctl events prints them oldest first; --follow goes on with new ones until stopped', async () => {
    const out: string[] = [];
    const ac = new AbortController();
    const io = { out: (l: string) => void out.push(l), err: (l: string) => void out.push(`ERR ${l}`), cwd: process.cwd(), env: {}, signal: ac.signal };
    const once = await runCtl(['ctl', '--server', `http://127.0.0.1:${port}`, '--token', TOKEN, 'events', '--model', 'kev'], io);
    assert.equal(once, 0, out.join('\n'));
    const kevLines = out.splice(0);
    assert.ok(kevLines.length >= 2, kevLines.join('\n'));
    assert.ok(kevLines.every((l) => /  kev  /.test(l)), kevLines.join('\n'));
    assert.match(kevLines.at(-1)!, /parked .*REPLICA_UNKNOWN_ARCHITECTURE/);
    const following = runCtl(['ctl', '--server', `http://127.0.0.1:${port}`, '--token', TOKEN, 'events', '--follow', '-n', '1'], io);
    await until('the last event printed', 5000, () => out.length >= 1);
    source.publish(snap(6, [model('kev', { lastHandledRetry: 'api-7' })]));
    await until('the new event followed', 5000, () => out.some((l) => /retry api-7 handled/.test(l)));
    ac.abort();
    assert.equal(await following, 0);
    assert.ok(out.some((l) => /unparked/.test(l)), out.join('\n'));
  });

  test('the app closes with streams open, ending them', async () => {
    const other = Fastify();
    registerUi(other, { backend: source, authEnabled: false, prefix: '/admin/v1', checkAuth: (_r, _p, done) => done() });
    await other.listen({ host: '127.0.0.1', port: 0 });
    const s = await rawGet((other.server.address() as { port: number }).port, '/admin/v1/events/stream');
    await readUntil(s, /retry: /);
    const ended = new Promise<void>((r) => s.once('end', () => r()));
    await other.close();
    await ended;
    s.destroy();
  });
});

describe('the router figures on the view stream', () => {
  test('requests right after a page subscribes show in its figures (its window starts when it looks)', async () => {
    const registry = new Registry();
    const router = createRouterMetrics(registry);
    router.setModels(['good']);
    const app = Fastify();
    registerUi(app, { backend: new Source(), authEnabled: false, prefix: '/admin/v1', checkAuth: (_r, _p, done) => done(), registry, figuresEveryMs: 200 });
    await app.listen({ host: '127.0.0.1', port: 0 });
    try {
      const s = await rawGet((app.server.address() as { port: number }).port, '/admin/v1/view/stream');
      await readUntil(s, /event: view\ndata: .*\n\n/);
      for (let i = 0; i < 3; i++) router.request('good', 200, 0.04, NO_REASON);
      const text = await readUntil(s, /"router":"(?:[1-9][\d.]*|0\.[1-9]) req\/s[^"]*"/, 10_000);
      assert.match(text, /"router":"[\d.]+ req\/s, p50 ≤ 50 ms, queue 0, no prompt tokens"/);
      s.destroy();
    } finally {
      await app.close();
    }
  });
});
