/** Router auth: key extraction, per-spec tables, 401/403 envelopes, auth off only when asked. */
import { strict as assert } from 'node:assert';
import { after, describe, test } from 'node:test';
import { Client } from 'undici';
import type { AddressInfo } from 'node:net';
import { ConnectionKeys, authenticate, compileSpec, extractKey, grantAllows, OPEN_GRANT } from '../../src/router/auth.js';
import { buildRouter } from '../../src/router/app.js';
import { RouterError } from '../../src/router/errors.js';
import { FakeFleetView, fakeSpec, replica } from '../harness/fake-fleet-view.js';
import { defaultStubHandler, startStubUpstream, type StubUpstream } from '../harness/stub-upstream.js';

const spec = fakeSpec({
  models: { alpha: { aliases: ['gpt-alpha'] }, beta: {} },
  keys: [
    { name: 'team', key: 'team-key', models: ['gpt-alpha'] },
    { name: 'admin', key: 'admin-key', models: ['*'] },
  ],
});

describe('router auth (pure)', () => {
  test('extractKey: Bearer (any case), x-api-key, nothing', () => {
    assert.equal(extractKey({ authorization: 'Bearer abc' }), 'abc');
    assert.equal(extractKey({ authorization: 'bearer  abc ' }), 'abc');
    assert.equal(extractKey({ 'x-api-key': 'xyz' }), 'xyz');
    assert.equal(extractKey({ authorization: 'Bearer a', 'x-api-key': 'b' }), 'a');
    assert.equal(extractKey({ authorization: 'Basic Zm9vOmJhcg==' }), null);
    assert.equal(extractKey({ authorization: 'Bearer ' }), null);
    assert.equal(extractKey({}), null);
  });

  test('compileSpec: aliases resolve to canonical names; tables are built once per spec object', () => {
    const c = compileSpec(spec);
    assert.equal(c.names.get('gpt-alpha'), 'alpha');
    assert.equal(c.names.get('alpha'), 'alpha');
    assert.equal(c.names.get('constructor'), undefined, 'no prototype keys');
    assert.equal(compileSpec(spec), c);
    const other = fakeSpec({ models: { alpha: {} } });
    assert.notEqual(compileSpec(other), c);
  });

  test('authenticate: grants by sha256; missing and unknown keys are 401 reasons', () => {
    const c = compileSpec(spec);
    const team = authenticate(c, { authorization: 'Bearer team-key' }, true);
    assert.equal(team.name, 'team');
    assert.ok(grantAllows(team, 'alpha'));
    assert.ok(!grantAllows(team, 'beta'));
    const admin = authenticate(c, { 'x-api-key': 'admin-key' }, true);
    assert.ok(grantAllows(admin, 'beta'));
    assert.throws(() => authenticate(c, {}, true), (e) => e instanceof RouterError && e.code === 'AUTH_MISSING');
    assert.throws(() => authenticate(c, { authorization: 'Bearer nope' }, true), (e) => e instanceof RouterError && e.code === 'AUTH_INVALID');
    assert.equal(authenticate(c, {}, false), OPEN_GRANT);
  });
});

