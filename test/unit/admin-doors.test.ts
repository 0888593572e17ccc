/**
 * The admin port's doors (#36): which door a route is, the Host/Origin rule with auth off, and on a
 * real listening admin app (real sockets, a fake controller behind it): a body dripped to an unknown
 * path is answered 401 before it is read; clients that never read /metrics fill only the public
 * gate and are cut once they take nothing for sendTimeoutMs; event streams have their own cap;
 * /healthz and /readyz answer whatever is full; webhooks: a replayed delivery asks for no pass,
 * passes are coalesced to one a second, and one client address cannot hold every unverified slot.
 */
import { strict as assert } from 'node:assert';
import { createHmac } from 'node:crypto';
import { request } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { describe, test } from 'node:test';
import { Registry } from 'prom-client';
import type { FastifyInstance } from 'fastify';
import { buildAdminApp, type AdminAppDeps } from '../../src/admin/app.js';
import type { AdminBackend } from '../../src/admin/backend.js';
import { doorOf } from '../../src/admin/doors.js';
import { deliveryId, PassCoalescer } from '../../src/admin/routes/webhook.js';
import { createKeyMetrics } from '../../src/metrics/keys.js';
import { foreignRequest, hostOf, isLoopbackHost, parseAllowedHosts } from '../../src/util/local-only.js';
import { FakeClock, FakeTimers } from '../harness/fake-node.js';
import { snapshot } from '../harness/views.js';
import { until } from '../harness/wait.js';

const TOKEN = 'admin-doors-token-0123456789';
const SECRET = 'admin-doors-webhook-secret-42';
const auth = { authorization: `Bearer ${TOKEN}` };

class Backend implements AdminBackend {
  passes = 0;
  retries: string[] = [];
  snapshot() {
    return snapshot();
  }
  spec() {
    return null;
  }
  async retry(model: string) {
    this.retries.push(model);
    return { model, outcome: 'backoff-cleared' as const };
  }
  async restart() {
    return [];
  }
  /** No spec here: the route answers NO_VALID_SPEC before it asks. */
  async overrideRollout(): Promise<never> {
    throw new Error('not asked: there is no spec');
  }
  restartDone() {
    return true;
  }
  async logs() {
    return '';
  }
  async requestPass() {
    this.passes++;
  }
}

async function listening(over: Partial<AdminAppDeps> = {}, metricsBytes = 0): Promise<{ app: FastifyInstance; port: number; backend: Backend }> {
  const backend = new Backend();
  const app = buildAdminApp({ backend, token: TOKEN, webhook: { secret: SECRET, branch: 'main' }, ...over });
  // a scrape bigger than the sockets buffer (as /metrics at 1,000 models)
  if (metricsBytes > 0) app.get('/metrics', async (_req, reply) => reply.header('content-type', 'text/plain').send(Buffer.alloc(metricsBytes, 'a')));
  await app.listen({ host: '127.0.0.1', port: 0 });
  return { app, port: (app.server.address() as AddressInfo).port, backend };
}

/** A raw socket that sends `head`; records the first line of the answer and its close; reads only when `read`. */
function raw(port: number, head: string, o: { read?: boolean; from?: string } = {}): { first: () => string; closed: () => boolean; sock: Socket } {
  const sock = connect({ port, host: '127.0.0.1', ...(o.from ? { localAddress: o.from } : {}) });
  let text = '';
  let closed = false;
  sock.on('error', () => undefined);
  sock.on('close', () => (closed = true));
  if (o.read ?? true) sock.on('data', (b: Buffer) => (text += b.toString('latin1').slice(0, 400)));
  else sock.once('data', (b: Buffer) => {
    text += b.toString('latin1').slice(0, 400);
    sock.pause(); // and never read again
  });
  sock.write(head);
  return { first: () => text.split('\r\n')[0] ?? '', closed: () => closed, sock };
}

