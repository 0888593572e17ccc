/** Admin API via inject(): auth, every route's answer and error shape, restart validation and waiting, the push webhook. */
import { UsageBook } from '../../src/router/usage-book.js';
import { strict as assert } from 'node:assert';
import { createHmac } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { buildAdminApp } from '../../src/admin/app.js';
import type { AdminBackend, RestartRequest } from '../../src/admin/backend.js';
import type { ModelJson, ModelsJson, NodesJson, ReplicasJson, StatusJson } from '../../src/wire/shape.js';
import { LlmgwError, Reasons } from '../../src/errors/catalogue.js';
import type { Reconciler } from '../../src/reconciler/reconciler.js';
import type { FleetSnapshot, ModelView, ReplicaView } from '../../src/reconciler/view.js';
import type { FleetSpec, NodeSpec } from '../../src/fleet-spec/types.js';
import { unplaceableView } from '../harness/fake-fleet-view.js';
import { fakeSpec } from '../harness/fake-fleet-view.js';
import { modelView, nodeSpec, nodeView, replicaView, snapshot } from '../harness/views.js';
import { until } from '../harness/wait.js';

// The Reconciler must satisfy the interface structurally (checked by tsc).
export const reconcilerIsAnAdminBackend = (r: Reconciler): AdminBackend => r;

const TOKEN = 'admin-token-for-tests';
const SECRET = 'webhook-secret-for-tests';
const AT = '2025-03-01T12:00:00.000Z';
const GiB = 2 ** 30;

const baseSpec = fakeSpec({ models: { good: { aliases: ['good-alias'] }, kev: {}, huge: {} } });
const node = (name: string): NodeSpec => nodeSpec(name, { identity: 'id', labels: { gpu: 'none' } });
const SPEC: FleetSpec = { ...baseSpec, revision: 'c0ffee0123456789', nodes: { 'node-1': node('node-1'), 'node-2': node('node-2') } };

const replica = (id: string, model: string, digest: string, phase: ReplicaView['phase'] = 'ready'): ReplicaView =>
  replicaView(id, model, { digest, phase, startedAt: Date.parse('2025-03-01T10:00:00.000Z') });
const model = (name: string, over: Partial<ModelView>): ModelView => modelView(SPEC.models[name]!, { memoryBytes: GiB, ...over });

const kevError = { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: "unknown model architecture: 'kev'" };
const goodDigest = SPEC.models.good!.digest;

const SNAPSHOT: FleetSnapshot = snapshot({
  at: Date.parse(AT),
  appliedRevision: 'c0ffee0123456789',
  specValid: false,
  rejected: {
    revision: 'bad0000000000000',
    problems: [{ file: 'models/x.yaml', line: 3, col: 1, path: '/profile', code: 'SPEC_DANGLING_REF', message: 'profile "nope" does not exist', hint: Reasons.SPEC_DANGLING_REF.hint }],
  },
  lastSyncOk: Date.parse('2025-03-01T11:59:00.000Z'),
  lastSyncError: { code: 'GIT_UNREACHABLE', message: 'connect ECONNREFUSED' },
  models: [
    model('good', { ready: 2, desired: 2, replicas: [replica('good-b', 'good', goodDigest), replica('good-a', 'good', 'old-digest')] }),
    model('huge', { phase: 'unplaceable', unplaceable: unplaceableView('needs 1 TiB; largest free 22.1 GiB on node-1; 2 nodes checked') }),
    model('kev', { phase: 'parked', consecutiveFailures: 5, lastError: kevError, parked: { since: Date.parse('2025-03-01T10:00:00.000Z'), lastError: kevError } }),
  ],
  nodes: [
    nodeView('node-1', { memory: { totalBytes: 64 * GiB, availableBytes: 22 * GiB }, engines: ['llama.cpp@b1'], replicas: 2 }),
    nodeView('node-2', { reachable: false, error: { code: 'NODE_UNREACHABLE', message: 'connect ETIMEDOUT' }, memory: null, engineInstallFailures: { 'llama.cpp@b1': 2 } }),
  ],
  lastPass: { startedAt: Date.parse('2025-03-01T11:59:58.000Z'), durationMs: 412, result: 'ok', error: null, actions: 2 },
});

class FakeBackend implements AdminBackend {
  snap: FleetSnapshot = SNAPSHOT;
  specValue: FleetSpec | null = SPEC;
  pending = new Set<string>();
  logsError: unknown = null;
  retryError: unknown = null;
  readonly calls = { retry: [] as string[], restart: [] as RestartRequest[], logs: [] as [string, number][], requestPass: [] as string[] };