describe('ConnectionKeys (the last verified key of each connection)', () => {
  test('the same header on the same connection gets the same grant; another key, connection or spec is checked again', () => {
    const keys = new ConnectionKeys();
    const c = compileSpec(spec);
    const connA = {};
    const connB = {};
    const team = keys.grant(c, { authorization: 'Bearer team-key' }, true, connA);
    assert.equal(team.name, 'team');
    assert.equal(keys.grant(c, { authorization: 'Bearer team-key' }, true, connA), team);
    // another key on the same connection: its own grant, or 401
    assert.equal(keys.grant(c, { 'x-api-key': 'admin-key' }, true, connA).name, 'admin');
    assert.throws(() => keys.grant(c, { authorization: 'Bearer nope' }, true, connA), (e) => e instanceof RouterError && e.code === 'AUTH_INVALID');
    assert.throws(() => keys.grant(c, {}, true, connA), (e) => e instanceof RouterError && e.code === 'AUTH_MISSING');
    // a refused key is not remembered: the connection's entry still holds admin-key
    assert.throws(() => keys.grant(c, { authorization: 'Bearer nope' }, true, connA), (e) => e instanceof RouterError && e.code === 'AUTH_INVALID');
    // both headers are part of the match
    assert.throws(() => keys.grant(c, { 'x-api-key': 'admin-key', authorization: 'Bearer nope' }, true, connA), (e) => e instanceof RouterError && e.code === 'AUTH_INVALID');
    // another connection knows nothing of connA's keys
    assert.throws(() => keys.grant(c, { authorization: 'Bearer nope' }, true, connB), (e) => e instanceof RouterError);
    // a new revision without team-key: refused on the connection that had it verified
    assert.equal(keys.grant(c, { authorization: 'Bearer team-key' }, true, connB).name, 'team');
    const revoked = compileSpec(fakeSpec({ models: { alpha: {} }, keys: [{ name: 'admin', key: 'admin-key', models: ['*'] }] }));
    assert.throws(() => keys.grant(revoked, { authorization: 'Bearer team-key' }, true, connB), (e) => e instanceof RouterError && e.code === 'AUTH_INVALID');
    assert.equal(keys.grant(c, {}, false, connB), OPEN_GRANT);
  });

  test('over a real keep-alive connection: a key revoked by a new revision, or swapped for a wrong one, is refused at once', async () => {
    const stub = await startStubUpstream();
    const fleet = new FakeFleetView(spec, 'the-engine-key');
    fleet.setReady('alpha', [replica('alpha', stub.url)]);
    const app = buildRouter({ fleet, auth: { required: true } });
    await app.listen({ port: 0, host: '127.0.0.1' });
    const client = new Client(`http://127.0.0.1:${(app.server.address() as AddressInfo).port}`, { pipelining: 1 });
    let connects = 0;
    client.on('connect', () => connects++);
    const post = async (headers: Record<string, string>): Promise<number> => {
      const r = await client.request({ path: '/v1/chat/completions', method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify({ model: 'alpha', messages: [] }) });
      await r.body.dump();
      return r.statusCode;
    };
    try {
      assert.equal(await post({ authorization: 'Bearer team-key' }), 200);
      assert.equal(await post({ authorization: 'Bearer team-key' }), 200);
      assert.equal(await post({ authorization: 'Bearer wrong' }), 401);
      assert.equal(await post({ authorization: 'Bearer team-key' }), 200);
      fleet.setSpec(fakeSpec({ models: { alpha: {} }, keys: [{ name: 'admin', key: 'admin-key', models: ['*'] }] }));
      assert.equal(await post({ authorization: 'Bearer team-key' }), 401);
      assert.equal(await post({ 'x-api-key': 'admin-key' }), 200);
      assert.equal(connects, 1, 'all on one connection');
    } finally {
      await client.close();
      await app.close();
      await stub.close();
    }
  });
});

