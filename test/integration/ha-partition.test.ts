/**
 * The leader cut off from etcd while a replica start is in progress (a TCP forwarder between it and
 * a real etcd stops relaying, sockets left open: no error, just silence). Must hold:
 * - it stops acting before its lease can have expired: its "deposed" comes before anyone else is
 *   elected, and within the renew deadline of the cut;
 * - an SSH action it still sends after the new leader's first action (sent here with its owner and
 *   epoch over the real sshd) is refused by the node's epoch check, NODE_FENCED, and changes nothing;
 * - its status-branch push (its epoch, to the real git server) is refused, STATUS_EPOCH_STALE;
 * - every llama-server on the node is one the new leader reports; back on etcd it is a standby.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Etcd3 } from 'etcd3';
import { LlmgwError } from '../../src/errors/catalogue.js';
import { FleetRepo } from '../../src/git/repo.js';
import { epochOf } from '../../src/git/trailers.js';
import { writeStatusBranch } from '../../src/git/status-branch.js';
import { clusterOwner } from '../../src/ha/shared.js';
import { openNodeDriver } from '../../src/nodes/shell-driver.js';
import { writeTinyModel } from '../fixtures/gguf.js';
import { modelYaml, startTestFleet, type TestFleet } from '../harness/controller.js';
import { startEtcd, type EtcdInstance } from '../harness/etcd.js';
import { replicaProcesses } from '../harness/replica-procs.js';
import { logLines, spawnServe, type ServeProc, procsDiag } from '../harness/serve-proc.js';
import { until } from '../harness/wait.js';
import { sshdNodeSpec } from '../harness/sshd.js';
import { startTcpForwarder, type TcpForwarder } from '../harness/tcp-forwarder.js';
import { startThrottledOrigin, type ThrottledOrigin } from '../harness/throttled-origin.js';

const PREFIX = '/llmgw';
const LEASE_S = 6;
const RENEW_MS = 3000;
const HA = (endpoint: string): string[] => ['--etcd', endpoint, '--lease-ttl', `${LEASE_S}s`, '--renew-deadline', `${RENEW_MS}ms`, '--retry-period', '1s'];

interface StatusJson {
  leader: boolean;
  control: { instance: { id: string; label: string }; leader: { id: string; epoch: number | null } | null; notActing: { code: string } | null };
}
interface ModelJson {
  name: string;
  phase: string;
  replicas: { id: string; phase: string }[];
}

let etcd: EtcdInstance;
let fleet: TestFleet;
let fwd: TcpForwarder;
let origin: ThrottledOrigin;
let procs: ServeProc[] = [];
const diag = (): string => procsDiag(procs, 4000);

const timeOf = (p: ServeProc, msg: string): number | null => {
  const l = logLines(p.out()).find((x) => x.msg === msg);
  return l ? Number(l.time) : null;
};
const ownerEpoch = (dataDir: string): number => Number(readFileSync(join(dataDir, '.locks', 'owner'), 'utf8').split(' ')[2]);

before(async () => {
  [etcd, fleet] = await Promise.all([startEtcd(), startTestFleet({ nodes: 1 })]);
  const slow = await writeTinyModel(join(fleet.stateDir, '..', 'slow.gguf'), { seed: 21 });
  origin = await startThrottledOrigin(slow.path, { bytesPerSecond: Math.ceil(slow.bytes / 20) });
  fwd = await startTcpForwarder(Number(new URL(etcd.endpoint).port));
  const files = fleet.baseFiles();
  for (const f of ['models/kev.yaml', 'models/huge.yaml']) delete files[f];
  await fleet.push(files, 'fleet: one model');
  // the leader-to-be reaches etcd through the forwarder; the others directly
  const a = await spawnServe({ name: 'a', fleet, args: HA(`http://127.0.0.1:${fwd.port}`) });
  procs = [a];
  await until('a leads', 60_000, async () => (await a.admin<StatusJson>('/status')).leader, { diag });
  procs.push(...(await Promise.all(['b', 'c'].map((name) => spawnServe({ name, fleet, args: HA(etcd.endpoint) })))));
  await until('good ready', 120_000, async () => (await a.admin<{ models: ModelJson[] }>('/models')).models.find((m) => m.name === 'good')?.phase === 'ready', { diag });
  // a start that takes a while: its model file comes slowly
  await fleet.push({ 'models/slow.yaml': modelYaml(slow, ['replicas: 1']).replace(`source: file://${slow.path}`, `source: ${origin.url}`) }, 'fleet: a model downloaded slowly');
});

after(async () => {
  await Promise.all(procs.map((p) => p.sigkill()));
  await fwd?.close();
  await origin?.close();
  await fleet?.cleanup();
  await etcd?.stop();
});

describe('the leader cut off from etcd mid-start', () => {
  it('stops acting before its lease expires; its later node action and status push are refused by epoch', async () => {
    const [a, b, c] = procs as [ServeProc, ServeProc, ServeProc];
    const aStatus = await a.admin<StatusJson>('/status');
    const aEpoch = aStatus.control.leader!.epoch!;
    await a.admin('/models/good/retry', { method: 'POST' }); // a pass picks up the commit
    await until('the slow download in progress', 60_000, () => /"model":"slow"[^\n]*"msg":"starting replica"/.test(a.out()) && origin.gets.some((g) => !g.done && g.sent > 0 && (g.range === '' || /^bytes=\d+-$/.test(g.range))), { diag });

    const cutAt = Date.now();
    fwd.stall();
    const deposedAt = await until('a deposed', RENEW_MS + 10_000, () => timeOf(a, 'deposed: stopped acting as leader'), { diag });
    const next = await until('b or c leads', (LEASE_S + 30) * 1000, async () => {
      for (const p of [b, c]) {
        const s = await p.admin<StatusJson>('/status');
        if (s.leader && s.control.leader!.epoch! > aEpoch) return { p, epoch: s.control.leader!.epoch! };
      }
      return null;
    }, { diag });
    const electedAt = timeOf(next.p, 'elected leader')!;
    assert.ok(deposedAt - cutAt <= RENEW_MS + 1500, `a stopped acting ${deposedAt - cutAt} ms after the cut (renew deadline ${RENEW_MS} ms)`);
    assert.ok(deposedAt < electedAt, `a stopped acting (${deposedAt}) before ${next.p.name} was elected (${electedAt}): never two acting leaders`);

    // the new leader's first action on the node records its epoch there
    const node = fleet.nodes[0]!;
    await until("the node records the new leader's epoch", 30_000, () => ownerEpoch(node.dataDir) === next.epoch, { diag });

    // an SSH action the old leader still sends, with its owner and epoch: refused by the node
    const client = new Etcd3({ hosts: etcd.endpoint });
    const clusterId = (await client.get(`${PREFIX}/cluster-id`).string())!;
    client.close();
    const goodId = await until("the new leader's first snapshot", 30_000, async () => (await next.p.admin<{ models: ModelJson[] }>('/models')).models.find((m) => m.name === 'good')?.replicas.find((r) => r.phase === 'ready')?.id, { diag });
    const spec = sshdNodeSpec(node, { name: 'node-1', dataDir: node.dataDir });
    const stale = openNodeDriver(spec, { secretsDir: node.secretsDir, fence: () => ({ owner: clusterOwner(clusterId, PREFIX), label: `llmgw HA cluster ${PREFIX} (leader: ${aStatus.control.instance.label})`, epoch: aEpoch, ttlSeconds: 60 }) });
    try {
      await assert.rejects(stale.stopReplica(goodId, 0), (e: unknown) => e instanceof LlmgwError && e.code === 'NODE_FENCED' && e.message.includes(String(next.epoch)));
    } finally {
      await stale.close();
    }
    assert.ok(replicaProcesses(node.dataDir).includes(goodId), "the refused stop left the new leader's replica running");
    assert.equal(ownerEpoch(node.dataDir), next.epoch, 'the refused action did not lower the epoch on record');

    // the old leader's status push: refused once the new epoch has written the branch
    const gitDir = join(fleet.git.root, 'fleet.git');
    const headEpoch = (): number | null => epochOf(spawnSync('git', ['--git-dir', gitDir, 'log', '-1', '--format=%B', 'llmgw/status'], { encoding: 'utf8' }).stdout);
    await until('a status commit of the new epoch', 60_000, async () => {
      if (headEpoch() === next.epoch) return true;
      await next.p.admin('/models/good/retry', { method: 'POST' });
      return false;
    }, { diag });
    const repo = new FleetRepo({ url: fleet.git.url('fleet.git'), token: { file: join(fleet.secretsDir, 'git-token') }, cacheDir: join(fleet.stateDir, 'stale-status.git') });
    await assert.rejects(writeStatusBranch(repo, { branch: 'llmgw/status', files: { 'fleet.json': '{}' }, message: 'llmgw status (the deposed leader)', epoch: aEpoch }), (e: unknown) => e instanceof LlmgwError && e.code === 'STATUS_EPOCH_STALE');
    assert.equal(headEpoch(), next.epoch, "the branch still ends with the new leader's commit");

    // back on etcd, the old leader is a standby; every llama-server is one the leader reports
    fwd.restore();
    await until('a a standby', 60_000, async () => (await a.admin<StatusJson>('/status')).control.notActing?.code === 'CONTROLLER_STANDBY', { diag });
    await until('slow ready under the new leader', 120_000, async () => (await next.p.admin<{ models: ModelJson[] }>('/models')).models.find((m) => m.name === 'slow')?.phase === 'ready', { diag });
    const reported = (await next.p.admin<{ models: ModelJson[] }>('/models')).models.flatMap((m) => m.replicas.map((r) => r.id)).sort();
    assert.deepEqual(replicaProcesses(node.dataDir), reported, 'every llama-server on the node is a replica the leader reports');
    assert.ok(!/"msg":"starting replica"/.test(a.out().slice(a.out().indexOf('deposed: stopped acting as leader'))), 'the deposed leader started nothing after it stopped acting');
  });
});
