/** Router error shapes: every error is the OpenAI envelope with the right status, code and headers; bad requests never reach a replica. */
import { strict as assert } from 'node:assert';
import { request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { Reasons } from '../../src/errors/catalogue.js';
import { buildRouter } from '../../src/router/app.js';
import { RouterError, anthropicType, apiOf, renderError, sseErrorEvent, type RouterReasonCode } from '../../src/router/errors.js';
import { FakeFleetView, fakeSpec, replica } from '../harness/fake-fleet-view.js';
import { startStubUpstream, type StubUpstream } from '../harness/stub-upstream.js';

function assertEnvelope(body: unknown, code: string, type?: string): { message: string; type: string; code: string; param: string | null } {
  const e = (body as { error?: Record<string, unknown> }).error;
  assert.ok(e && typeof e === 'object', `no error envelope: ${JSON.stringify(body)}`);
  assert.deepEqual(Object.keys(e).sort(), ['code', 'message', 'param', 'type']);
  assert.equal(e.code, code);
  if (type) assert.equal(e.type, type);
  assert.equal(typeof e.message, 'string');
  assert.ok((e.message as string).length > 0);
  return e as never;
}

describe('router errors (pure)', () => {
  test('every router reason is in the catalogue with a status, and has an OpenAI type and code', () => {
    const codes = new Set<string>();
    const routerReasons = Object.values(Reasons).filter((r) => r.openai !== null);
    assert.ok(routerReasons.length >= 20);
    for (const r of routerReasons) {
      const oa = r.openai!;
      assert.ok(r.http >= 400 && r.http < 600);
      assert.match(oa.code, /^[a-z_]+$/);
      assert.ok(!codes.has(oa.code), `duplicate OpenAI code ${oa.code}`);
      codes.add(oa.code);
    }
  });

  test('renderError: envelope, x-should-retry from the catalogue, Retry-After when given', () => {
    const parked = renderError(new RouterError('MODEL_PARKED', 'parked!'));
    assert.equal(parked.status, 503);
    assert.equal(parked.headers['x-should-retry'], 'false');
    assert.equal(parked.headers['retry-after'], undefined);
    assertEnvelope(JSON.parse(parked.body), 'model_parked');
    const loading = renderError(new RouterError('MODEL_LOADING', 'wait', { retryAfterSeconds: 4.2 }));
    assert.equal(loading.headers['x-should-retry'], 'true');
    assert.equal(loading.headers['retry-after'], '5');
    const missing = renderError(new RouterError('MODEL_MISSING', 'no model', { param: 'model' }));
    assert.equal(JSON.parse(missing.body).error.param, 'model');
  });

  test('renderError: a foreign error is a generic 500 that leaks nothing', () => {
    const r = renderError(new Error('secret internals /etc/llmgw/key'));
    assert.equal(r.status, 500);
    const e = assertEnvelope(JSON.parse(r.body), 'internal_error', 'server_error');
    assert.ok(!e.message.includes('secret'));
  });

  test('sseErrorEvent is one data: event with the envelope', () => {
    const ev = sseErrorEvent(new RouterError('UPSTREAM_STALLED', 'stalled'));
    assert.match(ev, /^data: \{.*\}\n\n$/);
    assertEnvelope(JSON.parse(ev.slice(6)), 'upstream_stalled');
  });
});

describe('router errors (inject)', () => {
  let stub: StubUpstream;
  let app: ReturnType<typeof buildRouter>;
  const fleet = new FakeFleetView(
    fakeSpec({ models: { alpha: { aliases: ['gpt-alpha'] } }, keys: [{ name: 'k', key: 'good', models: ['*'] }] }),
  );
  const auth = { authorization: 'Bearer good' };

  before(async () => {
    stub = await startStubUpstream();
    fleet.setReady('alpha', [replica('alpha', stub.url)]);
    app = buildRouter({ fleet, auth: { required: true }, limits: { bodyBytes: 1024 } });
  });
  after(async () => {
    await app.close();
    await stub.close();
  });

  const cases: { name: string; payload: string; headers?: Record<string, string>; status: number; code: string; param?: string | null }[] = [
    { name: 'malformed JSON', payload: '{"model": "alpha",', status: 400, code: 'invalid_json' },
    { name: 'empty body', payload: '', status: 400, code: 'invalid_json' },
    { name: 'a JSON array', payload: '[1,2]', status: 400, code: 'invalid_request' },
    { name: 'missing model', payload: '{"messages":[]}', status: 400, code: 'missing_model', param: 'model' },
    { name: 'model not a string', payload: '{"model":42}', status: 400, code: 'invalid_request', param: 'model' },
    { name: 'unknown model', payload: '{"model":"no-such-model"}', status: 404, code: 'model_not_found', param: 'model' },
    { name: 'model named like a prototype key', payload: '{"model":"constructor"}', status: 404, code: 'model_not_found' },
    { name: 'oversized body', payload: JSON.stringify({ model: 'alpha', prompt: 'x'.repeat(2000) }), status: 413, code: 'request_too_large' },
    { name: 'wrong key', payload: '{"model":"alpha"}', headers: { authorization: 'Bearer bad' }, status: 401, code: 'invalid_api_key' },
  ];
  for (const c of cases) {
    test(`${c.name} → ${c.status} ${c.code}, never proxied`, async () => {
      const before = stub.requests.length;
      const r = await app.inject({ method: 'POST', url: '/v1/chat/completions', headers: { 'content-type': 'application/json', ...auth, ...(c.headers ?? {}) }, payload: c.payload });
      assert.equal(r.statusCode, c.status, r.body);
      assert.match(String(r.headers['content-type']), /^application\/json/);
      const e = assertEnvelope(r.json(), c.code);
      if (c.param !== undefined) assert.equal(e.param, c.param);
      assert.equal(stub.requests.length, before, 'reached the replica');
    });
  }

  test('unknown model: the message lists no model names', async () => {
    const r = await app.inject({ method: 'POST', url: '/v1/completions', headers: auth, payload: '{"model":"nope"}' });
    assert.ok(!r.body.includes('alpha'), r.body);
  });

  test('unknown URL → 404 unknown_url envelope', async () => {
    const r = await app.inject({ method: 'GET', url: '/v2/whatever', headers: auth });
    assert.equal(r.statusCode, 404);
    assertEnvelope(r.json(), 'unknown_url');
  });

  test('a body without content-type (curl -d) is still read as JSON', async () => {
    const r = await app.inject({ method: 'POST', url: '/v1/completions', headers: { ...auth, 'content-type': 'application/x-www-form-urlencoded' }, payload: '{"model":"gpt-alpha","prompt":"hi"}' });
    assert.equal(r.statusCode, 200, r.body);
  });

  test('other /v1/* POSTs naming a model pass through with path and query; the original bytes are forwarded', async () => {
    const payload = '{ "model" : "gpt-alpha",  "query":"q", "documents":["a"] }';
    const r = await app.inject({ method: 'POST', url: '/v1/rerank?x=1', headers: auth, payload });
    assert.equal(r.statusCode, 200, r.body);
    const got = stub.requests.at(-1)!;
    assert.equal(got.url, '/v1/rerank?x=1');
    assert.equal(got.body, payload, 'body re-serialized');
  });

  test('no valid spec yet → 503 fleet_not_ready (retryable) for a request with a key; 401 without one', async () => {
    const empty = new FakeFleetView(null);
    const a = buildRouter({ fleet: empty, auth: { required: true } });
    try {
      const r = await a.inject({ method: 'POST', url: '/v1/chat/completions', headers: auth, payload: '{"model":"alpha"}' });
      assert.equal(r.statusCode, 503);
      assert.equal(r.headers['x-should-retry'], 'true');
      assertEnvelope(r.json(), 'fleet_not_ready');
      // without any key it is still a 401 (nothing said to anonymous callers)
      const anon = await a.inject({ method: 'GET', url: '/v1/models' });
      assert.equal(anon.statusCode, 401);
      assertEnvelope(anon.json(), 'missing_api_key');
    } finally {
      await a.close();
    }
  });

  test('all catalogue router codes render with their catalogue status', () => {
    for (const code of Object.values(Reasons).filter((r) => r.openai !== null).map((r) => r.code as RouterReasonCode)) {
      const r = renderError(new RouterError(code, 'x'));
      assert.equal(r.status, Reasons[code].http, code);
    }
  });
});

/** One raw HTTP/1.1 exchange (node's client does not normalize the path). */
function rawPost(url: string, path: string, headers: Record<string, string>, chunks: readonly string[]): Promise<{ status: number; headers: Record<string, unknown>; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${url}${path}`, { method: 'POST', headers, path }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    for (const c of chunks) req.write(c);
    req.end();
  });
}

describe('router errors (real socket: the server hands POST /v1/* to the core directly)', () => {
  let stub: StubUpstream;
  let app: ReturnType<typeof buildRouter>;
  let url: string;
  const fleet = new FakeFleetView(fakeSpec({ models: { alpha: {} }, keys: [{ name: 'k', key: 'good', models: ['*'] }] }));
  const headers = { authorization: 'Bearer good', 'content-type': 'application/json' };

  before(async () => {
    stub = await startStubUpstream();
    fleet.setReady('alpha', [replica('alpha', stub.url)]);
    app = buildRouter({ fleet, auth: { required: true }, limits: { bodyBytes: 1024 } });
    await app.listen({ port: 0, host: '127.0.0.1' });
    url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  });
  after(async () => {
    await app.close();
    await stub.close();
  });

  // the first five leave /v1/ or are not plain segments; the rest are llama-server's (or nobody's) routes outside the allow-list (api-paths.ts)
  for (const path of ['/v1/../props', '/v1/./chat/completions', '/v1/%2e%2e/props', '/v1/chat//completions', '/v1/', '/v1/chat/completions/control', '/v1/streams/lookup', '/v1/rerank.v2', '/v1/audio/transcriptions', '/v1/health']) {
    test(`${path} → 404 unknown_url, never proxied`, async () => {
      const before = stub.requests.length;
      const r = await rawPost(url, path, headers, ['{"model":"alpha"}']);
      assert.equal(r.status, 404, r.body);
      assertEnvelope(JSON.parse(r.body), 'unknown_url');
      assert.equal(stub.requests.length, before, 'reached the replica');
    });
  }

  test('a forwarded path passes through with the query string as sent (dots in a query are not a path)', async () => {
    const path = '/v1/rerank?x=/../&y=%2e';
    const r = await rawPost(url, path, headers, ['{"model":"alpha"}']);
    assert.equal(r.status, 200, r.body);
    assert.equal(stub.requests.at(-1)!.url, path);
  });

  test('a body over the limit, chunked with no content-length → 413 and the connection is closed', async () => {
    const before = stub.requests.length;
    const r = await rawPost(url, '/v1/chat/completions', { ...headers, 'transfer-encoding': 'chunked' }, ['{"model":"alpha","prompt":"', 'x'.repeat(800), 'y'.repeat(800), '"}']);
    assert.equal(r.status, 413, r.body);
    assert.equal(r.headers['connection'], 'close');
    assertEnvelope(JSON.parse(r.body), 'request_too_large');
    assert.equal(stub.requests.length, before);
  });

  test('a declared content-length over the limit → 413 before the body is read', async () => {
    const body = JSON.stringify({ model: 'alpha', prompt: 'x'.repeat(2000) });
    const r = await rawPost(url, '/v1/chat/completions', { ...headers, 'content-length': String(body.length) }, [body]);
    assert.equal(r.status, 413, r.body);
    assertEnvelope(JSON.parse(r.body), 'request_too_large');
  });

  test('a body in many chunks is forwarded byte for byte', async () => {
    const body = JSON.stringify({ model: 'alpha', prompt: 'é'.repeat(300) });
    const parts = [body.slice(0, 5), body.slice(5, 200), body.slice(200)];
    const r = await rawPost(url, '/v1/completions', { ...headers, 'transfer-encoding': 'chunked' }, parts);
    assert.equal(r.status, 200, r.body);
    assert.equal(stub.requests.at(-1)!.body, body);
  });

  test('GET routes still go through fastify: /v1/models lists the model; PUT on a proxy path is a 404 envelope', async () => {
    const list = await fetch(`${url}/v1/models`, { headers });
    assert.equal(list.status, 200);
    assert.deepEqual(((await list.json()) as { data: { id: string }[] }).data.map((m) => m.id), ['alpha']);
    const head = await fetch(`${url}/v1/chat/completions`, { method: 'PUT', headers, body: '{}' });
    assert.equal(head.status, 404);
    assertEnvelope(await head.json(), 'unknown_url');
  });
});

describe('Anthropic envelope on /v1/messages', () => {
  test('apiOf: /v1/messages and below are Anthropic, everything else OpenAI', () => {
    const cases: [string | undefined, string][] = [
      ['/v1/messages', 'anthropic'],
      ['/v1/messages/count_tokens', 'anthropic'],
      ['/v1/messages?beta=true', 'anthropic'],
      ['/v1/messagesx', 'openai'],
      ['/v1/chat/completions', 'openai'],
      [undefined, 'openai'],
    ];
    for (const [url, api] of cases) assert.equal(apiOf(url), api, String(url));
  });

  test('every router reason renders as {"type":"error","error":{type,message}} with the same status and headers as its OpenAI form', () => {
    for (const code of Object.keys(Reasons) as RouterReasonCode[]) {
      if (Reasons[code].openai === null) continue;
      const e = new RouterError(code, `m ${code}`, { retryAfterSeconds: 3 });
      const a = renderError(e, 'anthropic');
      const o = renderError(e);
      assert.equal(a.status, o.status);
      assert.deepEqual(a.headers, o.headers);
      assert.deepEqual(JSON.parse(a.body), { type: 'error', error: { type: anthropicType(o.status), message: `m ${code}` } });
    }
    assert.equal(anthropicType(429), 'rate_limit_error');
    assert.equal(anthropicType(503), 'overloaded_error');
    assert.equal(anthropicType(502), 'api_error');
    assert.equal(anthropicType(404), 'not_found_error');
  });

  test('shouldRetry overrides the reason\'s x-should-retry (a limit whose wait is long)', () => {
    assert.equal(renderError(new RouterError('KEY_RATE_LIMITED', 'x', { retryAfterSeconds: 50, shouldRetry: false })).headers['x-should-retry'], 'false');
    assert.equal(renderError(new RouterError('KEY_RATE_LIMITED', 'x', { retryAfterSeconds: 2 })).headers['x-should-retry'], 'true');
  });

  test('a stream cut mid-way on /v1/messages ends with an Anthropic `event: error`; on OpenAI paths with `data: {"error":…}`', async () => {
    const stub = await startStubUpstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('event: message_start\ndata: {"type":"message_start"}\n\n');
      // then nothing: the router's stream idle timeout ends it
    });
    const f = new FakeFleetView(fakeSpec({ models: { m: {} }, keys: [{ name: 'k', key: 'kk', models: ['*'] }] }), '');
    f.setReady('m', [replica('m', stub.url, 'm-a')]);
    const app = buildRouter({ fleet: f, auth: { required: true }, limits: { streamIdleTimeoutMs: 200 }, slotsRefreshMs: 0 });
    await app.listen({ port: 0, host: '127.0.0.1' });
    const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    try {
      const a = await (await fetch(`${url}/v1/messages`, { method: 'POST', headers: { 'x-api-key': 'kk', 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', max_tokens: 5, stream: true, messages: [] }) })).text();
      assert.match(a, /event: error\ndata: \{"type":"error","error":\{"type":"api_error","message":"The replica of model 'm' stopped sending[^"]*"\}\}\n\n$/);
      const o = await (await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { authorization: 'Bearer kk', 'content-type': 'application/json' }, body: JSON.stringify({ model: 'm', stream: true, messages: [] }) })).text();
      assert.match(o, /\ndata: \{"error":\{"message":"The replica of model 'm' stopped sending[^"]*","type":"server_error","code":"upstream_stalled","param":null\}\}\n\n$/);
    } finally {
      await app.close();
      await stub.close();
    }
  });
});