const get = async (port: number, path: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> => {
  const r = await fetch(`http://127.0.0.1:${port}${path}`, { headers });
  return { status: r.status, body: await r.text() };
};

describe('doors: which door a route is (pure)', () => {
  test('open, public, stream and token routes; no route (404) is a token route', () => {
    const p = '/admin/v1';
    const table: [string | undefined, string][] = [
      ['/healthz', 'open'], ['/readyz', 'open'],
      ['/metrics', 'public'], ['/admin/v1/webhook', 'public'], ['/', 'public'], ['/ui/', 'public'], ['/ui/app.js', 'public'], ['/favicon.ico', 'public'],
      ['/admin/v1/events/stream', 'stream'], ['/admin/v1/view/stream', 'stream'],
      ['/admin/v1/status', 'token'], ['/admin/v1/models/:name/retry', 'token'], ['/admin/v1/events', 'token'], [undefined, 'token'],
    ];
    for (const [route, door] of table) assert.equal(doorOf(route, p), door, String(route));
  });
});

describe('auth off: this machine only (pure)', () => {
  test('loopback hosts, allowed hosts and origins pass; others are FOREIGN_HOST / FOREIGN_ORIGIN', () => {
    for (const h of ['localhost', 'app.localhost', '127.0.0.1', '127.1.2.3', '::1']) assert.ok(isLoopbackHost(h), h);
    for (const h of ['evil.example', '10.0.0.5', 'localhost.evil.example', '127.0.0.1.nip.io', '0.0.0.0']) assert.ok(!isLoopbackHost(h), h);
    assert.equal(hostOf('[::1]:8081'), '::1');
    assert.equal(hostOf('LocalHost:80'), 'localhost');
    assert.equal(hostOf('evil.example/x'), null);
    const o = { allowedHosts: ['llm.lan'] };
    const verdict = (headers: Record<string, string>): string => foreignRequest(headers, o)?.code ?? 'ok';
    assert.equal(verdict({ host: '127.0.0.1:8081' }), 'ok');
    assert.equal(verdict({ host: 'llm.lan:8081' }), 'ok');
    assert.equal(verdict({ host: 'localhost', origin: 'http://127.0.0.1:8081' }), 'ok');
    assert.equal(verdict({ host: 'localhost', origin: 'http://localhost:3000' }), 'ok');
    assert.equal(verdict({}), 'FOREIGN_HOST');
    assert.equal(verdict({ host: 'evil.example:8081' }), 'FOREIGN_HOST');
    assert.equal(verdict({ host: '127.0.0.1', origin: 'http://evil.example' }), 'FOREIGN_ORIGIN');
    assert.equal(verdict({ host: '127.0.0.1', origin: 'null' }), 'FOREIGN_ORIGIN');
    assert.equal(verdict({ host: '127.0.0.1', origin: 'file://' }), 'FOREIGN_ORIGIN');
    assert.deepEqual(parseAllowedHosts('llm.lan, 10.0.0.5:80,[fd00::1]'), { hosts: ['llm.lan', '10.0.0.5', 'fd00::1'], bad: null });
    assert.equal(parseAllowedHosts('http://x').bad, 'http://x');
  });

  test('webhook delivery ids: GitHub, Gitea, GitLab', () => {
    assert.equal(deliveryId({ 'x-github-delivery': 'abc' }), 'x-github-delivery:abc');
    assert.equal(deliveryId({ 'x-gitea-delivery': 'g1' }), 'x-gitea-delivery:g1');
    assert.equal(deliveryId({ 'x-gitlab-event-uuid': 'u1' }), 'x-gitlab-event-uuid:u1');
    assert.equal(deliveryId({}), null);
  });

  test('per-key series are recorded only while metrics_per_key says so', async () => {
    let on = false;
    const registry = new Registry();
    const keys = createKeyMetrics(registry, () => on);
    const rec = { key: 'team', model: 'm', replica: null, status: 200, tokens: { prompt: 3, cached: 0, completion: 2 }, durationMs: 1 } as unknown as Parameters<typeof keys.record>[0];
    keys.record(rec);
    assert.doesNotMatch(await registry.metrics(), /llmgw_key_requests_total\{/);
    on = true;
    keys.record(rec);
    assert.match(await registry.metrics(), /llmgw_key_requests_total\{key="team",model="m",code="200"\} 1/);
  });
});

describe('doors on a listening admin app', () => {
  test('256 bodies dripped to an unknown admin path are answered 401 from their headers and closed; the token routes stay free', async () => {
    const { app, port } = await listening({ limits: { maxInFlight: 4 } });
    try {
      const head = `POST /admin/v1/nope HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: 500000\r\n\r\n{`;
      const drips = Array.from({ length: 256 }, () => raw(port, head));
      await until('every drip answered', 20_000, () => drips.every((d) => d.first() !== ''));
      assert.deepEqual([...new Set(drips.map((d) => d.first()))], ['HTTP/1.1 401 Unauthorized']);
      await until('every drip closed by the server', 20_000, () => drips.every((d) => d.closed()));
      assert.equal((await get(port, '/admin/v1/status', auth)).status, 200);
    } finally {
      await app.close();
    }
  });

  test('clients that never read /metrics fill only the public gate; status, /healthz and /readyz answer; the stuck ones are cut after sendTimeoutMs', async () => {
    const { app, port } = await listening({ limits: { maxInFlight: 4, maxPublicInFlight: 3, sendTimeoutMs: 1500 } }, 16 * 1024 * 1024);
    const held: ReturnType<typeof raw>[] = [];
    try {
      for (let i = 0; i < 3; i++) held.push(raw(port, 'GET /metrics HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n', { read: false }));
      await until('the three scrapes under way', 10_000, () => held.every((h) => h.first() === 'HTTP/1.1 200 OK'));
      const fourth = await get(port, '/metrics');
      assert.equal(fourth.status, 503);
      assert.equal((JSON.parse(fourth.body) as { error: { code: string } }).error.code, 'ADMIN_OVERLOADED');
      assert.equal((await get(port, '/admin/v1/status', auth)).status, 200);
      assert.equal((await get(port, '/healthz')).status, 200);
      assert.equal((await get(port, '/readyz')).status, 503, 'no valid spec: not ready');
      // cut: their slots are free again, and what they get when they read at last is cut short
      await until('the public gate free again (the stuck scrapes cut)', 20_000, async () => (await get(port, '/metrics')).status === 200);
      const got = held.map(() => 0);
      held.forEach((h, i) => {
        h.sock.on('data', (b: Buffer) => (got[i]! += b.length));
        h.sock.resume();
      });
      await until('the cut scrapes closed', 20_000, () => held.every((h) => h.closed()));
      assert.ok(got.every((n) => n < 16 * 1024 * 1024), `bytes read after the cut: ${got.join(', ')}`);
    } finally {
      for (const h of held) h.sock.destroy();
      await app.close();
    }
  });

  test('event streams have a cap of their own: above it 503, while status answers', async () => {
    const { app, port } = await listening({ limits: { maxStreams: 2 } });
    const streams: ReturnType<typeof raw>[] = [];
    try {
      const head = `GET /admin/v1/events/stream HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${TOKEN}\r\n\r\n`;
      for (let i = 0; i < 2; i++) streams.push(raw(port, head));
      await until('two streams open', 10_000, () => streams.every((s) => s.first() === 'HTTP/1.1 200 OK'));
      const third = raw(port, head);
      streams.push(third);
      await until('the third stream answered', 10_000, () => third.first() !== '');
      assert.equal(third.first(), 'HTTP/1.1 503 Service Unavailable');
      assert.equal((await get(port, '/admin/v1/status', auth)).status, 200);
      // without the token a stream is refused before it takes a slot
      const anon = raw(port, 'GET /admin/v1/view/stream HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n');
      streams.push(anon);
      await until('the stream without a token answered', 10_000, () => anon.first() !== '');
      assert.equal(anon.first(), 'HTTP/1.1 401 Unauthorized');
    } finally {
      for (const s of streams) s.sock.destroy();
      await app.close();
    }
  });

  test('auth off (localOnly): a foreign Host or Origin gets 403 on every route, a no-body POST …/retry included; loopback passes', async () => {
    const { app, port, backend } = await listening({ token: null, localOnly: { allowedHosts: [] } });
    try {
      const send = (method: string, path: string, headers: Record<string, string>): Promise<{ status: number; code: string }> =>
        new Promise((resolve, reject) => {
          const req = request({ host: '127.0.0.1', port, method, path, headers, agent: false }, (res) => {
            let b = '';
            res.on('data', (c: Buffer) => (b += c.toString()));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, code: b.startsWith('{') ? ((JSON.parse(b) as { error?: { code: string } }).error?.code ?? '') : '' }));
          });
          req.on('error', reject);
          req.end();
        });
      assert.deepEqual(await send('POST', '/admin/v1/models/x/retry', { host: `127.0.0.1:${port}`, origin: 'http://evil.example' }), { status: 403, code: 'FOREIGN_ORIGIN' });
      assert.deepEqual(await send('POST', '/admin/v1/models/x/retry', { host: `evil.example:${port}` }), { status: 403, code: 'FOREIGN_HOST' });
      for (const path of ['/admin/v1/status', '/metrics', '/ui/', '/healthz', '/admin/v1/nope']) assert.deepEqual(await send('GET', path, { host: 'evil.example' }), { status: 403, code: 'FOREIGN_HOST' }, path);
      assert.deepEqual(backend.retries, []);
      assert.equal((await send('GET', '/admin/v1/status', { host: `localhost:${port}` })).status, 200);
      assert.equal((await send('GET', '/admin/v1/status', { host: `127.0.0.1:${port}`, origin: `http://127.0.0.1:${port}` })).status, 200);
    } finally {
      await app.close();
    }
  });
});