  snapshot(): FleetSnapshot {
    return this.snap;
  }
  spec(): FleetSpec | null {
    return this.specValue;
  }
  async retry(name: string): Promise<{ model: string; outcome: 'unparked' | 'backoff-cleared' }> {
    this.calls.retry.push(name);
    if (this.retryError) throw this.retryError;
    if (!this.specValue?.models[name]) throw new LlmgwError('NOT_FOUND', `no model named "${name}"`);
    return { model: name, outcome: this.snap.models.find((m) => m.name === name)?.parked ? 'unparked' : 'backoff-cleared' };
  }
  /** No model here has a rollout (admin-rollout.test.ts and cli-ctl-rollout.test.ts test the routes). */
  async overrideRollout(name: string): Promise<never> {
    throw new LlmgwError('ROLLOUT_NONE', `${name} has no rollout`);
  }
  async restart(req: RestartRequest): Promise<readonly string[]> {
    this.calls.restart.push(req);
    if (req.model && !this.specValue?.models[req.model]) throw new LlmgwError('NOT_FOUND', `no model named "${req.model}"`);
    const all = this.snap.models.flatMap((m) => m.replicas);
    for (const id of req.replicas ?? []) if (!all.some((r) => r.id === id)) throw new LlmgwError('REPLICA_NOT_FOUND', `no running replica "${id}"`);
    const ids = all.filter((r) => req.all || r.model === req.model || req.replicas?.includes(r.id)).map((r) => r.id);
    for (const id of ids) this.pending.add(id);
    return ids;
  }
  /** restartDone calls so far (a waiting restart request checks once, then again as it starts to wait). */
  restartDoneCalls = 0;
  restartDone(ids: readonly string[]): boolean {
    this.restartDoneCalls++;
    return ids.every((id) => !this.pending.has(id));
  }
  async logs(id: string, lines: number): Promise<string> {
    this.calls.logs.push([id, lines]);
    if (this.logsError) throw this.logsError;
    if (!this.snap.models.some((m) => m.replicas.some((r) => r.id === id))) throw new LlmgwError('REPLICA_NOT_FOUND', `no replica "${id}"`);
    return 'line 1\nline 2\n';
  }
  /** Never resolves: the webhook must not wait for the pass. */
  requestPass(trigger: string): Promise<void> {
    this.calls.requestPass.push(trigger);
    return new Promise<void>(() => undefined);
  }
}

const auth = { authorization: `Bearer ${TOKEN}` };

function assertError(res: { statusCode: number; json(): unknown }, status: number, code: string): { code: string; message: string; hint: string; retryable: boolean } {
  assert.equal(res.statusCode, status, JSON.stringify(res.json()));
  const body = res.json() as { error?: Record<string, unknown> };
  assert.ok(body.error, `no error envelope: ${JSON.stringify(body)}`);
  assert.deepEqual(Object.keys(body.error).sort(), ['code', 'hint', 'message', 'retryable']);
  assert.equal(body.error.code, code);
  const reason = Reasons[code as keyof typeof Reasons];
  assert.ok(reason, `${code} is not in the catalogue`);
  assert.equal(reason.http, status);
  assert.equal(body.error.hint, reason.hint);
  assert.equal(body.error.retryable, reason.retryable);
  assert.ok(typeof body.error.message === 'string' && body.error.message.length > 0);
  return body.error as never;
}

function app(over: Partial<Parameters<typeof buildAdminApp>[0]> = {}): { app: FastifyInstance; backend: FakeBackend } {
  const backend = (over.backend as FakeBackend | undefined) ?? new FakeBackend();
  return { app: buildAdminApp({ backend, token: TOKEN, webhook: { secret: SECRET, branch: 'main' }, limits: { pollMs: 5 }, ...over }), backend };
}

describe('admin API: authentication', () => {
  const { app: a } = app();
  after(() => a.close());

  test('no token → 401 ADMIN_AUTH_MISSING with a hint and WWW-Authenticate', async () => {
    const res = await a.inject({ method: 'GET', url: '/admin/v1/status' });
    assertError(res, 401, 'ADMIN_AUTH_MISSING');
    assert.match(String(res.headers['www-authenticate']), /^Bearer/);
  });

  test('a bad token → 401 ADMIN_AUTH_INVALID; a non-Bearer scheme → ADMIN_AUTH_MISSING', async () => {
    assertError(await a.inject({ method: 'GET', url: '/admin/v1/status', headers: { authorization: 'Bearer wrong' } }), 401, 'ADMIN_AUTH_INVALID');
    assertError(await a.inject({ method: 'GET', url: '/admin/v1/status', headers: { authorization: `Bearer ${TOKEN}x` } }), 401, 'ADMIN_AUTH_INVALID');
    assertError(await a.inject({ method: 'GET', url: '/admin/v1/status', headers: { authorization: `Basic ${TOKEN}` } }), 401, 'ADMIN_AUTH_MISSING');
  });

  test('every route wants the token (mutations are not called without it)', async () => {
    const { app: b, backend } = app();
    for (const [method, url] of [
      ['GET', '/admin/v1/models'],
      ['GET', '/admin/v1/models/good'],
      ['POST', '/admin/v1/models/kev/retry'],
      ['GET', '/admin/v1/replicas'],
      ['GET', '/admin/v1/replicas/good-a/logs'],
      ['GET', '/admin/v1/nodes'],
      ['GET', '/admin/v1/usage'],
      ['POST', '/admin/v1/restart'],
      ['GET', '/admin/v1/restart?ids=good-a'],
      ['GET', '/admin/v1/no-such-route'],
    ] as const) {
      assertError(await b.inject({ method, url, ...(method === 'POST' ? { payload: { all: true } } : {}) }), 401, 'ADMIN_AUTH_MISSING');
    }
    assert.deepEqual(backend.calls, { retry: [], restart: [], logs: [], requestPass: [] });
    await b.close();
  });

  test('the right token passes; unknown routes are 404 ADMIN_ROUTE_NOT_FOUND only once authenticated', async () => {
    assert.equal((await a.inject({ method: 'GET', url: '/admin/v1/status', headers: auth })).statusCode, 200);
    assert.equal((await a.inject({ method: 'GET', url: '/admin/v1/status', headers: { authorization: `bearer   ${TOKEN}` } })).statusCode, 200);
    assertError(await a.inject({ method: 'GET', url: '/admin/v1/nope', headers: auth }), 404, 'ADMIN_ROUTE_NOT_FOUND');
    assertError(await a.inject({ method: 'DELETE', url: '/admin/v1/models/good', headers: auth }), 404, 'ADMIN_ROUTE_NOT_FOUND');
  });

  test('token: null disables authentication (explicit local mode)', async () => {
    const { app: open } = app({ token: null });
    const res = await open.inject({ method: 'GET', url: '/admin/v1/status' });
    assert.equal(res.statusCode, 200);
    await open.close();
  });

  test('an empty token is refused at build time', () => {
    assert.throws(() => buildAdminApp({ backend: new FakeBackend(), token: '  ' }), /empty/);
  });

  test('routes the embedding process adds at the root (e.g. /metrics) are outside the token scope', async () => {
    const { app: b } = app();
    b.get('/metrics', async () => 'llmgw_up 1\n');
    assert.equal((await b.inject({ method: 'GET', url: '/metrics' })).statusCode, 200);
    await b.close();
  });
});

