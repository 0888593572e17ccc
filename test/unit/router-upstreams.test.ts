/** Pure parts of the proxy: least-busy selection, the in-flight list, error classification. */
import { strict as assert } from 'node:assert';
import { after, describe, test } from 'node:test';
import { Reasons, type ReasonCode } from '../../src/errors/catalogue.js';
import { ReplicaChoice } from '../../src/router/choose.js';
import { classifyUpstreamError, isRetryableBeforeResponse, upstreamError, upstreamReason, type UpstreamFailure } from '../../src/router/failover.js';
import { forwardedHeaders } from '../../src/router/forward-headers.js';
import { ProxyCall } from '../../src/router/proxy.js';
import { ActiveCalls } from '../../src/router/proxy-context.js';
import { Upstreams } from '../../src/router/upstreams.js';
import { replica } from '../harness/fake-fleet-view.js';

describe('ReplicaChoice.pick over the pool', () => {
  const ups = new Upstreams({ connectTimeoutMs: 1000, firstByteTimeoutMs: 1000, streamIdleTimeoutMs: 1000 });
  const choice = new ReplicaChoice(ups);
  after(() => ups.close());
  const a = replica('m', 'http://127.0.0.1:1', 'a');
  const b = replica('m', 'http://127.0.0.1:2', 'b');
  const c = replica('m', 'http://127.0.0.1:3', 'c');

  test('the least busy replica wins; ties rotate', () => {
    ups.get(a.endpoint).inFlight = 2;
    ups.get(b.endpoint).inFlight = 1;
    ups.get(c.endpoint).inFlight = 3;
    assert.equal(choice.pick([a, b, c], null, performance.now())?.id, 'b');
    ups.get(a.endpoint).inFlight = 0;
    ups.get(b.endpoint).inFlight = 0;
    ups.get(c.endpoint).inFlight = 0;
    const seen = new Set<string>();
    for (let i = 0; i < 9; i++) seen.add(choice.pick([a, b, c], null, performance.now())!.id);
    assert.deepEqual([...seen].sort(), ['a', 'b', 'c']);
  });

  test('excluded replicas are skipped; a replica marked down loses to any other but is still used alone', () => {
    assert.equal(choice.pick([a, b], new Set([a.endpoint]), performance.now())?.id, 'b');
    assert.equal(choice.pick([a], new Set([a.endpoint]), performance.now()), null);
    ups.get(a.endpoint).downUntil = performance.now() + 10_000;
    ups.get(b.endpoint).inFlight = 50;
    assert.equal(choice.pick([a, b], null, performance.now())?.id, 'b');
    assert.equal(choice.pick([a], null, performance.now())?.id, 'a');
    ups.get(a.endpoint).downUntil = 0;
    ups.get(b.endpoint).inFlight = 0;
  });

  test('sweep closes idle pools only', () => {
    const u = ups.get('http://127.0.0.1:9');
    u.lastUsed = 0;
    u.inFlight = 1;
    ups.sweep(performance.now() + 1e9, 1);
    assert.equal(ups.get('http://127.0.0.1:9'), u, 'a busy pool was closed');
    u.inFlight = 0;
    ups.sweep(performance.now() + 1e9, 1);
    assert.notEqual(ups.get('http://127.0.0.1:9'), u);
  });
});

describe('ActiveCalls', () => {
  test('add, delete in any order, toArray, size; deleting twice is harmless', () => {
    const list = new ActiveCalls();
    const mk = () => Object.create(ProxyCall.prototype) as ProxyCall;
    const [x, y, z] = [mk(), mk(), mk()];
    for (const c of [x, y, z]) list.add(c);
    assert.equal(list.size, 3);
    assert.deepEqual(list.toArray(), [z, y, x]);
    list.delete(y);
    assert.deepEqual(list.toArray(), [z, x]);
    list.delete(y);
    assert.equal(list.size, 2);
    list.delete(z);
    list.delete(x);
    assert.equal(list.size, 0);
    assert.deepEqual(list.toArray(), []);
  });
});