describe('webhook doors on a listening admin app', () => {
  const body = (n: number): string => JSON.stringify({ ref: 'refs/heads/main', after: String(n).padStart(40, '0'), commits: [] });
  const sig = (b: string): string => `sha256=${createHmac('sha256', SECRET).update(b).digest('hex')}`;
  const deliver = (port: number, b: string, headers: Record<string, string> = {}, from?: string): Promise<{ status: number; action: string }> =>
    new Promise((resolve, reject) => {
      const req = request(
        // a header given as '' is left out
        { host: '127.0.0.1', port, method: 'POST', path: '/admin/v1/webhook', agent: false, ...(from ? { localAddress: from } : {}), headers: Object.fromEntries(Object.entries({ 'content-type': 'application/json', 'x-github-event': 'push', 'x-hub-signature-256': sig(b), 'content-length': String(Buffer.byteLength(b)), ...headers }).filter(([, v]) => v !== '')) },
        (res) => {
          let t = '';
          res.on('data', (c: Buffer) => (t += c.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, action: (JSON.parse(t) as { action?: string; error?: { code: string } }).action ?? (JSON.parse(t) as { error: { code: string } }).error.code }));
        },
      );
      req.on('error', reject);
      req.end(b);
    });

  test('the same signed delivery twice asks for one pass; another delivery within a second is folded into one pass a second later', async () => {
    const { app, port, backend } = await listening();
    try {
      const b = body(1);
      assert.deepEqual(await deliver(port, b, { 'x-github-delivery': 'd-1' }), { status: 202, action: 'pass-requested' });
      assert.equal(backend.passes, 1);
      assert.deepEqual(await deliver(port, b, { 'x-github-delivery': 'd-1' }), { status: 202, action: 'ignored' });
      // a new delivery id does not make the same signed body new (the id is not signed)
      assert.deepEqual(await deliver(port, b, { 'x-github-delivery': 'd-2' }), { status: 202, action: 'ignored' });
      assert.equal(backend.passes, 1);
      const t0 = performance.now();
      assert.deepEqual(await deliver(port, body(2), { 'x-github-delivery': 'd-3' }), { status: 202, action: 'pass-requested' });
      assert.deepEqual(await deliver(port, body(3), { 'x-github-delivery': 'd-4' }), { status: 202, action: 'pass-requested' });
      await until('the folded pass', 5000, () => backend.passes === 2);
      assert.ok(performance.now() - t0 >= 900, 'the folded pass came a second after the first');
      // that no third pass follows is the coalescer's own table below, on fake timers
    } finally {
      await app.close();
    }
  });

  test('GitLab (its token is the secret, not a signature over the body): a replay is known by X-Gitlab-Event-UUID only', async () => {
    const { app, port, backend } = await listening({ limits: { webhookPassEveryMs: 0 } });
    try {
      const lab = (b: string, uuid?: string) => deliver(port, b, { 'x-hub-signature-256': '', 'x-github-event': '', 'x-gitlab-event': 'Push Hook', 'x-gitlab-token': SECRET, ...(uuid ? { 'x-gitlab-event-uuid': uuid } : {}) });
      const b = body(20);
      assert.deepEqual(await lab(b, 'u-1'), { status: 202, action: 'pass-requested' });
      assert.deepEqual(await lab(b, 'u-1'), { status: 202, action: 'ignored' });
      assert.deepEqual(await lab(b, 'u-2'), { status: 202, action: 'pass-requested' });
      assert.equal(backend.passes, 2);
    } finally {
      await app.close();
    }
  });

  test('a client holding 4 slow signed bodies does not stop a real delivery from another address', async () => {
    const { app, port, backend } = await listening({ limits: { webhookUnverified: 8, webhookUnverifiedPerAddress: 2, webhookBodyMs: 20_000 } });
    const slow: ReturnType<typeof raw>[] = [];
    try {
      for (let i = 0; i < 4; i++) {
        slow.push(raw(port, `POST /admin/v1/webhook HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\nx-github-event: push\r\nx-hub-signature-256: sha256=${'ab'.repeat(32)}\r\ncontent-length: 60000\r\n\r\n{`, { from: '127.0.0.1' }));
      }
      await until('two of them refused (one address\'s share)', 10_000, () => slow.filter((s) => s.first() === 'HTTP/1.1 503 Service Unavailable').length === 2);
      assert.equal(slow.filter((s) => !s.closed() && s.first() === '').length, 2, 'two held, their bodies unread');
      assert.deepEqual(await deliver(port, body(9), {}, '127.0.0.2'), { status: 202, action: 'pass-requested' });
      assert.equal(backend.passes, 1);
    } finally {
      for (const s of slow) s.sock.destroy();
      await app.close();
    }
  });
});

describe('PassCoalescer (fake clock and timers)', () => {
  test('at most one run a second: requests within the second fold into one later run, and no more follows', () => {
    const clock = new FakeClock(0);
    const timers = new FakeTimers(clock);
    let runs = 0;
    const c = new PassCoalescer(1000, () => runs++, () => clock.t, timers);
    assert.equal(c.request(), 'now');
    assert.equal(runs, 1);
    clock.advance(100);
    assert.equal(c.request(), 'folded');
    assert.equal(c.request(), 'folded', 'a second request in the window is the same later run');
    assert.equal(runs, 1);
    clock.advance(899);
    timers.fire();
    assert.equal(runs, 1, 'not before the second is over');
    clock.advance(1);
    timers.fire();
    assert.equal(runs, 2, 'two deliveries within a second: one more pass, not two');
    clock.advance(5000);
    timers.fire();
    assert.equal(runs, 2, 'and none after it');
    assert.equal(timers.next(), null);
    clock.advance(1);
    assert.equal(c.request(), 'now', 'a request after the second runs at once');
    assert.equal(runs, 3);
    c.stop();
  });
});