describe('admin API: read routes', () => {
  const { app: a } = app();
  after(() => a.close());

  test('GET /status: revision, spec rejection with problems, sync error with hint, pass, counts by phase, nodes', async () => {
    const res = await a.inject({ method: 'GET', url: '/admin/v1/status', headers: auth });
    assert.equal(res.statusCode, 200);
    assert.equal(res.headers['cache-control'], 'no-store');
    const s = res.json() as StatusJson;
    assert.equal(s.at, AT);
    assert.equal(s.leader, true);
    assert.equal(s.revision, 'c0ffee0123456789');
    assert.equal(s.spec.valid, false);
    assert.equal(s.spec.rejected?.revision, 'bad0000000000000');
    assert.equal(s.spec.rejected?.code, 'SPEC_REJECTED');
    assert.equal(s.spec.rejected?.hint, Reasons.SPEC_REJECTED.hint);
    assert.equal(s.spec.rejected?.problems[0]?.code, 'SPEC_DANGLING_REF');
    assert.deepEqual(s.sync, { lastOk: '2025-03-01T11:59:00.000Z', error: { code: 'GIT_UNREACHABLE', message: 'connect ECONNREFUSED', hint: Reasons.GIT_UNREACHABLE.hint } });
    assert.deepEqual(s.lastPass, { startedAt: '2025-03-01T11:59:58.000Z', durationMs: 412, result: 'ok', actions: 2, error: null });
    assert.equal(s.models.total, 3);
    assert.equal(s.models.byPhase.parked, 1);
    assert.equal(s.models.byPhase.unplaceable, 1);
    assert.equal(s.models.byPhase.ready, 1);
    assert.equal(s.models.byPhase.idle, 0);
    assert.equal(s.models.desired, 4);
    assert.equal(s.models.ready, 2);
    assert.deepEqual(s.nodes, { total: 2, reachable: 1, unreachable: [{ name: 'node-2', error: { code: 'NODE_UNREACHABLE', message: 'connect ETIMEDOUT', hint: Reasons.NODE_UNREACHABLE.hint } }] });
  });

  test('GET /models: desired now, ready, failures, parked + last error, unplaceable reason, digest, revision — each reason with code and hint', async () => {
    const res = await a.inject({ method: 'GET', url: '/admin/v1/models', headers: auth });
    assert.equal(res.statusCode, 200);
    const ms = res.json() as ModelsJson;
    assert.equal(ms.revision, 'c0ffee0123456789');
    assert.deepEqual(ms.models.map((m) => m.name), ['good', 'huge', 'kev']);
    const kev = ms.models.find((m) => m.name === 'kev')!;
    assert.equal(kev.phase, 'parked');
    assert.equal(kev.consecutiveFailures, 5);
    assert.deepEqual(kev.parked?.lastError, { ...kevError, hint: Reasons.REPLICA_UNKNOWN_ARCHITECTURE.hint });
    assert.match(kev.parked!.hint, /`llmgw ctl retry kev`/);
    assert.match(kev.parked!.hint, /`Llmgw-Retry: kev`/);
    assert.equal(kev.revision, 'c0ffee0123456789');
    assert.equal(kev.digest, SPEC.models.kev!.digest);
    const huge = ms.models.find((m) => m.name === 'huge')!;
    assert.deepEqual(huge.unplaceable, {
      code: 'PLACEMENT_NO_ROOM',
      reason: 'needs 1 TiB; largest free 22.1 GiB on node-1; 2 nodes checked',
      hint: Reasons.PLACEMENT_NO_ROOM.hint,
      needBytes: null,
      largestFree: null,
      nodesChecked: 1,
      excludedBySelector: 0,
      unknownNodes: 0,
      avoidedNodes: 0,
    });
    const good = ms.models.find((m) => m.name === 'good')!;
    assert.deepEqual([good.desired, good.ready], [2, 2]);
    assert.deepEqual(good.aliases, ['good-alias']);
    assert.deepEqual(good.scaling, { mode: 'replicas', replicas: 1 });
  });

  test('GET /models?phase=&name=&limit=&after=: filtered, a page at a time; a bad query is ADMIN_BAD_REQUEST', async () => {
    const get = async (q: string): Promise<ModelsJson> => {
      const res = await a.inject({ method: 'GET', url: `/admin/v1/models?${q}`, headers: auth });
      assert.equal(res.statusCode, 200, res.body);
      return res.json() as ModelsJson;
    };
    const parked = await get('phase=parked');
    assert.deepEqual([parked.models.map((m) => m.name), parked.total, parked.next], [['kev'], 1, null]);
    const two = await get('phase=parked,unplaceable');
    assert.deepEqual(two.models.map((m) => m.name), ['huge', 'kev']);
    assert.deepEqual((await get('name=good-*')).models.map((m) => m.name), ['good'], 'aliases match');
    const first = await get('limit=2');
    assert.deepEqual([first.models.map((m) => m.name), first.total, first.next], [['good', 'huge'], 3, 'huge']);
    const rest = await get(`limit=2&after=${first.next}`);
    assert.deepEqual([rest.models.map((m) => m.name), rest.next], [['kev'], null]);
    for (const bad of ['phase=sleeping', 'limit=0', 'limit=x', 'colour=red']) {
      assertError(await a.inject({ method: 'GET', url: `/admin/v1/models?${bad}`, headers: auth }), 400, 'ADMIN_BAD_REQUEST');
    }
  });

  test('GET /models/:name by name and by alias; unknown → 404 NOT_FOUND with a hint', async () => {
    const one = await a.inject({ method: 'GET', url: '/admin/v1/models/kev', headers: auth });
    assert.equal(one.statusCode, 200);
    assert.equal((one.json() as { model: ModelJson }).model.phase, 'parked');
    const alias = await a.inject({ method: 'GET', url: '/admin/v1/models/good-alias', headers: auth });
    assert.equal((alias.json() as { model: ModelJson }).model.name, 'good');
    const e = assertError(await a.inject({ method: 'GET', url: '/admin/v1/models/nope', headers: auth }), 404, 'NOT_FOUND');
    assert.match(e.message, /"nope"/);
    assert.match(e.message, /c0ffee012345/);
  });

  test('GET /replicas: sorted, with outdated replicas marked', async () => {
    const rs = (await a.inject({ method: 'GET', url: '/admin/v1/replicas', headers: auth })).json() as ReplicasJson;
    assert.deepEqual(rs.replicas.map((r) => [r.id, r.outdated]), [['good-a', true], ['good-b', false]]);
    assert.deepEqual(Object.keys(rs.replicas[0]!).sort(), ['digest', 'endpoint', 'id', 'model', 'node', 'outdated', 'phase', 'startedAt']);
  });

  test('GET /nodes: reachable, memory, capacity, engines, install failures, error with hint', async () => {
    const ns = (await a.inject({ method: 'GET', url: '/admin/v1/nodes', headers: auth })).json() as NodesJson;
    assert.equal(ns.nodes.length, 2);
    const [n1, n2] = ns.nodes;
    assert.deepEqual(n1!.memory, { totalBytes: 64 * GiB, availableBytes: 22 * GiB });
    assert.deepEqual(n1!.engines, ['llama.cpp@b1']);
    assert.deepEqual(n1!.capacity, { memoryBytes: null, cpus: null });
    assert.equal(n1!.transport, 'ssh');
    assert.equal(n2!.reachable, false);
    assert.equal(n2!.error?.hint, Reasons.NODE_UNREACHABLE.hint);
    assert.deepEqual(n2!.engineInstallFailures, { 'llama.cpp@b1': 2 });
  });

  test('GET /replicas/:id/logs: the tail, default 100 lines; bad lines → 400; unknown replica → 404 REPLICA_NOT_FOUND', async () => {
    const { app: b, backend } = app();
    const res = await b.inject({ method: 'GET', url: '/admin/v1/replicas/good-a/logs', headers: auth });
    assert.equal(res.statusCode, 200);
    assert.deepEqual(res.json(), { replica: 'good-a', lines: 100, log: 'line 1\nline 2\n' });
    await b.inject({ method: 'GET', url: '/admin/v1/replicas/good-a/logs?lines=5', headers: auth });
    assert.deepEqual(backend.calls.logs, [['good-a', 100], ['good-a', 5]]);
    assertError(await b.inject({ method: 'GET', url: '/admin/v1/replicas/good-a/logs?lines=0', headers: auth }), 400, 'ADMIN_BAD_REQUEST');
    assertError(await b.inject({ method: 'GET', url: '/admin/v1/replicas/good-a/logs?lines=lots', headers: auth }), 400, 'ADMIN_BAD_REQUEST');
    assertError(await b.inject({ method: 'GET', url: '/admin/v1/replicas/good-a/logs?lines=5&x=1', headers: auth }), 400, 'ADMIN_BAD_REQUEST');
    assertError(await b.inject({ method: 'GET', url: '/admin/v1/replicas/nope/logs', headers: auth }), 404, 'REPLICA_NOT_FOUND');
    await b.close();
  });

  test('a node error from the backend keeps its catalogue status; an unknown error is a 500 INTERNAL that leaks nothing', async () => {
    const { app: b, backend } = app();
    backend.logsError = new LlmgwError('NODE_UNREACHABLE', 'node-1: connect ECONNREFUSED');
    assertError(await b.inject({ method: 'GET', url: '/admin/v1/replicas/good-a/logs', headers: auth }), 502, 'NODE_UNREACHABLE');
    backend.logsError = new Error('secret /etc/llmgw/key at line 3');
    const res = await b.inject({ method: 'GET', url: '/admin/v1/replicas/good-a/logs', headers: auth });
    const e = assertError(res, 500, 'INTERNAL');
    assert.ok(!res.body.includes('secret'));
    assert.ok(!res.body.includes('at '), 'no stack');
    assert.equal(e.retryable, true);
    await b.close();
  });
});

