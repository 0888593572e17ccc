/**
 * A start's outcome comes from its own log (#23 item 6b): 20 park cycles of the unknown-architecture
 * model on the local transport (the real llama-server, short backoff, `retry` through the admin
 * call between cycles) — every parked reason is REPLICA_UNKNOWN_ARCHITECTURE with the engine's own
 * line, never "llama-server exited with an empty log".
 *
 * llama-server itself loses the lines still queued in its logger when it exits (nodes/failure.ts):
 * on a busy machine a few of the 100 starts leave an empty log (or only its first lines). Such a
 * start is counted as failed and says so ('silent'), and the model keeps the reason the engine gave
 * on another start. Only if no start before a park had said why could the park say nothing better.
 */
import { strict as assert } from 'node:assert';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { replicaPortRange } from '../harness/ports.js';
import { modelYaml, startTestFleet, type TestController, type TestFleet } from '../harness/controller.js';

const CYCLES = 20;
let fleet: TestFleet;
let ctl: TestController;

before(async () => {
  fleet = await startTestFleet({ nodes: 1 });
  const files = fleet.baseFiles();
  const dataDir = join(fleet.stateDir, '..', 'local-node');
  mkdirSync(dataDir, { recursive: true });
  const ports = replicaPortRange();
  delete files['models/good.yaml'];
  delete files['models/huge.yaml'];
  delete files['nodes/node-1.yaml'];
  files['fleet.yaml'] = ['poll_interval: 1h', 'park_after_failures: 5', 'backoff: { initial: 50ms, max: 100ms }', 'placement_reserve: 256MiB', 'stop_grace: 1s', ''].join('\n');
  files['nodes/local.yaml'] = `transport: local\ndata_dir: ${dataDir}\nports: { from: ${ports.from}, to: ${ports.to} }\n`;
  files['models/kev.yaml'] = modelYaml(fleet.models.kev, ['replicas: 1']);
  await fleet.push(files, 'kev on the local node');
  ctl = await fleet.startController();
});

after(async () => {
  await fleet?.cleanup();
});

describe('park cycles of the unknown-architecture model (local transport, real llama-server)', { timeout: 15 * 60_000 }, () => {
  it(`${CYCLES} cycles: every parked reason is REPLICA_UNKNOWN_ARCHITECTURE with the engine's line`, async (t) => {
    const failedStarts = () => ctl.logs.filter((l) => l.msg === 'replica start failed' && l.model === 'kev' && l.stage === 'start');
    const wrong: string[] = [];
    for (let cycle = 0; cycle < CYCLES; cycle++) {
      if (cycle > 0) await ctl.reconciler.retry('kev');
      await ctl.until(`kev parked (cycle ${cycle + 1})`, 120_000, () => ctl.reconciler.model('kev')?.parked != null);
      const p = ctl.reconciler.model('kev')!.parked!;
      const reason = `${p.lastError.code}: ${p.lastError.message}`;
      // the engine's line, unless no start so far said why (every one silent)
      const said = failedStarts().some((l) => l.code === 'REPLICA_UNKNOWN_ARCHITECTURE');
      const engines = reason.startsWith('REPLICA_UNKNOWN_ARCHITECTURE: ') && /unknown model architecture: 'kev'/.test(reason);
      if (said ? !engines : !reason.startsWith('REPLICA_EXITED: ')) wrong.push(`cycle ${cycle + 1}: ${reason}`);
    }
    assert.deepEqual(wrong, [], `parked with another reason in ${wrong.length} of ${CYCLES} cycles`);
    // every failed start said the engine's reason, or that its log named none (silent)
    const failed = failedStarts();
    assert.equal(failed.length, CYCLES * 5, 'five counted starts per cycle');
    const silent = failed.filter((l) => l.code === 'REPLICA_EXITED' && l.silent === true);
    assert.deepEqual(failed.filter((l) => l.code !== 'REPLICA_UNKNOWN_ARCHITECTURE' && !silent.includes(l)).map((l) => `${String(l.code)}: ${String(l.reason)}`), []);
    t.diagnostic(`${silent.length} of ${failed.length} failed starts had a silent log (the engine lost its lines at exit)`);
  });
});
