/**
 * Three real `llmgw serve` instances on one real etcd, over sshd nodes running real llama-server:
 * one leads, every instance routes. SIGKILL of the leader: another takes over within the lease plus
 * a pass, resuming from the state record in etcd — no model gets more llama-server processes than it
 * wants (sampled every 200 ms), no replica is restarted, the parked model stays parked with its count,
 * the on-demand model in use keeps its replica, and clients streaming chat requests to the surviving
 * instances (the one that takes over and the one that stays a standby) see no failed request. Then `ctl retry` on a standby is carried out by the leader, and
 * the status branch carries the new epoch.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { epochOf } from '../../src/git/trailers.js';
import { runCli } from '../harness/cli.js';
import { modelYaml, startTestFleet, type TestFleet } from '../harness/controller.js';
import { startEtcd, type EtcdInstance } from '../harness/etcd.js';
import { replicaProcesses } from '../harness/replica-procs.js';
import { agreedLeader, spawnServe, type HaStatusJson, type ServeProc, procsDiag } from '../harness/serve-proc.js';
import { until } from '../harness/wait.js';

const LEASE_S = 4;
const HA = (endpoint: string): string[] => ['--etcd', endpoint, '--lease-ttl', `${LEASE_S}s`, '--renew-deadline', '3s', '--retry-period', '1s'];

interface ModelJson {
  name: string;
  phase: string;
  consecutiveFailures: number;
  replicas: { id: string; phase: string }[];
}

let etcd: EtcdInstance;
let fleet: TestFleet;
let procs: ServeProc[] = [];

const diag = (): string => procsDiag(procs, 3000);

async function models(p: ServeProc): Promise<Record<string, ModelJson>> {
  const r = await p.admin<{ models: ModelJson[] }>('/models');
  return Object.fromEntries(r.models.map((m) => [m.name, m]));
}

/** Requests that did not get 200: model, status, the router's reason and the instance's role, for the message. */
const failures: string[] = [];