describe('classifyUpstreamError', () => {
  test('maps undici and socket errors to reasons; only connect failures and resets are retried', () => {
    const err = (code: string) => Object.assign(new Error(code), { code });
    assert.equal(classifyUpstreamError(err('UND_ERR_CONNECT_TIMEOUT')), 'connect_timeout');
    assert.equal(classifyUpstreamError(err('ECONNREFUSED')), 'connect');
    assert.equal(classifyUpstreamError(err('EHOSTUNREACH')), 'connect');
    assert.equal(classifyUpstreamError(err('UND_ERR_SOCKET')), 'reset');
    assert.equal(classifyUpstreamError(err('ECONNRESET')), 'reset');
    assert.equal(classifyUpstreamError(err('UND_ERR_HEADERS_TIMEOUT')), 'first_byte_timeout');
    assert.equal(classifyUpstreamError(err('UND_ERR_BODY_TIMEOUT')), 'stall_timeout');
    assert.equal(classifyUpstreamError(Object.assign(new Error('x'), { cause: err('ECONNREFUSED') })), 'connect');
    assert.equal(classifyUpstreamError(new Error('?')), 'error');
    assert.equal(classifyUpstreamError(null), 'error');
    assert.ok(isRetryableBeforeResponse('connect'));
    assert.ok(isRetryableBeforeResponse('connect_timeout'));
    assert.ok(isRetryableBeforeResponse('reset'));
    assert.ok(!isRetryableBeforeResponse('first_byte_timeout'));
    assert.ok(!isRetryableBeforeResponse('stall_timeout'));
  });
});

describe('upstreamReason (the UPSTREAM_* code an attempt is counted as)', () => {
  const table: [UpstreamFailure, boolean, string][] = [
    // kind, response headers already received, code
    ['connect', false, 'UPSTREAM_CONNECT'],
    ['connect_timeout', false, 'UPSTREAM_CONNECT'],
    ['reset', false, 'UPSTREAM_CONNECT'], // retried on another replica, like a refused connection
    ['reset', true, 'UPSTREAM_FAILED'],
    ['first_byte_timeout', false, 'UPSTREAM_FIRST_BYTE_TIMEOUT'],
    ['stall_timeout', true, 'UPSTREAM_STALLED'],
    ['auth', true, 'UPSTREAM_AUTH'],
    ['error', false, 'UPSTREAM_FAILED'],
    ['error', true, 'UPSTREAM_FAILED'],
  ];
  for (const [kind, responded, code] of table) {
    test(`${kind}${responded ? ' after the headers' : ''} → ${code}`, () => {
      assert.equal(upstreamReason(kind, responded), code);
      const r = Reasons[code as ReasonCode];
      assert.ok(r.openai, `${code} is a router reason`);
      // the error the request ends with carries the same code (one table), and names the model
      const e = upstreamError(kind, responded, { model: 'chat-7b', detail: 'connect ECONNREFUSED', tried: 2, status: 403 });
      assert.equal(e.code, code);
      assert.match(e.message, /model 'chat-7b'/);
    });
  }

  test('the messages carry what each code needs: replicas tried, mid-response, the status', () => {
    assert.match(upstreamError('connect', false, { model: 'm', tried: 3, detail: 'connect ECONNREFUSED' }).message, /\(3 tried; last: connect ECONNREFUSED\)/);
    assert.match(upstreamError('reset', true, { model: 'm', midResponse: true, detail: 'other side closed' }).message, /failed mid-response: other side closed$/);
    assert.doesNotMatch(upstreamError('error', true, { model: 'm', midResponse: false, detail: 'x' }).message, /mid-response/);
    assert.match(upstreamError('auth', true, { model: 'm', status: 403 }).message, /\(HTTP 403\)/);
  });
});

describe('forwardedHeaders', () => {
  test('keeps only the allowlisted upstream headers, matched without regard to case; the first value wins', () => {
    const raw = ['Content-Type', 'text/event-stream', 'WWW-Authenticate', 'Bearer secret', 'content-LENGTH', '12', 'Server', 'llama.cpp', 'Set-Cookie', 'k=v', 'Cache-Control', 'no-cache', 'content-type', 'text/plain', 'Retry-After', '3', 'Content-Typf', 'x', 'X-Request-Id', 'same-length-as-content-type', 'Access-Control-Allow-Origin', '*', '', 'empty name'].map((s) => Buffer.from(s, 'latin1'));
    const out: Record<string, string> = { 'x-llmgw-replica': 'r1' };
    forwardedHeaders(raw, out);
    assert.deepEqual(out, { 'x-llmgw-replica': 'r1', 'content-type': 'text/event-stream', 'content-length': '12', 'cache-control': 'no-cache', 'retry-after': '3' });
  });
});
