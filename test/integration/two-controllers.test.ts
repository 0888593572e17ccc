/**
 * Two lone `llmgw serve` controllers (no etcd) pointed at one fleet: the node's owner record makes
 * the second refuse to act. It says so and why — in /admin/v1/status, `ctl status`, its log and
 * metrics — and neither stops nor adopts nor starts anything: the first keeps its replicas.
 */
import { strict as assert } from 'node:assert';
import { after, before, describe, it } from 'node:test';
import { runCli } from '../harness/cli.js';
import { startTestFleet, type TestFleet } from '../harness/controller.js';
import { replicaProcesses } from '../harness/replica-procs.js';
import { logLines, spawnServe, type ServeProc, procsDiag } from '../harness/serve-proc.js';
import { until } from '../harness/wait.js';

interface StatusJson {
  leader: boolean;
  control: { mode: string; instance: { id: string; label: string }; notActing: { code: string; message: string; hint: string } | null };
}
interface ModelJson {
  name: string;
  phase: string;
  replicas: { id: string; phase: string }[];
}

let fleet: TestFleet;
const procs: ServeProc[] = [];
const diag = (): string => procsDiag(procs, 3000);

before(async () => {
  fleet = await startTestFleet({ nodes: 2 });
  const files = fleet.baseFiles();
  for (const f of ['models/kev.yaml', 'models/huge.yaml']) delete files[f];
  await fleet.push(files, 'fleet: one model');
});

after(async () => {
  await Promise.all(procs.map((p) => p.sigkill()));
  await fleet?.cleanup();
});

describe('two controllers without etcd on one fleet', () => {
  it('the second reports that it does not act and why, and touches none of the first one\'s replicas', async () => {
    const first = await spawnServe({ name: 'first', fleet });
    procs.push(first);
    const models = async (p: ServeProc): Promise<Record<string, ModelJson>> => Object.fromEntries((await p.admin<{ models: ModelJson[] }>('/models')).models.map((m) => [m.name, m]));
    await until('good ready under the first', 120_000, async () => (await models(first)).good?.phase === 'ready', { diag });
    const firstStatus = await first.admin<StatusJson>('/status');
    assert.equal(firstStatus.leader, true);
    const replicaIds = fleet.nodes.flatMap((n) => replicaProcesses(n.dataDir));
    assert.equal(replicaIds.length, 1);

    const second = await spawnServe({ name: 'second', fleet });
    procs.push(second);
    const st = await until('the second refusing to act', 60_000, async () => {
      const s = await second.admin<StatusJson>('/status');
      return s.control.notActing ? s : null;
    }, { diag });
    assert.equal(st.leader, false);
    assert.equal(st.control.notActing!.code, 'NODE_OWNED');
    assert.ok(st.control.notActing!.message.includes(firstStatus.control.instance.label), st.control.notActing!.message);
    assert.match(st.control.notActing!.hint, /--etcd/);
    // a few more passes of the second (each looks at the nodes, and must do nothing)
    for (let i = 0; i < 3; i++) await second.admin('/models/good/retry', { method: 'POST' });

    const ctl = await runCli(['ctl', 'status', '--server', `http://127.0.0.1:${second.adminPort}`]);
    assert.match(ctl.stdout, /^controller +NOT acting/m);
    assert.match(ctl.stdout, /^not acting +node node-\d is owned by llmgw on .* \[NODE_OWNED\]$/m);
    const metrics = await (await fetch(`http://127.0.0.1:${second.adminPort}/metrics`)).text();
    assert.match(metrics, /^llmgw_leader 0$/m);
    assert.match(metrics, /^llmgw_not_acting_info\{code="NODE_OWNED"\} 1$/m);
    const lines = logLines(second.out());
    assert.ok(lines.some((l) => l.msg === 'not acting on the fleet: another controller owns it' && l.code === 'NODE_OWNED'), 'the second logs why it does not act');
    for (const msg of ['starting replica', 'stopping replica']) assert.ok(!lines.some((l) => l.msg === msg), `the second logged "${msg}"`);

    // the first keeps its replica and keeps acting
    assert.deepEqual(fleet.nodes.flatMap((n) => replicaProcesses(n.dataDir)), replicaIds);
    assert.deepEqual((await models(first)).good!.replicas.map((r) => `${r.id} ${r.phase}`), [`${replicaIds[0]} ready`]);
    const again = await first.admin<StatusJson>('/status');
    assert.equal(again.leader, true);
    assert.equal(again.control.notActing, null);
  });
});
