import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import Fastify from 'fastify';
import { createMetrics } from '../../src/metrics/registry.js';
import { serveMetrics } from '../../src/metrics/http.js';
import { findSamples, parseExposition, sampleValue } from '../../src/metrics/parse.js';
import type { RouterMetrics } from '../../src/metrics/ports.js';

describe('metrics: router', () => {
  it('shows RouterMetrics calls in the scrape', async () => {
    const m = createMetrics({ defaultMetrics: false });
    const r: RouterMetrics = m.router;
    r.inFlight('chat', 1);
    r.inFlight('chat', 1);
    r.timeToFirstToken('chat', 0.3);
    r.request('chat', 200, 1.2);
    r.inFlight('chat', -1);
    r.request('chat', 200, 0.8);
    r.request('chat', 503, 0.01);
    r.request('', 404, 0.002);
    r.upstreamError('chat', 'first_byte_timeout');
    r.upstreamError('chat', 'first_byte_timeout');
    r.upstreamError('chat', 'reset');

    const s = parseExposition(await m.registry.metrics());
    assert.equal(sampleValue(s, 'llmgw_router_requests_total', { model: 'chat', code: '200' }), 2);
    assert.equal(sampleValue(s, 'llmgw_router_requests_total', { model: 'chat', code: '503' }), 1);
    assert.equal(sampleValue(s, 'llmgw_router_requests_total', { model: '', code: '404' }), 1);
    assert.equal(sampleValue(s, 'llmgw_router_request_duration_seconds_count', { model: 'chat' }), 3);
    assert.ok(Math.abs((sampleValue(s, 'llmgw_router_request_duration_seconds_sum', { model: 'chat' }) ?? 0) - 2.01) < 1e-9);
    assert.equal(sampleValue(s, 'llmgw_router_request_duration_seconds_bucket', { model: 'chat', le: '1' }), 2);
    assert.equal(sampleValue(s, 'llmgw_router_request_duration_seconds_bucket', { model: 'chat', le: '+Inf' }), 3);
    assert.equal(sampleValue(s, 'llmgw_router_time_to_first_token_seconds_count', { model: 'chat' }), 1);
    assert.equal(sampleValue(s, 'llmgw_router_time_to_first_token_seconds_bucket', { model: 'chat', le: '0.25' }), 0);
    assert.equal(sampleValue(s, 'llmgw_router_time_to_first_token_seconds_bucket', { model: 'chat', le: '0.5' }), 1);
    assert.equal(sampleValue(s, 'llmgw_router_upstream_errors_total', { model: 'chat', reason: 'first_byte_timeout' }), 2);
    assert.equal(sampleValue(s, 'llmgw_router_upstream_errors_total', { model: 'chat', reason: 'reset' }), 1);
    assert.equal(sampleValue(s, 'llmgw_router_in_flight_requests', { model: 'chat' }), 1);
    // Histogram buckets are cumulative and end in +Inf.
    const buckets = findSamples(s, 'llmgw_router_request_duration_seconds_bucket', { model: 'chat' });
    for (let i = 1; i < buckets.length; i++) assert.ok((buckets[i]?.value ?? 0) >= (buckets[i - 1]?.value ?? 0));
    assert.equal(buckets.at(-1)?.labels['le'], '+Inf');
  });

  it('serves /metrics with the exposition content type', async () => {
    const m = createMetrics({ defaultMetrics: false });
    m.router.request('chat', 200, 0.1);
    const app = Fastify();
    serveMetrics(app, m);
    try {
      const res = await app.inject({ method: 'GET', url: '/metrics' });
      assert.equal(res.statusCode, 200);
      assert.match(String(res.headers['content-type']), /^text\/plain; version=0\.0\.4; charset=utf-8/);
      const s = parseExposition(res.body);
      assert.equal(sampleValue(s, 'llmgw_router_requests_total', { model: 'chat', code: '200' }), 1);
      assert.equal(sampleValue(s, 'llmgw_leader'), 0);
    } finally {
      await app.close();
    }
  });
});
