/** Model state → router answer, exactly as the design's "Router answers" table, against a pure fake FleetView. */
import { strict as assert } from 'node:assert';
import { after, before, beforeEach, describe, test } from 'node:test';
import { buildRouter } from '../../src/router/app.js';
import { LlmgwError } from '../../src/errors/catalogue.js';
import { Activator, CONTROLLER_RETRY_AFTER_SECONDS, LOADING_RETRY_AFTER_SECONDS } from '../../src/router/resolve.js';
import { RouterError } from '../../src/router/errors.js';
import { FakeFleetView, fakeSpec, replica } from '../harness/fake-fleet-view.js';
import { startStubUpstream, type StubUpstream } from '../harness/stub-upstream.js';
import { until } from '../harness/wait.js';

const KEY = { authorization: 'Bearer k' };
const onDemand = { mode: 'on_demand', idleTimeoutMs: 600_000, maxReplicas: 1 } as const;

function makeSpec(activationWindowMs: number) {
  return fakeSpec({
    models: { ready: {}, parked: {}, unplaceable: { scaling: onDemand }, lazy: { scaling: onDemand }, failing: {}, starting: {} },
    keys: [{ name: 'k', key: 'k', models: ['*'] }],
    settings: { activationWindowMs },
  });
}

describe('router model states (inject, fake view)', () => {
  let stub: StubUpstream;
  let fleet: FakeFleetView;
  let app: ReturnType<typeof buildRouter>;

  before(async () => {
    stub = await startStubUpstream();
  });
  after(async () => {
    await app?.close();
    await stub.close();
  });
  beforeEach(async () => {
    await app?.close();
    fleet = new FakeFleetView(makeSpec(30_000));
    fleet.setReady('ready', [replica('ready', stub.url)]);
    app = buildRouter({ fleet, auth: { required: true } });
  });

  const ask = (model: string) => app.inject({ method: 'POST', url: '/v1/chat/completions', headers: KEY, payload: JSON.stringify({ model, messages: [] }) });
  /** Runs `then` once a request waits for `model` to be ready: the change lands during the wait, with no guessed delay. */
  const onceWaiting = (model: string, then: () => void): Promise<void> => until(`a request waiting for ${model} to be ready`, 5_000, () => fleet.waiting(model) > 0).then(then);

  test('ready → proxied; touch() at the start and the end of each request; no demand()', async () => {
    const r = await ask('ready');
    assert.equal(r.statusCode, 200);
    assert.deepEqual(fleet.calls.touch, ['ready', 'ready']);
    assert.deepEqual(fleet.calls.demand, []);
  });

  test('parked → 503 model_parked at once: last error, how to unpark, x-should-retry false; no placement attempt', async () => {
    fleet.setParked('parked', { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: "unknown model architecture: 'kev'" });
    const t = performance.now();
    const r = await ask('parked');
    assert.ok(performance.now() - t < 1000);
    assert.equal(r.statusCode, 503);
    assert.equal(r.headers['x-should-retry'], 'false');
    assert.equal(r.headers['retry-after'], undefined);
    const e = r.json().error;
    assert.equal(e.code, 'model_parked');
    assert.match(e.message, /unknown model architecture: 'kev'/);
    assert.match(e.message, /llmgw ctl retry parked/);
    assert.match(e.message, /Llmgw-Retry: parked/);
    assert.deepEqual(fleet.calls.demand, []);
    assert.deepEqual(fleet.calls.waitReady, []);
  });

  test('unplaceable → a fresh placement attempt, then 503 model_unplaceable with its reason (not after the window)', async () => {
    fleet.setUnplaceable('unplaceable', 'stale reason');
    fleet.demandDelayMs = 150;
    fleet.onDemand = () => ({ kind: 'unplaceable', code: 'PLACEMENT_NO_ROOM', reason: 'needs 14.2 GiB; largest free is 11.8 GiB on cpu-02; 3 nodes checked' });
    const t = performance.now();
    const r = await ask('unplaceable');
    const ms = performance.now() - t;
    assert.ok(ms >= 140 && ms < 2000, `${ms} ms`);
    assert.equal(r.statusCode, 503);
    assert.equal(r.headers['x-should-retry'], 'false');
    assert.equal(r.json().error.code, 'model_unplaceable');
    assert.match(r.json().error.message, /needs 14\.2 GiB; largest free is 11\.8 GiB/);
    assert.deepEqual(fleet.calls.demand, ['unplaceable']);
    assert.deepEqual(fleet.calls.waitReady, []);
  });

  test('unplaceable, but the fresh attempt finds room → starts and is proxied', async () => {
    fleet.setUnplaceable('unplaceable', 'no room (before an idle replica was stopped)');
    let started: Promise<void> | undefined;
    fleet.onDemand = (m) => {
      started = onceWaiting(m, () => fleet.setReady(m, [replica(m, stub.url)]));
      return { kind: 'starting' };
    };
    const r = await ask('unplaceable');
    await started;
    assert.equal(r.statusCode, 200, r.body);
  });

  test('on-demand idle → demand(), wait for ready within the window, proxied', async () => {
    fleet.setPhase('lazy', 'idle');
    let readyWhileWaiting = false;
    let started: Promise<void> | undefined;
    fleet.onDemand = (m) => {
      started = onceWaiting(m, () => {
        readyWhileWaiting = true;
        fleet.setReady(m, [replica(m, stub.url)]);
      });
      return { kind: 'starting' };
    };
    const r = await ask('lazy');
    await started;
    assert.equal(r.statusCode, 200, r.body);
    assert.ok(readyWhileWaiting, 'the request waited, and was answered once the replica was ready');
    assert.deepEqual(fleet.calls.demand, ['lazy']);
    assert.deepEqual(fleet.calls.waitReady, ['lazy']);
  });

  test('still loading at the end of the window → 503 model_loading with Retry-After', async () => {
    fleet.setSpec(makeSpec(300));
    fleet.setPhase('lazy', 'idle');
    const t = performance.now();
    const r = await ask('lazy');
    const ms = performance.now() - t;
    assert.ok(ms >= 280 && ms < 2000, `${ms} ms`);
    assert.equal(r.statusCode, 503);
    assert.equal(r.json().error.code, 'model_loading');
    assert.equal(r.headers['retry-after'], String(LOADING_RETRY_AFTER_SECONDS));
    assert.equal(r.headers['x-should-retry'], 'true');
  });

  test('a standby whose leader does not answer: the attempt gets the window (less a margin), then 503 leader_unavailable with Retry-After, within the window', async () => {
    fleet.setSpec(makeSpec(1500));
    fleet.setPhase('lazy', 'idle');
    // as a standby's forward does: no answer until its timeout, then LEADER_UNAVAILABLE
    // deliberate: the window's budget in real time is what is tested (the router's timers are node's own)
    fleet.onDemand = (_m, o) => new Promise((_, reject) => setTimeout(() => reject(new LlmgwError('LEADER_UNAVAILABLE', `no leader answered the demand request within ${o?.timeoutMs} ms`)), o?.timeoutMs ?? 60_000));
    const t = performance.now();
    const r = await ask('lazy');
    const ms = performance.now() - t;
    const timeout = fleet.demandTimeouts[0]!;
    assert.ok(timeout >= 1000 && timeout <= 1500 - 100, `the attempt was given ${timeout} ms of a 1500 ms window`);
    assert.ok(ms >= timeout - 20 && ms < 1500, `${ms} ms`);
    assert.equal(r.statusCode, 503);
    assert.equal(r.json().error.code, 'leader_unavailable');
    assert.equal(r.headers['x-llmgw-reason'], 'LEADER_UNAVAILABLE');
    assert.equal(r.headers['retry-after'], String(CONTROLLER_RETRY_AFTER_SECONDS));
    assert.equal(r.headers['x-should-retry'], 'true');
    assert.match(r.json().error.message, /no leader answered the demand request/);
  });

  test('a standby that cannot reach etcd → 503 etcd_unavailable with Retry-After at once; Anthropic envelope likewise', async () => {
    fleet.setPhase('lazy', 'idle');
    fleet.onDemand = () => Promise.reject(new LlmgwError('ETCD_UNAVAILABLE', 'etcd did not answer (14 UNAVAILABLE)'));
    const r = await ask('lazy');
    assert.equal(r.statusCode, 503);
    assert.equal(r.json().error.code, 'etcd_unavailable');
    assert.equal(r.headers['retry-after'], String(CONTROLLER_RETRY_AFTER_SECONDS));
    const a = await app.inject({ method: 'POST', url: '/v1/messages', headers: KEY, payload: JSON.stringify({ model: 'lazy', max_tokens: 1, messages: [] }) });
    assert.equal(a.statusCode, 503);
    assert.equal(a.json().error.type, 'overloaded_error');
    assert.equal(a.headers['x-llmgw-reason'], 'ETCD_UNAVAILABLE');
  });

  test('no leader answered, but a replica became ready meanwhile → proxied; any other failure of the attempt stays 500 internal_error', async () => {
    fleet.setPhase('lazy', 'idle');
    fleet.onDemand = (m) => {
      fleet.setReady(m, [replica(m, stub.url)]);
      return Promise.reject(new LlmgwError('LEADER_UNAVAILABLE', 'no leader'));
    };
    assert.equal((await ask('lazy')).statusCode, 200);
    fleet.setPhase('starting', 'idle');
    fleet.onDemand = () => Promise.reject(new Error('a bug'));
    const r = await ask('starting');
    assert.equal(r.statusCode, 500);
    assert.equal(r.json().error.code, 'internal_error');
  });

  test('parked while waiting → model_parked, not model_loading', async () => {
    let parked: Promise<void> | undefined;
    fleet.onDemand = (m) => {
      parked = onceWaiting(m, () => fleet.setParked(m, { code: 'REPLICA_EXITED', message: 'exit 1' }));
      return { kind: 'starting' };
    };
    const r = await ask('starting');
    await parked;
    assert.equal(r.statusCode, 503);
    assert.equal(r.json().error.code, 'model_parked');
  });

  test('failing (backoff) → 503 model_failing with the last error and Retry-After = seconds to the next attempt', async () => {
    fleet.setFailing('failing', { code: 'REPLICA_EXITED', message: 'segfault' }, new Date(Date.now() + 12_300).toISOString());
    const r = await ask('failing');
    assert.equal(r.statusCode, 503);
    assert.equal(r.json().error.code, 'model_failing');
    assert.match(r.json().error.message, /segfault/);
    const ra = Number(r.headers['retry-after']);
    assert.ok(ra >= 12 && ra <= 13, String(ra));
    assert.deepEqual(fleet.calls.demand, []);
  });

  test('demand() says parked/failing for a model that looked startable', async () => {
    fleet.onDemand = () => ({ kind: 'parked', since: Date.parse('2026-01-01T00:00:00Z'), lastError: { code: 'REPLICA_OUT_OF_MEMORY', message: 'oom' } });
    const p = await ask('starting');
    assert.equal(p.json().error.code, 'model_parked');
    fleet.onDemand = () => ({ kind: 'failing', lastError: null, nextAttemptAt: null });
    const f = await ask('starting');
    assert.equal(f.json().error.code, 'model_failing');
    assert.equal(f.headers['retry-after'], '10');
  });

  test('unknown name → 404 model_not_found; alias of nothing likewise', async () => {
    const r = await ask('gpt-9');
    assert.equal(r.statusCode, 404);
    assert.equal(r.json().error.code, 'model_not_found');
    assert.deepEqual(fleet.calls.touch, []);
  });

  test('GET /v1/models shows each model with its phase and why it is refused', async () => {
    fleet.setParked('parked', { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: "unknown model architecture: 'kev'" });
    fleet.setUnplaceable('unplaceable', 'needs 14 GiB');
    const r = await app.inject({ method: 'GET', url: '/v1/models', headers: KEY });
    assert.equal(r.statusCode, 200);
    const byId = new Map<string, { object: string; owned_by: string; llmgw: { phase: string; reason?: string; ready: number } }>(
      r.json().data.map((m: { id: string }) => [m.id, m]),
    );
    assert.equal(r.json().object, 'list');
    assert.equal(byId.get('ready')?.llmgw.phase, 'ready');
    assert.equal(byId.get('ready')?.llmgw.ready, 1);
    assert.equal(byId.get('ready')?.object, 'model');
    assert.equal(byId.get('parked')?.llmgw.phase, 'parked');
    assert.match(byId.get('parked')?.llmgw.reason ?? '', /kev/);
    assert.equal(byId.get('unplaceable')?.llmgw.reason, 'needs 14 GiB');
    const one = await app.inject({ method: 'GET', url: '/v1/models/ready', headers: KEY });
    assert.equal(one.json().id, 'ready');
    const none = await app.inject({ method: 'GET', url: '/v1/models/nope', headers: KEY });
    assert.equal(none.statusCode, 404);
    assert.equal(none.json().error.code, 'model_not_found');
  });
});