async function chat(p: ServeProc, model: string): Promise<number> {
  try {
    const r = await fetch(`http://127.0.0.1:${p.routerPort}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }),
      signal: AbortSignal.timeout(60_000),
    });
    const body = await r.text();
    if (r.status !== 200) failures.push(`${new Date().toISOString()} ${p.name} ${model} ${r.status} ${r.headers.get('x-llmgw-reason') ?? ''} ${body.slice(0, 300)}`);
    return r.status;
  } catch (e) {
    failures.push(`${new Date().toISOString()} ${p.name} ${model} no answer: ${String(e)}`);
    return 0;
  }
}

const modelOf = (replicaId: string): string => replicaId.replace(/-[0-9a-f]{8}$/, '');

before(async () => {
  [etcd, fleet] = await Promise.all([startEtcd(), startTestFleet({ nodes: 2 })]);
  const files = fleet.baseFiles();
  delete files['models/huge.yaml'];
  files['models/od.yaml'] = modelYaml(fleet.models.good2, ['on_demand: { idle_timeout: 10m }']);
  await fleet.push(files, 'fleet: an always-on model, a failing one, an on-demand one');
  procs = await Promise.all(['a', 'b', 'c'].map((name) => spawnServe({ name, fleet, args: HA(etcd.endpoint) })));
});

after(async () => {
  await Promise.all(procs.map((p) => p.sigkill()));
  await fleet?.cleanup();
  await etcd?.stop();
});

describe('three instances on etcd', () => {
  let leader: { proc: ServeProc; epoch: number };
  let survivors: ServeProc[];

  it('one leads, and a standby serves the router and activates an on-demand model through the leader', async () => {
    leader = await until('one agreed leader', 90_000, () => agreedLeader(procs), { diag });
    const standbys = procs.filter((p) => p !== leader.proc);
    const st = await standbys[0]!.admin<HaStatusJson>('/status');
    assert.equal(st.control.notActing?.code, 'CONTROLLER_STANDBY');
    await until('good ready and kev parked', 120_000, async () => {
      const m = await models(leader.proc);
      return m.good?.phase === 'ready' && m.kev?.phase === 'parked';
    }, { diag });
    // a standby routes from the published snapshot, and its on-demand request reaches the leader
    assert.equal(await chat(standbys[0]!, 'good'), 200);
    assert.equal(await chat(standbys[1]!, 'od'), 200, diag());
    // and refuses a parked model with the leader's answer
    const parked = await fetch(`http://127.0.0.1:${standbys[0]!.routerPort}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'kev', messages: [{ role: 'user', content: 'hi' }] }) });
    assert.equal(parked.status, 503);
    assert.equal(parked.headers.get('x-should-retry'), 'false');
    const envelope = (await parked.json()) as { error: { code: string; message: string } };
    assert.equal(envelope.error.code, 'model_parked');
    assert.match(envelope.error.message, /unknown model architecture/);
    const onStandby = await models(standbys[0]!);
    assert.equal(onStandby.kev?.phase, 'parked');
    assert.equal(onStandby.kev?.consecutiveFailures, 5);
    assert.equal(onStandby.od?.phase, 'ready');
  });

  it('SIGKILL of the leader: another leads within the lease and a pass; nothing more than desired, nothing restarted, parking kept, no failed request', async (t) => {
    survivors = procs.filter((p) => p !== leader.proc);
    const before = await models(survivors[0]!);
    const goodId = before.good!.replicas.find((r) => r.phase === 'ready')!.id;
    const odId = before.od!.replicas.find((r) => r.phase === 'ready')!.id;

    const most: Record<string, number> = {};
    const seen = new Set<string>();
    const sample = (): void => {
      const count: Record<string, number> = {};
      for (const n of fleet.nodes) for (const id of replicaProcesses(n.dataDir)) {
        seen.add(id);
        count[modelOf(id)] = (count[modelOf(id)] ?? 0) + 1;
      }
      for (const [m, c] of Object.entries(count)) most[m] = Math.max(most[m] ?? 0, c);
    };
    sample();
    const sampler = setInterval(sample, 200);
    const results: number[] = [];
    let streaming = true;
    // a stream to each survivor: one of them becomes the leader, the other stays a standby
    const stream = Promise.all(
      survivors.map(async (client) => {
        let i = 0;
        while (streaming) results.push(await chat(client, i++ % 5 === 4 ? 'od' : 'good'));
      }),
    );
    await until('some requests served before the kill', 30_000, () => results.length >= 5);

    const killedAt = Date.now();
    await leader.proc.sigkill();
    const next = await until('a new leader with a pass after the kill', (LEASE_S + 60) * 1000, () => agreedLeader(survivors, { epochAbove: leader.epoch, passAfter: killedAt }), { diag });
    const failoverMs = Date.now() - killedAt;
    // the new leader's passes go on while the requests do (a webhook-less fleet: ask for two more)
    for (let i = 0; i < 2; i++) await next.proc.admin('/models/good/retry', { method: 'POST' });
    streaming = false;
    await stream;
    clearInterval(sampler);
    sample();

    t.diagnostic(`failover: ${failoverMs} ms from SIGKILL to the new leader's first pass (lease ${LEASE_S} s); ${results.length} requests to the two surviving instances, ${results.filter((s) => s !== 200).length} failed`);
    assert.ok(failoverMs <= (LEASE_S + 30) * 1000, `failover took ${failoverMs} ms`);
    const failed = results.filter((s) => s !== 200);
    assert.deepEqual(failed, [], `${failed.length} of ${results.length} requests to the surviving instances failed during the failover (killed at ${new Date(killedAt).toISOString()}, new leader ${next.proc.name}):\n${failures.slice(0, 8).join('\n')}\n${diag()}`);
    assert.ok(results.length >= 10, `${results.length} requests sent`);
    assert.deepEqual(most, { good: 1, od: 1 }, `llama-server processes per model at most (sampled every 200 ms): ${JSON.stringify(most)}`);
    assert.deepEqual([...seen].sort(), [goodId, odId].sort(), 'no replica was started anew (same ids throughout)');
    const m = await models(next.proc);
    assert.equal(m.kev!.phase, 'parked');
    assert.equal(m.kev!.consecutiveFailures, 5, 'the parked model kept its count');
    assert.deepEqual(m.good!.replicas.map((r) => `${r.id} ${r.phase}`), [`${goodId} ready`]);
    assert.deepEqual(m.od!.replicas.map((r) => `${r.id} ${r.phase}`), [`${odId} ready`], 'the on-demand model in use was not stopped');
    assert.ok(!/"msg":"starting replica"/.test(next.proc.out()), 'the new leader started nothing');
    leader = next;
  });

  it('ctl retry on a standby unparks the model: the leader starts it again, and the status branch carries the new epoch', async () => {
    const standby = survivors.find((p) => p !== leader.proc)!;
    const mark = leader.proc.out().length;
    const r = await runCli(['ctl', 'retry', 'kev', '--server', `http://127.0.0.1:${standby.adminPort}`]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /unparked/);
    await until('the leader starting kev again', 60_000, () => /"model":"kev"[^\n]*"msg":"starting replica"/.test(leader.proc.out().slice(mark)), { diag });
    await until('kev parked again after 5 more failures', 120_000, async () => (await models(leader.proc)).kev?.phase === 'parked', { diag });
    // the status branch: commits of the new epoch, and epochs never decrease along its history
    const gitDir = join(fleet.git.root, 'fleet.git');
    const status = await until('a status commit of the new epoch', 30_000, () => {
      const log = spawnSync('git', ['--git-dir', gitDir, 'log', '--first-parent', '--format=%B%x00', 'llmgw/status'], { encoding: 'utf8' });
      const epochs = log.stdout.split('\0').map((b) => b.trim()).filter((b) => b !== '').map((b) => epochOf(b));
      return epochs[0] === leader.epoch ? epochs : null;
    }, { diag });
    const ordered = status.filter((e): e is number => e !== null).reverse();
    for (let i = 1; i < ordered.length; i++) assert.ok(ordered[i]! >= ordered[i - 1]!, `epochs along the status branch: ${ordered.join(' ')}`);
    assert.ok(ordered.some((e) => e < leader.epoch), 'the old leader wrote status too (with its lower epoch)');
  });

  it('ctl restart on a standby is carried out by the leader: the replica replaced surge-first, the standby sees it done', async () => {
    const standby = survivors.find((p) => p !== leader.proc)!;
    const old = (await models(leader.proc)).good!.replicas.find((r) => r.phase === 'ready')!.id;
    const r = await runCli(['ctl', 'restart', '--model', 'good', '--timeout', '120s', '--server', `http://127.0.0.1:${standby.adminPort}`]);
    assert.equal(r.code, 0, r.stdout + r.stderr + diag());
    const after = await until('the standby shows the new replica', 30_000, async () => {
      const g = (await models(standby)).good!;
      return g.replicas.length === 1 && g.replicas[0]!.id !== old && g.replicas[0]!.phase === 'ready' ? g : null;
    }, { diag });
    assert.notEqual(after.replicas[0]!.id, old);
    assert.ok(!fleet.nodes.some((n) => replicaProcesses(n.dataDir).includes(old)), 'the old replica was stopped');
  });
});
