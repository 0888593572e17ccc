import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import Fastify from 'fastify';
import { Registry } from 'prom-client';
import { createMetrics } from '../../src/metrics/registry.js';
import { createRouterMetrics } from '../../src/metrics/router.js';
import { serveMetrics } from '../../src/metrics/http.js';
import { findSamples, parseExposition, sampleValue } from '../../src/metrics/parse.js';
import { NO_REASON, type RouterMetrics } from '../../src/metrics/ports.js';

describe('metrics: router', () => {
  it('shows RouterMetrics calls in the scrape', async () => {
    const m = createMetrics({ defaultMetrics: false });
    const r: RouterMetrics = m.router;
    r.inFlight('chat', 1);
    r.inFlight('chat', 1);
    r.timeToFirstToken('chat', 0.3);
    r.request('chat', 200, 1.2, NO_REASON);
    r.inFlight('chat', -1);
    r.request('chat', 200, 0.8, NO_REASON);
    r.request('chat', 503, 0.01, 'MODEL_PARKED');
    r.request('', 404, 0.002, 'MODEL_NOT_FOUND');
    r.upstreamError('chat', 'UPSTREAM_FIRST_BYTE_TIMEOUT');
    r.upstreamError('chat', 'UPSTREAM_FIRST_BYTE_TIMEOUT');
    r.upstreamError('chat', 'UPSTREAM_FAILED');

    const s = parseExposition(await m.registry.metrics());
    assert.equal(sampleValue(s, 'llmgw_router_requests_total', { model: 'chat', code: '200', reason: '' }), 2);
    assert.equal(sampleValue(s, 'llmgw_router_requests_total', { model: 'chat', code: '503', reason: 'MODEL_PARKED' }), 1);
    assert.equal(sampleValue(s, 'llmgw_router_requests_total', { model: '', code: '404', reason: 'MODEL_NOT_FOUND' }), 1);
    assert.equal(findSamples(s, 'llmgw_router_requests_total', {}).length, 3);
    assert.equal(sampleValue(s, 'llmgw_router_request_duration_seconds_count', { model: 'chat' }), 3);
    assert.ok(Math.abs((sampleValue(s, 'llmgw_router_request_duration_seconds_sum', { model: 'chat' }) ?? 0) - 2.01) < 1e-9);
    assert.equal(sampleValue(s, 'llmgw_router_request_duration_seconds_bucket', { model: 'chat', le: '1' }), 2);
    assert.equal(sampleValue(s, 'llmgw_router_request_duration_seconds_bucket', { model: 'chat', le: '+Inf' }), 3);
    assert.equal(sampleValue(s, 'llmgw_router_time_to_first_token_seconds_count', { model: 'chat' }), 1);
    assert.equal(sampleValue(s, 'llmgw_router_time_to_first_token_seconds_bucket', { model: 'chat', le: '0.25' }), 0);
    assert.equal(sampleValue(s, 'llmgw_router_time_to_first_token_seconds_bucket', { model: 'chat', le: '0.5' }), 1);
    assert.equal(sampleValue(s, 'llmgw_router_upstream_errors_total', { model: 'chat', reason: 'UPSTREAM_FIRST_BYTE_TIMEOUT' }), 2);
    assert.equal(sampleValue(s, 'llmgw_router_upstream_errors_total', { model: 'chat', reason: 'UPSTREAM_FAILED' }), 1);
    assert.equal(sampleValue(s, 'llmgw_router_in_flight_requests', { model: 'chat' }), 1);
    // Histogram buckets are cumulative and end in +Inf.
    const buckets = findSamples(s, 'llmgw_router_request_duration_seconds_bucket', { model: 'chat' });
    for (let i = 1; i < buckets.length; i++) assert.ok((buckets[i]?.value ?? 0) >= (buckets[i - 1]?.value ?? 0));
    assert.equal(buckets.at(-1)?.labels['le'], '+Inf');
  });

  it('a refusal and a proxied answer with the same status are two series; a model leaving the desired state takes both', async () => {
    const registry = new Registry();
    const router = createRouterMetrics(registry);
    router.setModels(['chat']);
    router.request('chat', 503, 0.01, NO_REASON); // the replica's own 503
    router.request('chat', 503, 0.01, 'MODEL_LOADING');
    router.request('chat', 503, 0.01, 'MODEL_LOADING');
    router.request('chat', 502, 0.01, 'UPSTREAM_CONNECT');
    let s = parseExposition(await registry.metrics());
    assert.deepEqual(
      findSamples(s, 'llmgw_router_requests_total', { model: 'chat' }).map((x) => [x.labels['code'], x.labels['reason'], x.value]).sort(),
      [['200', '', 0], ['502', 'UPSTREAM_CONNECT', 1], ['503', '', 1], ['503', 'MODEL_LOADING', 2]],
    );
    router.setModels([]);
    s = parseExposition(await registry.metrics());
    assert.equal(findSamples(s, 'llmgw_router_requests_total', { model: 'chat' }).length, 0);
  });

  it('a model leaving the desired state takes its ejection series', async () => {
    const registry = new Registry();
    const router = createRouterMetrics(registry);
    router.setModels(['chat']);
    router.replicaEjected('chat', true);
    let s = parseExposition(await registry.metrics());
    assert.equal(sampleValue(s, 'llmgw_router_ejected_replicas', { model: 'chat' }), 1);
    assert.equal(sampleValue(s, 'llmgw_router_replica_ejections_total', { model: 'chat' }), 1);
    router.setModels([]);
    s = parseExposition(await registry.metrics());
    assert.equal(findSamples(s, 'llmgw_router_ejected_replicas', { model: 'chat' }).length, 0);
    assert.equal(findSamples(s, 'llmgw_router_replica_ejections_total', { model: 'chat' }).length, 0);
  });

  it('serves /metrics with the exposition content type', async () => {
    const m = createMetrics({ defaultMetrics: false });
    m.router.request('chat', 200, 0.1, NO_REASON);
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