describe('router auth (inject)', () => {
  let stub: StubUpstream;
  const apps: { close(): Promise<unknown> }[] = [];
  after(async () => {
    for (const a of apps) await a.close();
    await stub?.close();
  });

  async function setup(required: boolean) {
    stub ??= await startStubUpstream();
    const fleet = new FakeFleetView(spec, 'the-engine-key');
    fleet.setReady('alpha', [replica('alpha', stub.url)]);
    fleet.setReady('beta', [replica('beta', stub.url)]);
    const app = buildRouter({ fleet, auth: { required } });
    apps.push(app);
    return { app, fleet };
  }
  const chat = (model: string) => JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }] });

  test('no key → 401 missing_api_key; wrong key → 401 invalid_api_key; neither reaches a replica', async () => {
    const { app } = await setup(true);
    const before = stub.requests.length;
    const missing = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { 'content-type': 'application/json' }, payload: chat('alpha') });
    assert.equal(missing.statusCode, 401);
    assert.deepEqual(missing.json(), {
      error: { message: missing.json().error.message, type: 'authentication_error', code: 'missing_api_key', param: null },
    });
    assert.equal(missing.headers['x-should-retry'], 'false');
    const wrong = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { authorization: 'Bearer wrong' }, payload: chat('alpha') });
    assert.equal(wrong.statusCode, 401);
    assert.equal(wrong.json().error.code, 'invalid_api_key');
    assert.equal(wrong.json().error.type, 'authentication_error');
    const models = await app.inject({ method: 'GET', url: '/v1/models', headers: { 'x-api-key': 'wrong' } });
    assert.equal(models.statusCode, 401);
    assert.equal(stub.requests.length, before);
  });

  test('a key not allowed the model → 403 model_not_allowed; allowed via alias or * → proxied', async () => {
    const { app } = await setup(true);
    const before = stub.requests.length;
    const forbidden = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { authorization: 'Bearer team-key' }, payload: chat('beta') });
    assert.equal(forbidden.statusCode, 403);
    assert.equal(forbidden.json().error.code, 'model_not_allowed');
    assert.equal(forbidden.json().error.type, 'permission_error');
    assert.equal(forbidden.json().error.param, 'model');
    assert.equal(stub.requests.length, before);
    const viaAlias = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { authorization: 'Bearer team-key' }, payload: chat('gpt-alpha') });
    assert.equal(viaAlias.statusCode, 200);
    const admin = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { 'x-api-key': 'admin-key' }, payload: chat('beta') });
    assert.equal(admin.statusCode, 200);
    assert.equal(stub.requests.length, before + 2);
  });

  test("the client's key is never forwarded; the engine key is, and never comes back", async () => {
    const { app } = await setup(true);
    stub.handler = (_req, res) => {
      // a misbehaving upstream echoing credentials in headers
      res.writeHead(200, {
        'content-type': 'application/json',
        'x-api-key': 'the-engine-key',
        'www-authenticate': 'Bearer the-engine-key',
        authorization: 'Bearer the-engine-key',
        'set-cookie': 'k=the-engine-key',
        server: 'llama.cpp',
        'access-control-allow-origin': '*',
      });
      res.end('{"ok":true}');
    };
    try {
      const r = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { authorization: 'Bearer admin-key', 'x-api-key': 'admin-key' }, payload: chat('alpha') });
      assert.equal(r.statusCode, 200);
      const got = stub.requests.at(-1)!;
      assert.equal(got.headers.authorization, 'Bearer the-engine-key');
      assert.equal(got.headers['x-api-key'], undefined);
      assert.ok(!JSON.stringify(got.headers).includes('admin-key'));
      assert.ok(!JSON.stringify(r.headers).includes('the-engine-key'), JSON.stringify(r.headers));
      for (const h of ['x-api-key', 'www-authenticate', 'authorization', 'set-cookie', 'server', 'access-control-allow-origin']) assert.equal(r.headers[h], undefined, h);
    } finally {
      stub.handler = defaultStubHandler();
    }
  });

  test('auth.required: false serves without a key (explicit opt-out)', async () => {
    const { app } = await setup(false);
    const r = await app.inject({ method: 'POST', url: '/v1/chat/completions', payload: chat('beta') });
    assert.equal(r.statusCode, 200);
    const list = await app.inject({ method: 'GET', url: '/v1/models' });
    assert.deepEqual(list.json().data.map((m: { id: string }) => m.id), ['alpha', 'beta']);
  });

  test('a new spec revision with other keys takes effect on the next request', async () => {
    const { app, fleet } = await setup(true);
    const ok = await app.inject({ method: 'GET', url: '/v1/models', headers: { authorization: 'Bearer team-key' } });
    assert.equal(ok.statusCode, 200);
    assert.deepEqual(ok.json().data.map((m: { id: string }) => m.id), ['alpha']);
    fleet.setSpec(fakeSpec({ models: { alpha: {}, beta: {} }, keys: [{ name: 'new', key: 'new-key', models: ['beta'] }] }));
    const old = await app.inject({ method: 'GET', url: '/v1/models', headers: { authorization: 'Bearer team-key' } });
    assert.equal(old.statusCode, 401);
    const fresh = await app.inject({ method: 'GET', url: '/v1/models', headers: { authorization: 'Bearer new-key' } });
    assert.deepEqual(fresh.json().data.map((m: { id: string }) => m.id), ['beta']);
  });
});
