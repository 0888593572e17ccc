/**
 * A change of access/keys.yaml takes effect at the next sync without touching replicas (#26 item 1),
 * on the real stack: a controller over a git fleet repo and an sshd node running two models on the
 * real llama-server, and the router in front of it with auth required. The operator pushes a new
 * keys.yaml (a requests_per_minute limit on a key, and a second model added to its models); after the
 * next pass the key reaches the new model and its third request within the minute is refused with
 * 429 KEY_RATE_LIMITED, while the models' definition digests and replica ids are what they were and
 * the controller logged no replica start or stop after the push.
 */
import { strict as assert } from 'node:assert';
import { createHash } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { buildRouter } from '../../src/router/app.js';
import { modelYaml, startTestFleet, type TestController, type TestFleet } from '../harness/controller.js';

const TEAM_KEY = 'keys-sync-team-key-0001';
const OTHER_KEY = 'keys-sync-other-key-0002';
const sha = (k: string): string => createHash('sha256').update(k).digest('hex');

const keysYaml = (team: string[]): string =>
  ['keys:', '  - name: team', `    sha256: ${sha(TEAM_KEY)}`, ...team.map((l) => `    ${l}`), '  - name: other', `    sha256: ${sha(OTHER_KEY)}`, '    models: ["*"]', ''].join('\n');

let fleet: TestFleet;
let ctl: TestController;
let router: FastifyInstance;
let origin = '';

before(async () => {
  fleet = await startTestFleet({ nodes: 1 });
  const files = fleet.baseFiles();
  delete files['models/kev.yaml'];
  delete files['models/huge.yaml'];
  files['models/good2.yaml'] = modelYaml(fleet.models.good2, ['replicas: 1']);
  files['access/keys.yaml'] = keysYaml(['models: [good]']);
  await fleet.push(files, 'two models; key team may use good, without limits');
  ctl = await fleet.startController();
  router = buildRouter({ fleet: ctl.reconciler, auth: { required: true } });
  await router.listen({ port: 0, host: '127.0.0.1' });
  origin = `http://127.0.0.1:${(router.server.address() as AddressInfo).port}`;
});

after(async () => {
  await router?.close();
  await fleet?.cleanup();
});

async function chat(key: string, model: string): Promise<{ status: number; reason: string; retryAfter: string | null; body: { error?: { code?: string; message?: string } } }> {
  const r = await fetch(`${origin}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }),
    signal: AbortSignal.timeout(60_000),
  });
  return { status: r.status, reason: r.headers.get('x-llmgw-reason') ?? '', retryAfter: r.headers.get('retry-after'), body: (await r.json()) as { error?: { code?: string; message?: string } } };
}

describe('access/keys.yaml changed in git', { timeout: 5 * 60_000 }, () => {
  it('takes effect at the next sync: the new limit refuses with KEY_RATE_LIMITED, the new model is reachable, and no replica is started or stopped', async () => {
    const model = (name: string) => ctl.reconciler.model(name);
    await ctl.until('good and good2 ready', 90_000, () => model('good')?.phase === 'ready' && model('good2')?.phase === 'ready');

    // before: team may use good only, without limits
    for (let i = 0; i < 3; i++) assert.equal((await chat(TEAM_KEY, 'good')).status, 200);
    const forbidden = await chat(TEAM_KEY, 'good2');
    assert.equal(forbidden.status, 403);
    assert.equal(forbidden.reason, 'MODEL_FORBIDDEN');

    const spec = ctl.reconciler.spec()!;
    const digests = { good: spec.models['good']!.digest, good2: spec.models['good2']!.digest };
    const replicas = (name: string): string[] => (model(name)?.replicas ?? []).map((r) => `${r.id} ${r.phase} ${r.digest} ${r.startedAt}`).sort();
    const before = { good: replicas('good'), good2: replicas('good2') };
    assert.equal(before.good.length, 1);
    assert.equal(before.good2.length, 1);
    const starts = new Map(ctl.starts);
    const revisionBefore = ctl.reconciler.snapshot().appliedRevision;
    const logsBefore = ctl.logs.length;
    // the log is captured: the two starts are in it (so the check below would see another)
    assert.equal(ctl.logs.filter((l) => l.msg === 'starting replica').length, 2);

    const oid = await fleet.push({ 'access/keys.yaml': keysYaml(['models: [good, good2]', 'limits: { requests_per_minute: 2 }']) }, 'key team: good2 too, 2 requests a minute');
    assert.notEqual(oid, revisionBefore);
    await ctl.until('the keys.yaml revision applied', 60_000, () => ctl.reconciler.snapshot().appliedRevision === oid);

    // the next pass applied it: team reaches good2 now, and its third request in the minute is refused
    assert.equal((await chat(TEAM_KEY, 'good2')).status, 200);
    assert.equal((await chat(TEAM_KEY, 'good')).status, 200);
    const refused = await chat(TEAM_KEY, 'good');
    assert.equal(refused.status, 429, JSON.stringify(refused.body));
    assert.equal(refused.reason, 'KEY_RATE_LIMITED');
    assert.equal(refused.body.error?.code, 'key_rate_limit_exceeded');
    assert.match(refused.body.error?.message ?? '', /key 'team' allows 2 requests per minute \(access\/keys\.yaml\)/);
    const retryAfter = Number(refused.retryAfter);
    assert.ok(retryAfter > 0 && retryAfter <= 60, `Retry-After ${refused.retryAfter}`);
    // the other key has no limit, and the limit is team's own
    for (let i = 0; i < 3; i++) assert.equal((await chat(OTHER_KEY, 'good')).status, 200);

    // a few more passes: still nothing touched
    for (let i = 0; i < 3; i++) await ctl.reconciler.requestPass('test');
    const after = ctl.reconciler.spec()!;
    assert.deepEqual({ good: after.models['good']!.digest, good2: after.models['good2']!.digest }, digests, "the models' definition digests are unchanged");
    assert.deepEqual({ good: replicas('good'), good2: replicas('good2') }, before, 'the same replicas, ready, of the same definition');
    assert.deepEqual(new Map(ctl.starts), starts, 'no replica start through the driver');
    const touched = ctl.logs.slice(logsBefore).filter((l) => l.msg === 'starting replica' || l.msg === 'stopping replica');
    assert.deepEqual(touched, [], 'no replica started or stopped after the push');
    assert.equal(model('good')?.phase, 'ready');
    assert.equal(model('good2')?.phase, 'ready');
  });
});