describe('admin API: retry', () => {
  test('a parked model is unparked; the answer comes after the pass, with a message', async () => {
    const { app: a, backend } = app();
    const res = await a.inject({ method: 'POST', url: '/admin/v1/models/kev/retry', headers: auth });
    assert.equal(res.statusCode, 200);
    assert.deepEqual(res.json(), { model: 'kev', outcome: 'unparked', phase: 'parked', message: 'kev: unparked; it will be started again' });
    assert.deepEqual(backend.calls.retry, ['kev']);
    await a.close();
  });

  test('a model that is not parked: backoff cleared; aliases resolve to the model', async () => {
    const { app: a, backend } = app();
    const res = await a.inject({ method: 'POST', url: '/admin/v1/models/good-alias/retry', headers: auth });
    assert.deepEqual(res.json(), { model: 'good', outcome: 'backoff-cleared', phase: 'ready', message: 'good: not parked; backoff cleared' });
    assert.deepEqual(backend.calls.retry, ['good']);
    await a.close();
  });

  test('unknown model → 404 NOT_FOUND and no retry; no valid spec → 503 NO_VALID_SPEC; the backend\'s own "unknown" → 404', async () => {
    const { app: a, backend } = app();
    assertError(await a.inject({ method: 'POST', url: '/admin/v1/models/nope/retry', headers: auth }), 404, 'NOT_FOUND');
    assert.deepEqual(backend.calls.retry, []);
    backend.specValue = null;
    assertError(await a.inject({ method: 'POST', url: '/admin/v1/models/kev/retry', headers: auth }), 503, 'NO_VALID_SPEC');
    backend.specValue = SPEC;
    backend.retryError = new LlmgwError('NOT_FOUND', 'no model named "kev"');
    assertError(await a.inject({ method: 'POST', url: '/admin/v1/models/kev/retry', headers: auth }), 404, 'NOT_FOUND');
    await a.close();
  });
});

