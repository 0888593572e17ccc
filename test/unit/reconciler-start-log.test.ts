/**
 * A start's outcome comes from its own log (#23 item 6b). Two ways the unknown-architecture model
 * was parked with "llama-server exited with an empty log (process gone)" instead of the engine's
 * line, as table tests:
 * - a replica whose failure was counted, out of sight for one observation (one stop finished, its
 *   bookkeeping pruned), then seen again half removed by a second stop (state.json there, its pid
 *   and log gone): counted a second time with an empty log. A counted failure is remembered.
 * - llama-server itself lost its output: its logger thread is not drained at exit, so a start that
 *   fails within milliseconds on a busy machine can leave an empty log (or only its first lines),
 *   for good — reading it again finds nothing more (failure.ts).
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { initialHealth, startFailed } from '../../src/reconciler/health.js';
import { startConcluded } from '../../src/reconciler/outcomes.js';
import { ACCOUNTED_KEEP_MS, decide, pruned } from '../../src/reconciler/pass.js';
import { startLaunched } from '../../src/reconciler/state.js';
import { memoryOf, node, observed, specOf, stateFor } from '../harness/reconciler-core.js';

describe("a start's outcome from its own log", () => {
  it('a counted failure is never counted again, however its replica comes and goes in observations', async () => {
    const spec = await specOf((f) => {
      delete f['models/beta.yaml'];
      delete f['models/gamma.yaml'];
    });
    const S = spec.settings;
    const alpha = spec.models.alpha!;
    const kev = { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: "unknown model architecture: 'kev'" };
    // four failures counted, the fifth start launched and failed with the engine's reason
    let h = initialHealth(alpha.digest);
    for (let i = 0; i < 3; i++) h = startFailed(h, kev, i, S);
    let s = startLaunched({ ...stateFor(spec), models: { alpha: h } }, 'a4', { model: 'alpha', node: 'cpu-01', digest: alpha.digest, startedAt: 100 });
    const t = 10_000;
    s = startConcluded(s, 'a4', { kind: 'failed', error: kev }, t, S).state;
    assert.equal(s.models.alpha!.consecutiveFailures, 4);
    const emptyLog = { code: 'REPLICA_EXITED' as const, message: 'llama-server exited with an empty log (process gone)', logTail: '' };
    const halfRemoved = observed(spec, 'a4', 'alpha', 'failed', { failure: emptyLog });
    const run = (state: typeof s, nodes: ReturnType<typeof node>[], now: number) =>
      decide({ state, spec, nodes, memory: memoryOf(spec), memoryErrors: {}, running: new Set(), stopping: new Set(), now, newReplicaId: () => 'next' });
    // a pass whose observation no longer shows it (a stop finished and forgot it)
    const d1 = run(s, [node('cpu-01'), node('cpu-02')], t + 1000);
    assert.ok(d1.state.accounted.a4 !== undefined, 'remembered while out of sight');
    // the next observation shows it again, half removed by the other stop
    const d2 = run(d1.state, [node('cpu-01', [halfRemoved]), node('cpu-02')], t + 2000);
    assert.equal(d2.state.models.alpha!.consecutiveFailures, 4, 'not counted a second time');
    assert.equal(d2.state.models.alpha!.lastError?.code, 'REPLICA_UNKNOWN_ARCHITECTURE', "the start's own reason stands");
    assert.equal(d2.state.models.alpha!.parked, null);
    // long out of sight, it is forgotten
    assert.equal(pruned(d1.state, [node('cpu-01')], new Set(), t + ACCOUNTED_KEEP_MS).accounted.a4, undefined);
  });
});
