/**
 * The admin API's rollout routes via inject() over a backend whose overrides apply the real pure
 * transition (test/harness/rollout-backend.ts): GET /models/:name/rollout, POST …/rollout/promote|abort —
 * what they answer, who they say did it, and their errors.
 */
import { strict as assert } from 'node:assert';
import { beforeEach, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { buildAdminApp } from '../../src/admin/app.js';
import { overrideMessage } from '../../src/admin/routes/rollout.js';
import { Reasons } from '../../src/errors/catalogue.js';
import type { RolloutOneJson, RolloutOverrideJson } from '../../src/wire/shape.js';
import { CHAT_FIGURES, ROLLOUT_AT, ROLLOUT_SPEC, RolloutBackend } from '../harness/rollout-backend.js';

const TOKEN = 'admin-token-for-rollout-tests';
const auth = { authorization: `Bearer ${TOKEN}` };

let backend: RolloutBackend;
let app: FastifyInstance;

beforeEach(() => {
  backend = new RolloutBackend();
  app = buildAdminApp({ backend, token: TOKEN });
});

function errorOf(res: { statusCode: number; json(): unknown }, status: number, code: keyof typeof Reasons): { message: string; hint: string } {
  assert.equal(res.statusCode, status, JSON.stringify(res.json()));
  const e = (res.json() as { error: { code: string; message: string; hint: string } }).error;
  assert.equal(e.code, code);
  assert.equal(e.hint, Reasons[code].hint);
  return e;
}

describe('GET /admin/v1/models/:name/rollout', () => {
  test('a canary: its step of every step, share, end, both arms\' live figures; by alias too', async () => {
    for (const name of ['chat', 'chat-alias']) {
      const res = await app.inject({ method: 'GET', url: `/admin/v1/models/${name}/rollout`, headers: auth });
      assert.equal(res.statusCode, 200);
      assert.equal(res.headers['cache-control'], 'no-store');
      const b = res.json() as RolloutOneJson;
      assert.equal(b.model, 'chat');
      assert.equal(b.at, new Date(ROLLOUT_AT).toISOString());
      assert.equal(b.digest, ROLLOUT_SPEC.models.chat!.digest);
      assert.deepEqual(b.rollout, {
        phase: 'canary',
        digest: ROLLOUT_SPEC.models.chat!.digest,
        stableDigest: 'a'.repeat(64),
        since: new Date(ROLLOUT_AT - 40_000).toISOString(),
        step: 0,
        steps: [0.1, 0.5],
        share: 0.1,
        until: new Date(ROLLOUT_AT + 80_000).toISOString(),
        verdict: null,
        arms: { stable: CHAT_FIGURES.stable, canary: CHAT_FIGURES.canary, verdict: 'fail' },
        stableGone: false,
      });
    }
  });

  test('a held rollout carries its verdict with the hint naming the model; a model without one answers null', async () => {
    const held = (await app.inject({ method: 'GET', url: '/admin/v1/models/embed/rollout', headers: auth })).json() as RolloutOneJson;
    assert.equal(held.rollout?.phase, 'held');
    assert.equal(held.rollout?.step, null); // a step is the canary's while it runs
    assert.equal(held.rollout?.verdict?.code, 'ROLLOUT_HELD');
    assert.match(held.rollout!.verdict!.hint, /llmgw ctl rollout promote embed/);
    const none = await app.inject({ method: 'GET', url: '/admin/v1/models/plain/rollout', headers: auth });
    assert.equal(none.statusCode, 200);
    assert.deepEqual(none.json(), { at: new Date(ROLLOUT_AT).toISOString(), model: 'plain', digest: ROLLOUT_SPEC.models.plain!.digest, rollout: null });
  });

  test('an unknown model: 404 NOT_FOUND; without the token: 401', async () => {
    errorOf(await app.inject({ method: 'GET', url: '/admin/v1/models/nope/rollout', headers: auth }), 404, 'NOT_FOUND');
    errorOf(await app.inject({ method: 'GET', url: '/admin/v1/models/chat/rollout' }), 401, 'ADMIN_AUTH_MISSING');
  });
});

describe('POST /admin/v1/models/:name/rollout/promote|abort', () => {
  test('abort a canary: rolled back at its step\'s share, by whom the body says; the answer is the rollout after', async () => {
    const res = await app.inject({ method: 'POST', url: '/admin/v1/models/chat-alias/rollout/abort', headers: auth, payload: { by: 'llmgw ctl (alice@laptop)' } });
    assert.equal(res.statusCode, 200, res.body);
    const b = res.json() as RolloutOverrideJson;
    assert.deepEqual(backend.calls, [{ model: 'chat', how: 'abort', by: 'llmgw ctl (alice@laptop)' }]);
    assert.equal(b.model, 'chat');
    assert.equal(b.outcome, 'aborted');
    assert.equal(b.rollout.phase, 'rolled_back');
    assert.equal(b.rollout.arms, null);
    assert.equal(b.rollout.verdict?.code, 'ROLLOUT_ABORTED');
    assert.equal(b.rollout.verdict?.message, 'rollout aborted at 10% by llmgw ctl (alice@laptop); the stable revision serves');
    assert.match(b.rollout.verdict!.hint, /llmgw ctl retry chat/);
    assert.match(b.message, /^chat: rollout of revision [0-9a-f]{12} aborted; aaaaaaaaaaaa serves/);
    // the snapshot shows it too
    const after = (await app.inject({ method: 'GET', url: '/admin/v1/models/chat/rollout', headers: auth })).json() as RolloutOneJson;
    assert.equal(after.rollout?.phase, 'rolled_back');
  });

  test('promote a held revision, with no body: said to be by the admin API; a second promote is "already"', async () => {
    const res = await app.inject({ method: 'POST', url: '/admin/v1/models/embed/rollout/promote', headers: auth });
    assert.equal(res.statusCode, 200, res.body);
    const b = res.json() as RolloutOverrideJson;
    assert.equal(b.outcome, 'promoted');
    assert.equal(b.rollout.phase, 'promoted');
    assert.equal(b.rollout.verdict, null);
    assert.equal(backend.calls[0]!.by, 'the admin API');
    assert.match(b.message, /^embed: revision [0-9a-f]{12} promoted; it replaces bbbbbbbbbbbb replica by replica, surge-first$/);
    const again = (await app.inject({ method: 'POST', url: '/admin/v1/models/embed/rollout/promote', headers: auth })).json() as RolloutOverrideJson;
    assert.equal(again.outcome, 'already');
    assert.match(again.message, /was promoted already; nothing changed$/);
    const abort = (await app.inject({ method: 'POST', url: '/admin/v1/models/embed/rollout/abort', headers: auth })).json() as RolloutOverrideJson;
    assert.equal(abort.outcome, 'already');
    assert.match(abort.message, /nothing changed \(to go back, push the old definition\)$/);
  });

  test('a model without a rollout: 409 ROLLOUT_NONE; an unknown one: 404 before the backend is asked', async () => {
    const e = errorOf(await app.inject({ method: 'POST', url: '/admin/v1/models/plain/rollout/abort', headers: auth }), 409, 'ROLLOUT_NONE');
    assert.match(e.message, /plain has no rollout to abort/);
    errorOf(await app.inject({ method: 'POST', url: '/admin/v1/models/nope/rollout/promote', headers: auth }), 404, 'NOT_FOUND');
    assert.deepEqual(backend.calls.map((c) => c.model), ['plain']);
  });

  test('a body that is not { by }: 400 ADMIN_BAD_REQUEST, nothing overridden', async () => {
    for (const payload of [{ by: 'x\u001b[31m' }, { by: '' }, { by: 'x'.repeat(121) }, { by: 'ops', force: true }, ['ops']]) {
      errorOf(await app.inject({ method: 'POST', url: '/admin/v1/models/chat/rollout/abort', headers: auth, payload }), 400, 'ADMIN_BAD_REQUEST');
    }
    errorOf(await app.inject({ method: 'POST', url: '/admin/v1/models/chat/rollout/delete', headers: auth }), 404, 'ADMIN_ROUTE_NOT_FOUND');
    assert.deepEqual(backend.calls, []);
    assert.equal(backend.records.chat?.phase, 'canary');
  });

  test('overrideMessage: every outcome in words', () => {
    const view = { phase: 'rolled_back' as const, stableDigest: 's'.repeat(64), canaryDigest: 'c'.repeat(64), step: 0, share: 0, since: 0, until: null, verdict: null };
    assert.equal(overrideMessage({ model: 'm', outcome: 'already', rollout: view }, 'abort'), 'm: the rollout of revision cccccccccccc was rolled back already; nothing changed');
    assert.equal(overrideMessage({ model: 'm', outcome: 'aborted', rollout: view }, 'abort'), 'm: rollout of revision cccccccccccc aborted; ssssssssssss serves, and cccccccccccc stays held until its definition changes or `llmgw ctl retry m`');
  });
});