describe('admin API: restart', () => {
  test('exactly one of replicas, model, all: none, several, empty lists, unknown fields and non-objects → 400', async () => {
    const { app: a, backend } = app();
    for (const payload of [{}, { all: false }, { model: 'good', all: true }, { replicas: ['good-a'], model: 'good' }, { replicas: [] }, { models: 'good' }, { all: 'yes' }, [1]]) {
      const e = assertError(await a.inject({ method: 'POST', url: '/admin/v1/restart', headers: auth, payload: payload as object }), 400, 'ADMIN_BAD_REQUEST');
      assert.ok(e.message.length > 0);
    }
    assertError(await a.inject({ method: 'POST', url: '/admin/v1/restart', headers: { ...auth, 'content-type': 'application/json' }, payload: '{not json' }), 400, 'ADMIN_BAD_REQUEST');
    assertError(await a.inject({ method: 'POST', url: '/admin/v1/restart', headers: auth }), 400, 'ADMIN_BAD_REQUEST');
    assert.deepEqual(backend.calls.restart, []);
    await a.close();
  });

  test('unknown model → 404 NOT_FOUND; unknown replica → 404 REPLICA_NOT_FOUND', async () => {
    const { app: a } = app();
    assertError(await a.inject({ method: 'POST', url: '/admin/v1/restart', headers: auth, payload: { model: 'nope' } }), 404, 'NOT_FOUND');
    assertError(await a.inject({ method: 'POST', url: '/admin/v1/restart', headers: auth, payload: { replicas: ['nope'] } }), 404, 'REPLICA_NOT_FOUND');
    await a.close();
  });

  test('without wait: the ids, 202 done:false; aliases resolve', async () => {
    const { app: a, backend } = app();
    const res = await a.inject({ method: 'POST', url: '/admin/v1/restart', headers: auth, payload: { model: 'good-alias' } });
    assert.equal(res.statusCode, 202);
    assert.deepEqual(res.json(), { ids: ['good-b', 'good-a'], done: false });
    assert.deepEqual(backend.calls.restart, [{ model: 'good' }]);
    await a.close();
  });

  test('?wait=true answers 200 done:true once restartDone turns true', async () => {
    const { app: a, backend } = app();
    const t0 = Date.now();
    const answer = a.inject({ method: 'POST', url: '/admin/v1/restart?wait=true&timeout=10', headers: auth, payload: { replicas: ['good-a'] } });
    // the restart finishes while the request waits (it has looked at restartDone and looks again), not after a guessed time
    await until('the restart request waiting for restartDone', 5_000, () => backend.restartDoneCalls >= 2);
    backend.pending.clear();
    const res = await answer;
    assert.equal(res.statusCode, 200);
    assert.deepEqual(res.json(), { ids: ['good-a'], done: true });
    assert.ok(Date.now() - t0 < 5000);
    await a.close();
  });

  test('?wait=true with a timeout that passes → 202 done:false; GET /restart?ids polls without restarting again', async () => {
    const { app: a, backend } = app();
    const res = await a.inject({ method: 'POST', url: '/admin/v1/restart?wait=true&timeout=0.05', headers: auth, payload: { all: true } });
    assert.equal(res.statusCode, 202);
    assert.deepEqual(res.json(), { ids: ['good-b', 'good-a'], done: false });
    const poll = await a.inject({ method: 'GET', url: '/admin/v1/restart?ids=good-b,good-a&wait=true&timeout=0.02', headers: auth });
    assert.equal(poll.statusCode, 202);
    backend.pending.clear();
    const done = await a.inject({ method: 'GET', url: '/admin/v1/restart?ids=good-b,good-a', headers: auth });
    assert.equal(done.statusCode, 200);
    assert.deepEqual(done.json(), { ids: ['good-b', 'good-a'], done: true });
    assert.equal(backend.calls.restart.length, 1);
    assertError(await a.inject({ method: 'GET', url: '/admin/v1/restart', headers: auth }), 400, 'ADMIN_BAD_REQUEST');
    assertError(await a.inject({ method: 'POST', url: '/admin/v1/restart?timeout=-1', headers: auth, payload: { all: true } }), 400, 'ADMIN_BAD_REQUEST');
    await a.close();
  });

  test('closing the app answers waiting restart requests at once (202 done:false) instead of holding close() up', async () => {
    const { app: a, backend } = app();
    await a.listen({ host: '127.0.0.1', port: 0 });
    const port = (a.server.address() as { port: number }).port;
    const t0 = Date.now();
    const pending = fetch(`http://127.0.0.1:${port}/admin/v1/restart?wait=true&timeout=60`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ all: true }),
    });
    await until('the restart request waiting for restartDone', 5_000, () => backend.restartDoneCalls >= 2);
    await a.close();
    const res = await pending;
    assert.equal(res.status, 202);
    assert.deepEqual(await res.json(), { ids: ['good-b', 'good-a'], done: false });
    assert.ok(Date.now() - t0 < 5000, `took ${Date.now() - t0} ms`);
  });

  test('nothing running: 200 with no ids', async () => {
    const { app: a, backend } = app();
    backend.snap = { ...SNAPSHOT, models: SNAPSHOT.models.map((m) => ({ ...m, replicas: [] })) };
    const res = await a.inject({ method: 'POST', url: '/admin/v1/restart?wait=true', headers: auth, payload: { model: 'kev' } });
    assert.equal(res.statusCode, 200);
    assert.deepEqual(res.json(), { ids: [], done: true });
    await a.close();
  });
});

