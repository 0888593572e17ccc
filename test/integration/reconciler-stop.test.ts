/**
 * Stopping the controller while a replica start is in flight (real sshd node, real git server):
 * nothing is launched after stop() returns, and the interrupted start does not count against the model.
 */
import { strict as assert } from 'node:assert';
import { after, before, describe, it } from 'node:test';
import { openNodeDriver } from '../../src/nodes/shell-driver.js';
import type { NodeDriver, ReplicaStartSpec } from '../../src/nodes/driver.js';
import { startTestFleet, type TestFleet } from '../harness/controller.js';

let fleet: TestFleet;

before(async () => {
  fleet = await startTestFleet({ nodes: 1 });
  const files = fleet.baseFiles();
  delete files['models/kev.yaml'];
  delete files['models/huge.yaml'];
  await fleet.push(files, 'one model');
});

after(async () => {
  await fleet?.cleanup();
});

describe('controller stop with a start in flight', () => {
  it('gives up before launching; stop() waits for it; no failure is counted', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let fetching!: () => void;
    const fetchStarted = new Promise<void>((r) => (fetching = r));
    const launched: string[] = [];
    const ctl = await fleet.startController({
      driverFor: (n) => {
        const d = openNodeDriver(n, { secretsDir: fleet.secretsDir });
        return Object.assign(Object.create(d) as NodeDriver, {
          // the model file "download" blocks until the test releases it
          ensureModel: async (source: string, sha256: string) => {
            fetching();
            await gate;
            return d.ensureModel(source, sha256);
          },
          startReplica: (spec: ReplicaStartSpec) => {
            launched.push(spec.model);
            return d.startReplica(spec);
          },
        });
      },
    });
    await fetchStarted;
    assert.equal(ctl.reconciler.model('good')?.phase, 'starting');

    let stopped = false;
    const stopping = ctl.stop().then(() => (stopped = true));
    // "stop() does not return while the start is held": nothing to wait for but time. 200 ms is
    // far more than stop() needs when it does not wait (it only closes the node connections).
    await new Promise((r) => setTimeout(r, 200)); // deliberate: a non-event (stop() not returning) has nothing to wait on
    assert.equal(stopped, false, 'stop() returned while the start was still in flight');
    release();
    await stopping;
    assert.deepEqual(launched, [], 'a replica was launched by a stopping controller');
    assert.ok(ctl.logs.some((l) => l.msg === 'controller stopping: replica not launched' && l.model === 'good'));
    assert.equal(ctl.reconciler.model('good')?.consecutiveFailures, 0);
    // and nothing is launched later either: a pass asked for now is refused, and for a while
    // (no event marks "nothing happened") nothing else launches
    await ctl.reconciler.requestPass('test');
    await new Promise((r) => setTimeout(r, 200)); // deliberate: a non-event (no launch) has nothing to wait on
    assert.deepEqual(launched, []);
  });
});
