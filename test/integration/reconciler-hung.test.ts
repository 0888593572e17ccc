/**
 * A replica that hangs after being ready (its llama-server SIGSTOPped: the process is alive, /health
 * never answers) is failed with REPLICA_UNHEALTHY once the profile's start timeout has passed:
 * counted, stopped (SIGKILL reaches a stopped process) and replaced. Real sshd node, real llama-server.
 */
import { strict as assert } from 'node:assert';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { startTestFleet, type TestController, type TestFleet } from '../harness/controller.js';

let fleet: TestFleet;
let ctl: TestController;
let hungPid = 0;

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

before(async () => {
  fleet = await startTestFleet({ nodes: 1 });
  const files = fleet.baseFiles();
  delete files['models/kev.yaml'];
  delete files['models/huge.yaml'];
  files['profiles/tiny.yaml'] = files['profiles/tiny.yaml']!.replace('start_timeout: 60s', 'start_timeout: 6s');
  await fleet.push(files, 'one model, short start timeout');
  ctl = await fleet.startController();
});

after(async () => {
  if (hungPid && alive(hungPid)) process.kill(hungPid, 'SIGKILL');
  await fleet?.cleanup();
});

describe('a replica that hangs after being ready', () => {
  it('is failed with REPLICA_UNHEALTHY after the start timeout, stopped and replaced', async () => {
    const model = () => ctl.reconciler.model('good')!;
    await ctl.until('good ready', 90_000, () => model().ready === 1);
    const old = model().replicas[0]!;
    hungPid = Number((await readFile(join(fleet.nodes[0]!.dataDir, 'replicas', old.id, 'pid'), 'utf8')).trim());
    assert.ok(hungPid > 0 && alive(hungPid));
    process.kill(hungPid, 'SIGSTOP');
    const stoppedAt = Date.now();

    await ctl.until('the hung replica failed', 60_000, () => model().lastError?.code === 'REPLICA_UNHEALTHY');
    assert.ok(Date.now() - stoppedAt >= 5_000, 'failed before the start timeout');
    assert.match(model().lastError!.message, new RegExp(`replica ${old.id} on node-1 is running but has not answered /health`));
    assert.equal(model().consecutiveFailures, 1);
    assert.ok(ctl.logs.some((l) => l.msg === 'replica unresponsive: stopping it' && l.replica === old.id));

    await ctl.until('a new replica ready', 60_000, () => model().ready === 1 && model().replicas.every((r) => r.id !== old.id));
    await ctl.until('the hung process killed', 30_000, () => !alive(hungPid));
  });
});
