import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { Registry } from 'prom-client';
import type { ModelSpec } from '../../src/fleet-spec/types.js';
import { parseExposition, sampleValue } from '../../src/metrics/parse.js';
import { registerScheduleMetrics } from '../../src/metrics/schedule.js';

const base: Omit<ModelSpec, 'name' | 'file' | 'scaling'> = {
  source: 'https://example.com/m.gguf', sha256: 'a'.repeat(64), profile: 'chat', aliases: [], nodeSelector: {}, memoryBytes: null, maxConcurrency: null, routing: 'affinity', queue: { max: 64, timeoutMs: 60_000 }, token: null, rollout: null, digest: 'd',
};
const chat: ModelSpec = {
  ...base, name: 'chat', file: 'models/chat.yaml',
  scaling: { mode: 'replicas', replicas: 0, schedule: { timezone: 'America/New_York', entries: [{ cron: '0 8 * * 1-5', replicas: 2 }, { cron: '0 20 * * 1-5', replicas: 0 }] } },
};
const plain: ModelSpec = { ...base, name: 'plain', file: 'models/plain.yaml', scaling: { mode: 'replicas', replicas: 1 } };

describe('schedule metrics', () => {
  it('follow the clock at each scrape; only models with a schedule have them; a model that leaves loses them', async () => {
    const registry = new Registry();
    let now = Date.parse('2026-03-09T11:59:00Z'); // Monday 07:59 EDT
    const m = registerScheduleMetrics(registry, () => now);
    m.setModels([chat, plain]);
    const scrape = async () => parseExposition(await registry.metrics());
    let s = await scrape();
    assert.equal(sampleValue(s, 'llmgw_model_scheduled_replicas', { model: 'chat' }), 0);
    assert.equal(sampleValue(s, 'llmgw_model_schedule_next_change_timestamp_seconds', { model: 'chat' }), Date.parse('2026-03-09T12:00:00Z') / 1000);
    assert.equal(sampleValue(s, 'llmgw_model_scheduled_replicas', { model: 'plain' }), undefined);
    now = Date.parse('2026-03-09T12:00:00Z');
    s = await scrape();
    assert.equal(sampleValue(s, 'llmgw_model_scheduled_replicas', { model: 'chat' }), 2);
    assert.equal(sampleValue(s, 'llmgw_model_schedule_next_change_timestamp_seconds', { model: 'chat' }), Date.parse('2026-03-10T00:00:00Z') / 1000);
    m.setModels([plain]);
    s = await scrape();
    assert.equal(sampleValue(s, 'llmgw_model_scheduled_replicas', { model: 'chat' }), undefined);
  });
});