describe('admin API: push webhook', () => {
  let a: FastifyInstance;
  let backend: FakeBackend;
  before(() => {
    // passes not coalesced here (one a second is tested below, with the default)
    ({ app: a, backend } = app({ limits: { pollMs: 5, webhookPassEveryMs: 0 } }));
  });
  after(() => a.close());

  // each push its own commit, as a git server sends it (the same signed body again is a replay: ignored)
  let pushes = 0;
  const push = (ref: string): string => JSON.stringify({ ref, before: '0'.repeat(40), after: (++pushes).toString(16).padStart(40, '1'), commits: [] });
  const hmac = (body: string, secret = SECRET): string => createHmac('sha256', secret).update(body).digest('hex');
  const post = (headers: Record<string, string>, payload: string) =>
    a.inject({ method: 'POST', url: '/admin/v1/webhook', headers: { 'content-type': 'application/json', ...headers }, payload });

  const passes = (): number => backend.calls.requestPass.length;

  test('GitHub: a valid X-Hub-Signature-256 on a push to the fleet branch → 202 and a pass is requested (not waited for)', async () => {
    const before = passes();
    const body = push('refs/heads/main');
    const res = await post({ 'x-github-event': 'push', 'x-hub-signature-256': `sha256=${hmac(body)}` }, body);
    assert.equal(res.statusCode, 202);
    assert.deepEqual(res.json(), { accepted: true, action: 'pass-requested', ref: 'refs/heads/main' });
    assert.equal(passes(), before + 1);
    assert.equal(backend.calls.requestPass.at(-1), 'webhook');
  });

  test('Gitea / Forgejo: a valid X-Gitea-Signature → 202 and a pass', async () => {
    const before = passes();
    const body = push('refs/heads/main');
    assert.equal((await post({ 'x-gitea-event': 'push', 'x-gitea-signature': hmac(body) }, body)).statusCode, 202);
    const next = push('refs/heads/main');
    assert.equal((await post({ 'x-forgejo-event': 'push', 'x-forgejo-signature': hmac(next) }, next)).statusCode, 202);
    assert.equal(passes(), before + 2);
  });

  test('GitLab: the right X-Gitlab-Token → 202 and a pass', async () => {
    const before = passes();
    const res = await post({ 'x-gitlab-event': 'Push Hook', 'x-gitlab-token': SECRET }, push('refs/heads/main'));
    assert.equal(res.statusCode, 202);
    assert.equal(passes(), before + 1);
  });

  test('the webhook needs no admin token, and an admin token does not replace the signature', async () => {
    const before = passes();
    assertError(await post({ authorization: `Bearer ${TOKEN}` }, push('refs/heads/main')), 401, 'WEBHOOK_SIGNATURE_INVALID');
    assert.equal(passes(), before);
  });

  test('bad or missing signatures → 401 WEBHOOK_SIGNATURE_INVALID and no pass', async () => {
    const before = passes();
    const body = push('refs/heads/main');
    for (const headers of <Record<string, string>[]>[
      {},
      { 'x-hub-signature-256': `sha256=${hmac(body, 'other-secret')}` },
      { 'x-hub-signature-256': hmac(body) }, // without the sha256= prefix
      { 'x-hub-signature-256': 'sha256=zz' },
      { 'x-hub-signature-256': `sha256=${hmac(`${body} `)}` }, // signed a different body
      { 'x-gitea-signature': hmac(body, 'other-secret') },
      { 'x-gitea-signature': '' },
      { 'x-gitlab-token': 'wrong' },
      { 'x-gitlab-token': `${SECRET}x` },
    ]) {
      assertError(await post(headers, body), 401, 'WEBHOOK_SIGNATURE_INVALID');
    }
    assert.equal(passes(), before);
  });

  test('a push to the status branch (or any other ref) is acknowledged and ignored: no pass', async () => {
    const before = passes();
    for (const ref of ['refs/heads/llmgw/status', 'refs/heads/feature', 'refs/tags/v1', 'refs/heads/main2']) {
      const body = push(ref);
      const res = await post({ 'x-github-event': 'push', 'x-hub-signature-256': `sha256=${hmac(body)}` }, body);
      assert.equal(res.statusCode, 202);
      const j = res.json() as { action: string; ref: string; reason: string };
      assert.equal(j.action, 'ignored');
      assert.equal(j.ref, ref);
      assert.match(j.reason, /not the fleet branch refs\/heads\/main/);
    }
    const gl = push('refs/heads/llmgw/status');
    assert.equal((await post({ 'x-gitlab-event': 'Push Hook', 'x-gitlab-token': SECRET }, gl)).json().action, 'ignored');
    assert.equal(passes(), before);
  });

  test('GitHub ping → 200 pong; other events are ignored; form-encoded payloads are read', async () => {
    const before = passes();
    const ping = JSON.stringify({ zen: 'hi', hook_id: 1 });
    const p = await post({ 'x-github-event': 'ping', 'x-hub-signature-256': `sha256=${hmac(ping)}` }, ping);
    assert.equal(p.statusCode, 200);
    assert.equal(p.json().action, 'pong');
    const issue = JSON.stringify({ ref: 'refs/heads/main', action: 'opened' });
    const i = await post({ 'x-github-event': 'issues', 'x-hub-signature-256': `sha256=${hmac(issue)}` }, issue);
    assert.equal(i.statusCode, 202);
    assert.equal(i.json().action, 'ignored');
    assert.equal(passes(), before);
    const form = `payload=${encodeURIComponent(push('refs/heads/main'))}`;
    const f = await post({ 'content-type': 'application/x-www-form-urlencoded', 'x-github-event': 'push', 'x-hub-signature-256': `sha256=${hmac(form)}` }, form);
    assert.equal(f.statusCode, 202);
    assert.equal(f.json().action, 'pass-requested');
    assert.equal(passes(), before + 1);
  });

  test('a signed body that is not JSON → 400 ADMIN_BAD_REQUEST, no pass', async () => {
    const before = passes();
    const body = '{nope';
    assertError(await post({ 'x-github-event': 'push', 'x-hub-signature-256': `sha256=${hmac(body)}` }, body), 400, 'ADMIN_BAD_REQUEST');
    assert.equal(passes(), before);
  });

  test('the branch may be given as a full ref; without a webhook config the route is 404 WEBHOOK_NOT_CONFIGURED', async () => {
    const { app: full, backend: b2 } = app({ webhook: { secret: SECRET, branch: 'refs/heads/fleet' } });
    const body = push('refs/heads/fleet');
    assert.equal((await full.inject({ method: 'POST', url: '/admin/v1/webhook', headers: { 'content-type': 'application/json', 'x-hub-signature-256': `sha256=${hmac(body)}` }, payload: body })).json().action, 'pass-requested');
    assert.deepEqual(b2.calls.requestPass, ['webhook']);
    await full.close();
    const none = buildAdminApp({ backend: new FakeBackend(), token: TOKEN });
    assertError(await none.inject({ method: 'POST', url: '/admin/v1/webhook', headers: { 'content-type': 'application/json' }, payload: body }), 404, 'WEBHOOK_NOT_CONFIGURED');
    await none.close();
  });
});