describe('Activator', () => {
  test('concurrent requests for one model share one placement attempt', async () => {
    const fleet = new FakeFleetView(makeSpec(30_000));
    fleet.demandDelayMs = 50;
    fleet.onDemand = () => ({ kind: 'unplaceable', code: 'PLACEMENT_NO_ROOM', reason: 'no room' });
    const a = new Activator(fleet);
    const signal = new AbortController().signal;
    const results = await Promise.allSettled([1, 2, 3].map(() => a.activate('lazy', { windowMs: 30_000, startedAt: Date.now(), signal })));
    assert.equal(fleet.calls.demand.length, 1);
    for (const r of results) assert.ok(r.status === 'rejected' && r.reason instanceof RouterError && r.reason.code === 'MODEL_UNPLACEABLE');
    // a later request makes a fresh attempt
    await a.activate('lazy', { windowMs: 30_000, startedAt: Date.now(), signal }).catch(() => undefined);
    assert.equal(fleet.calls.demand.length, 2);
  });

  test('an aborted wait rejects with the abort reason', async () => {
    const fleet = new FakeFleetView(makeSpec(30_000));
    const a = new Activator(fleet);
    const ac = new AbortController();
    const p = a.activate('lazy', { windowMs: 30_000, startedAt: Date.now(), signal: ac.signal });
    await until('the activation waiting for a ready replica', 5_000, () => fleet.waiting('lazy') > 0);
    ac.abort(new Error('gone'));
    await assert.rejects(p, /gone/);
  });
});
