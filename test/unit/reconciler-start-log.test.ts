/**
 * A start's outcome comes from its own log (#23 item 6b). Two ways the unknown-architecture model
 * was parked with "llama-server exited with an empty log (process gone)" instead of the engine's
 * line, as table tests:
 * - a replica whose failure was counted, out of sight for one observation (one stop finished, its
 *   bookkeeping pruned), then seen again half removed by a second stop (state.json there, its pid
 *   and log gone): counted a second time with an empty log. A counted failure is remembered.
 * - llama-server itself lost its output: its logger thread is not drained at exit, so a start that
 *   fails within milliseconds on a busy machine can leave an empty log (or only its first lines),
 *   for good — reading it again finds nothing more (failure.ts). Such a failure is counted (the
 *   process did exit before it was healthy) but does not replace the reason the engine gave for
 *   the same definition: the table below.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { initialHealth, retried, startFailed, stayedReady } from '../../src/reconciler/health.js';
import { startConcluded, type StartOutcome } from '../../src/reconciler/outcomes.js';
import { ACCOUNTED_KEEP_MS, decide, pruned } from '../../src/reconciler/pass.js';
import { startLaunched, type ControllerState } from '../../src/reconciler/state.js';
import { asV2 } from '../harness/record-v2.js';
import { alphaOnlySpec, KEV_FAILURE, memoryOf, node, observed, specOf, stateFor } from '../harness/reconciler-core.js';

describe("a start's outcome from its own log", () => {
  it('a counted failure is never counted again, however its replica comes and goes in observations', async () => {
    const spec = await alphaOnlySpec();
    const S = spec.settings;
    const alpha = spec.models.alpha!;
    const kev = KEV_FAILURE;
    // four failures counted, the fifth start launched and failed with the engine's reason
    let h = initialHealth(alpha.digest);
    for (let i = 0; i < 3; i++) h = startFailed(h, kev, i, S);
    let s = startLaunched(stateFor(spec, { models: { alpha: h } }), 'a4', { model: 'alpha', node: 'cpu-01', digest: alpha.digest, startedAt: 100 });
    const t = 10_000;
    s = startConcluded(s, 'a4', { kind: 'failed', error: kev }, t, S).state;
    assert.equal(s.models.alpha!.health.consecutiveFailures, 4);
    const emptyLog = { code: 'REPLICA_EXITED' as const, message: 'llama-server exited with an empty log (process gone)', logTail: '' };
    const halfRemoved = observed(spec, 'a4', 'alpha', 'failed', { failure: emptyLog });
    const run = (state: typeof s, nodes: ReturnType<typeof node>[], now: number) =>
      decide({ state, spec, nodes, memory: memoryOf(spec), memoryErrors: {}, running: new Set(), stopping: new Set(), now, newReplicaId: () => 'next' });
    // a pass whose observation no longer shows it (a stop finished and forgot it)
    const d1 = run(s, [node('cpu-01'), node('cpu-02')], t + 1000);
    assert.ok(asV2(d1.state).accounted.a4 !== undefined, 'remembered while out of sight');
    // the next observation shows it again, half removed by the other stop
    const d2 = run(d1.state, [node('cpu-01', [halfRemoved]), node('cpu-02')], t + 2000);
    assert.equal(d2.state.models.alpha!.health.consecutiveFailures, 4, 'not counted a second time');
    assert.equal(d2.state.models.alpha!.health.lastError?.code, 'REPLICA_UNKNOWN_ARCHITECTURE', "the start's own reason stands");
    assert.equal(d2.state.models.alpha!.health.parked, null);
    // long out of sight, it is forgotten
    assert.equal(asV2(pruned(d1.state, [node('cpu-01')], new Set(), t + ACCOUNTED_KEEP_MS)).accounted.a4, undefined);
  });

  it("a silent failure is counted, and the model keeps the reason the engine gave (table)", async () => {
    const spec = await specOf((f) => {
      delete f['models/beta.yaml'];
      delete f['models/gamma.yaml'];
    });
    const S = spec.settings;
    const alpha = spec.models.alpha!;
    const kev = { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: "node cpu-01: replica a: llama_model_load: error loading model: unknown model architecture: 'kev'" };
    const empty = { code: 'REPLICA_EXITED', message: 'node cpu-01: replica a: llama-server exited with an empty log (process gone)' };
    const said = { code: 'REPLICA_EXITED', message: 'node cpu-01: replica a: llama-server exited (process gone): error: invalid argument: --bogus' };
    const disk = { code: 'NODE_DISK_FULL', message: 'node cpu-01: fetch model: no space left on device' };
    const oom = { code: 'REPLICA_OUT_OF_MEMORY', message: 'node cpu-01: replica a: failed to allocate buffer for kv cache' };
    type Step = { error: typeof kev; silent?: true } | 'retry' | 'stayed ready';
    const K: Step = { error: kev };
    const E: Step = { error: empty, silent: true };
    // what happened, in order → the model's last error after it, and whether it is parked with it
    const table: [string, Step[], typeof kev, boolean][] = [
      ['the fifth start silent: parked with the engine\'s reason', [K, K, K, K, E], kev, true],
      ['the first start silent, the others said why', [E, K, K, K, K], kev, true],
      ['silent between stated ones', [K, E, E, K, E], kev, true],
      ['every start silent: nothing better is known', [E, E, E, E, E], empty, true],
      ['a stated failure replaces the last error, a silent one after it does not', [K, { error: oom }, E], oom, false],
      ['a stated exit is a reason too', [K, { error: said }, E], said, false],
      ['a node\'s setback (not counted) is no reason for the model\'s failures', [K, { error: disk }, E], empty, false],
      ['after a retry, the first start silent: the reason from before stays', [K, K, K, K, K, 'retry', E], kev, false],
      ['after the count was reset by a ready replica, a silent failure is the last error', [K, K, 'stayed ready', E], empty, false],
    ];
    for (const [what, steps, lastError, parked] of table) {
      let s: ControllerState = stateFor(spec);
      let t = 1_000;
      let notes: readonly { msg: string; fields: Record<string, unknown> }[] = [];
      steps.forEach((step, i) => {
        t += 60_000;
        if (step === 'retry') s = { ...s, models: { alpha: { ...s.models.alpha!, health: retried(s.models.alpha!.health, `admin:${i}`).health } } };
        else if (step === 'stayed ready') s = { ...s, models: { alpha: { ...s.models.alpha!, health: stayedReady(s.models.alpha!.health, t - S.readyResetMs, t, S) } } };
        else {
          // the start op's path: launched, concluded failed with its own reading of the log
          const id = `a${i}`;
          s = startLaunched(s, id, { model: 'alpha', node: 'cpu-01', digest: alpha.digest, startedAt: t });
          const outcome: StartOutcome = step.silent ? { kind: 'failed', error: step.error, silent: true } : { kind: 'failed', error: step.error };
          ({ state: s, notes } = startConcluded(s, id, outcome, t, S));
        }
      });
      const h = s.models.alpha!.health;
      assert.deepEqual(h.lastError, lastError, what);
      assert.deepEqual(h.parked?.lastError ?? null, parked ? lastError : null, what);
      // the log line says what it is parked with, not the silent last failure's words
      const parkedNote = notes.find((n) => n.msg.startsWith('model parked'));
      assert.deepEqual(parkedNote ? [parkedNote.fields.code, parkedNote.fields.reason] : null, parked ? [lastError.code, lastError.message] : null, what);
    }

    // the same for a failure the nodes show (a replica that died with nobody's start running for it)
    let h = initialHealth(alpha.digest);
    for (let i = 0; i < 4; i++) h = startFailed(h, kev, i, S);
    const seen = observed(spec, 'a4', 'alpha', 'failed', { failure: { ...empty, code: 'REPLICA_EXITED', logTail: '', silent: true } });
    const d = decide({ state: stateFor(spec, { models: { alpha: h } }), spec, nodes: [node('cpu-01', [seen]), node('cpu-02')], memory: memoryOf(spec), memoryErrors: {}, running: new Set(), stopping: new Set(), now: 500_000, newReplicaId: () => 'next' });
    assert.equal(d.state.models.alpha!.health.consecutiveFailures, 5, 'counted');
    assert.deepEqual(d.state.models.alpha!.health.parked?.lastError, kev, 'parked with the engine\'s reason');
  });
});