describe('admin API: GET /admin/v1/usage', () => {
  test('rows of the usage book, filtered; a bad since is ADMIN_BAD_REQUEST; no book: no rows', async () => {
    const book = new UsageBook(() => Date.now());
    book.record({ time: Date.now(), key: 'team-a', model: 'good', replica: 'good-a', status: 200, reason: '', durationSeconds: 0.5, tokens: { prompt: 3, cached: 4, completion: 5 } });
    book.record({ time: Date.now(), key: 'team-b', model: 'good', replica: 'good-a', status: 429, reason: 'KEY_RATE_LIMITED', durationSeconds: 0.001, tokens: { prompt: 0, cached: 0, completion: 0 } });
    const { app: a } = app({ usage: book });
    const auth = { authorization: `Bearer ${TOKEN}` };
    const all = await a.inject({ method: 'GET', url: '/admin/v1/usage', headers: auth });
    assert.equal(all.statusCode, 200);
    assert.deepEqual(all.json().rows.map((r: { key: string; requests: number; errors: number }) => [r.key, r.requests, r.errors]), [['team-a', 1, 0], ['team-b', 1, 1]]);
    const one = await a.inject({ method: 'GET', url: '/admin/v1/usage?key=team-a&since=1h', headers: auth });
    assert.equal(one.json().rows.length, 1);
    assert.match(one.json().since, /^\d{4}-/);
    assertError(await a.inject({ method: 'GET', url: '/admin/v1/usage?since=soon', headers: auth }), 400, 'ADMIN_BAD_REQUEST');
    await a.close();
    const { app: b } = app();
    assert.deepEqual((await b.inject({ method: 'GET', url: '/admin/v1/usage', headers: auth })).json().rows, []);
    await b.close();
  });
});

