import { strict as assert } from 'node:assert';
import { describe, it, mock } from 'node:test';
import type { FleetSpec, ModelSpec } from '../../src/fleet-spec/types.js';
import { wakeOnSchedule } from '../../src/schedule/wake.js';

const model: ModelSpec = {
  name: 'chat', file: 'models/chat.yaml', source: 'https://example.com/m.gguf', sha256: 'a'.repeat(64), profile: 'chat', aliases: [], nodeSelector: {}, memoryBytes: null, maxConcurrency: null, token: null, digest: 'd',
  scaling: { mode: 'replicas', replicas: 0, schedule: { timezone: 'UTC', entries: [{ cron: '0 8 * * *', replicas: 2 }, { cron: '0 20 * * *', replicas: 0 }] } },
};
const spec = { models: { chat: model } } as unknown as FleetSpec;

describe('wakeOnSchedule', () => {
  it('asks for a pass at the next change, re-arms after each snapshot, and stops', () => {
    mock.timers.enable({ apis: ['setTimeout', 'Date'], now: Date.parse('2026-03-09T07:59:00Z') });
    try {
      const passes: { trigger: string; at: number }[] = [];
      const count = (): number => passes.length;
      const listeners = new Set<() => void>();
      const loop = {
        spec: () => spec,
        onSnapshot: (l: () => void) => (listeners.add(l), () => listeners.delete(l)),
        requestPass: async (trigger: string) => {
          passes.push({ trigger, at: Date.now() });
          for (const l of listeners) l(); // the pass publishes a snapshot
        },
      };
      const wake = wakeOnSchedule(loop, Date.now);
      mock.timers.tick(59_000);
      assert.equal(count(), 0, 'nothing before 08:00');
      mock.timers.tick(1_005);
      assert.deepEqual(passes.map((p) => [p.trigger, new Date(p.at).toISOString()]), [['schedule', '2026-03-09T08:00:00.005Z']]);
      mock.timers.tick(12 * 3_600_000);
      assert.equal(passes.length, 2, 'and at 20:00');
      assert.equal(new Date(passes[1]!.at).toISOString(), '2026-03-09T20:00:00.005Z');
      wake.stop();
      mock.timers.tick(24 * 3_600_000);
      assert.equal(passes.length, 2, 'none after stop');
      assert.equal(listeners.size, 0);
    } finally {
      mock.timers.reset();
    }
  });
});
