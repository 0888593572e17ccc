/**
 * One replica start (start-op.ts) over a recording fake driver: an engine or model file the driver
 * answered from what it found before, gone at the start (REPLICA_INPUT_GONE, nothing done), is
 * checked again with its own scripts and the start runs once more; it counts as no failure.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import pino from 'pino';
import { LlmgwError } from '../../src/errors/catalogue.js';
import type { NodeDriver } from '../../src/nodes/driver.js';
import type { StartOutcome } from '../../src/reconciler/outcomes.js';
import { runStart } from '../../src/reconciler/start-op.js';
import { specOf } from '../harness/reconciler-core.js';

const spec = await specOf();
const model = spec.models.alpha!;
const profile = spec.profiles[model.profile]!;
const engine = spec.engines[profile.engine]!.versions[profile.engineVersion]!;

/** A driver whose first `gone` starts find an input gone; every call recorded. */
function driver(gone: number, after?: LlmgwError): { d: NodeDriver; calls: string[] } {
  const calls: string[] = [];
  const d = {
    node: 'cpu-01',
    ensureEngine: async () => (calls.push('engine'), { binary: '/opt/llama-server' }),
    ensureModel: async () => (calls.push('model'), { path: '/data/m.gguf', bytes: 1 }),
    startReplica: async () => {
      calls.push('start');
      if (gone-- > 0) throw new LlmgwError('REPLICA_INPUT_GONE', 'node cpu-01: start replica r1: the model file is gone', { node: 'cpu-01' });
      if (after) throw after;
      return { id: 'r1', port: 1, pid: 2, endpoint: 'http://x:1', startedAt: 3 };
    },
    waitReady: async () => void calls.push('ready?'),
    stopReplica: async () => void calls.push('stop'),
  } as unknown as NodeDriver;
  return { d, calls };
}

async function run(d: NodeDriver): Promise<StartOutcome[]> {
  const outcomes: StartOutcome[] = [];
  await runStart({
    action: { kind: 'start', model: 'alpha', node: 'cpu-01', replicaId: 'r1', digest: model.digest } as Parameters<typeof runStart>[0]['action'],
    model, profile, engine, driver: d, engineApiKey: 'k', downloadToken: async () => undefined,
    stopSignal: new AbortController().signal, log: pino({ level: 'silent' }), onEngineInstall: () => undefined,
    conclude: (o) => void outcomes.push(o), persist: async () => undefined,
  });
  return outcomes;
}

describe('a replica start (start-op.ts)', () => {
  it('an input gone at the start: the engine and the model checked again, one more start, ready (no failure)', async () => {
    const { d, calls } = driver(1);
    assert.deepEqual((await run(d)).map((o) => o.kind), ['ready']);
    assert.deepEqual(calls, ['engine', 'model', 'start', 'engine', 'model', 'start', 'ready?']);
  });

  it('gone again on the second start: a failure with that reason, once; any other start failure is not retried', async () => {
    const twice = driver(2);
    const [o] = await run(twice.d);
    assert.equal(o?.kind === 'failed' && o.error.code, 'REPLICA_INPUT_GONE');
    assert.deepEqual(twice.calls.filter((c) => c === 'start').length, 2);
    const other = driver(0, new LlmgwError('REPLICA_PORT_IN_USE', 'node cpu-01: port 1 is in use', { node: 'cpu-01' }));
    const [p] = await run(other.d);
    assert.equal(p?.kind === 'failed' && p.error.code, 'REPLICA_PORT_IN_USE');
    assert.deepEqual(other.calls.filter((c) => c === 'start').length, 1);
  });
});