describe('admin API: what an unauthenticated client can make the port hold', () => {
  const forged = `sha256=${'ab'.repeat(32)}`;
  /** A raw socket that sends `head` and keeps the connection open; records the answer's first line and its close. */
  const raw = async (port: number, head: string): Promise<{ first: () => string; closed: () => boolean; sock: import('node:net').Socket }> => {
    const { connect } = await import('node:net');
    const sock = connect(port, '127.0.0.1');
    let text = '';
    let isClosed = false;
    sock.on('data', (b: Buffer) => (text += b.toString('latin1')));
    sock.on('error', () => undefined);
    sock.on('close', () => (isClosed = true));
    sock.write(head);
    return { first: () => text.split('\r\n')[0] ?? '', closed: () => isClosed, sock };
  };
  /**
   * How many requests the server has parsed the headers of. The admin app's onRequest hooks (the
   * gates) are synchronous and run in fastify's 'request' listener, registered before this one: a
   * request counted here has been admitted or refused by them.
   */
  const requestsSeen = (a: FastifyInstance): (() => number) => {
    let n = 0;
    a.server.on('request', () => n++);
    return () => n;
  };
  const hookHead = (len: number, sig = `x-hub-signature-256: ${forged}`): string =>
    `POST /admin/v1/webhook HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-github-event: push\r\n${sig}\r\ncontent-length: ${len}\r\n\r\n{`;

  test('a forged well-formed signature declaring 1 MiB is refused from its headers (413), and a wrong GitLab token before its body (401)', async () => {
    const { app: a } = app();
    await a.listen({ host: '127.0.0.1', port: 0 });
    try {
      const port = (a.server.address() as import('node:net').AddressInfo).port;
      const big = await raw(port, hookHead(1024 * 1024));
      await until('an answer to the 1 MiB webhook', 3000, () => big.first() !== '');
      assert.equal(big.first(), 'HTTP/1.1 413 Payload Too Large');
      const lab = await raw(port, hookHead(60_000, 'x-gitlab-token: not-the-secret-at-all'));
      await until('an answer to the wrong GitLab token', 3000, () => lab.first() !== '');
      assert.equal(lab.first(), 'HTTP/1.1 401 Unauthorized');
      for (const s of [big, lab]) s.sock.destroy();
    } finally {
      await a.close();
    }
  });

  test('at most N webhook bodies are read before their signature is checked, each for at most webhookBodyMs; a signed one gets through after', async () => {
    const { app: a, backend } = app({ limits: { pollMs: 5, webhookUnverified: 2, webhookBodyMs: 400 } });
    await a.listen({ host: '127.0.0.1', port: 0 });
    try {
      const port = (a.server.address() as import('node:net').AddressInfo).port;
      const arrived = requestsSeen(a);
      const held = [await raw(port, hookHead(50_000)), await raw(port, hookHead(50_000))];
      await until('both held webhooks through their onRequest hooks (synchronous: done when the server has seen them)', 3000, () => arrived() === 2);
      const third = await raw(port, hookHead(50_000));
      await until('an answer to the third webhook', 3000, () => third.first() !== '');
      assert.equal(third.first(), 'HTTP/1.1 503 Service Unavailable');
      const t0 = Date.now();
      await until('the held webhook bodies closed by their deadline', 3000, () => held.every((h) => h.closed()));
      assert.ok(Date.now() - t0 < 1500, `held for ${Date.now() - t0} ms`);
      await until('the refused socket closed', 3000, () => third.closed());
      const body = JSON.stringify({ ref: 'refs/heads/main', commits: [] });
      const sig = createHmac('sha256', SECRET).update(body).digest('hex');
      const ok = await fetch(`http://127.0.0.1:${port}/admin/v1/webhook`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-github-event': 'push', 'x-hub-signature-256': `sha256=${sig}` }, body });
      assert.equal(ok.status, 202);
      assert.equal(backend.calls.requestPass.at(-1), 'webhook');
    } finally {
      await a.close();
    }
  });

  test('at most maxInFlight requests on the admin port: above it 503 ADMIN_OVERLOADED with Retry-After; below it again 200', async () => {
    const { app: a } = app({ limits: { pollMs: 5, maxInFlight: 2 } });
    await a.listen({ host: '127.0.0.1', port: 0 });
    try {
      const port = (a.server.address() as import('node:net').AddressInfo).port;
      const head = `POST /admin/v1/restart HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${TOKEN}\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{`;
      const arrived = requestsSeen(a);
      const held = [await raw(port, head), await raw(port, head)];
      await until('both held requests through their onRequest hooks (synchronous: done when the server has seen them)', 3000, () => arrived() === 2);
      const r = await fetch(`http://127.0.0.1:${port}/admin/v1/status`, { headers: auth });
      assert.equal(r.status, 503);
      assert.equal(r.headers.get('retry-after'), '1');
      assert.equal(((await r.json()) as { error: { code: string } }).error.code, 'ADMIN_OVERLOADED');
      for (const h of held) h.sock.destroy();
      await until('status answers once the held requests are gone', 3000, async () => (await fetch(`http://127.0.0.1:${port}/admin/v1/status`, { headers: auth })).status === 200);
    } finally {
      await a.close();
    }
  });
});
