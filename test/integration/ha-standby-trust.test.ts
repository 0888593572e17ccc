/**
 * What a standby and the leader take from etcd, and what an activation through a standby answers
 * when the leader or etcd is gone: two real `llmgw serve` instances on a real etcd, over sshd nodes
 * running real llama-server.
 *
 * - A published snapshot (a model's key) rewritten in etcd to point a model at a listener outside every node's ports:
 *   a chat through the standby is served by the real replica; the listener receives nothing.
 * - A forged restart-all written straight under `requests/`: refused with a reason in the leader's
 *   log, no replica replaced.
 * - An on-demand activation through the standby with the leader SIGSTOPped, then SIGKILLed (its lease
 *   outlives the window): 503 leader_unavailable with Retry-After within `activation_window`; with etcd
 *   down: 503 etcd_unavailable likewise, while a ready model is still served.
 */
import { strict as assert } from 'node:assert';
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { Etcd3 } from 'etcd3';
import { modelYaml, startTestFleet, type TestFleet } from '../harness/controller.js';
import { startEtcd, type EtcdInstance } from '../harness/etcd.js';
import { freePort } from '../harness/ports.js';
import { replicaProcesses } from '../harness/replica-procs.js';
import { agreedLeader, logLines, spawnServe, type HaStatusJson, type ServeProc, procsDiag } from '../harness/serve-proc.js';
import { until } from '../harness/wait.js';

const PREFIX = '/llmgw-trust';
const WINDOW_MS = 6_000;
/** A lease far longer than the window: a stopped or killed leader still holds the election while a request waits. */
const HA = (endpoint: string): string[] => ['--etcd', endpoint, '--etcd-prefix', PREFIX, '--lease-ttl', '30s', '--renew-deadline', '10s', '--retry-period', '1s'];

interface ReplicaJson {
  id: string;
  node: string;
  endpoint: string;
  phase: string;
}
interface ModelJson {
  name: string;
  phase: string;
  replicas: ReplicaJson[];
}

let etcd: EtcdInstance;
let fleet: TestFleet;
let client: Etcd3;
let procs: ServeProc[] = [];
let leader: ServeProc;
let standby: ServeProc;

const diag = (): string => procsDiag(procs, 3000);

async function models(p: ServeProc): Promise<Record<string, ModelJson>> {
  const r = await p.admin<{ models: ModelJson[] }>('/models');
  return Object.fromEntries(r.models.map((m) => [m.name, m]));
}

async function chat(p: ServeProc, model: string): Promise<{ status: number; ms: number; reason: string | null; retryAfter: string | null; code: string | null }> {
  const t0 = Date.now();
  const r = await fetch(`http://127.0.0.1:${p.routerPort}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }),
    signal: AbortSignal.timeout(90_000),
  });
  const body = (await r.json().catch(() => null)) as { error?: { code?: string } } | null;
  return { status: r.status, ms: Date.now() - t0, reason: r.headers.get('x-llmgw-reason'), retryAfter: r.headers.get('retry-after'), code: body?.error?.code ?? null };
}

/** The node port ranges of the fleet's spec. */
function portRanges(files: Record<string, string>): Array<{ from: number; to: number }> {
  return Object.entries(files)
    .filter(([p]) => p.startsWith('nodes/'))
    .map(([, c]) => {
      const m = /ports: \{ from: (\d+), to: (\d+) \}/.exec(c)!;
      return { from: Number(m[1]), to: Number(m[2]) };
    });
}

before(async () => {
  [etcd, fleet] = await Promise.all([startEtcd(), startTestFleet({ nodes: 2 })]);
  client = new Etcd3({ hosts: etcd.endpoint });
  const files = fleet.baseFiles();
  delete files['models/huge.yaml'];
  delete files['models/kev.yaml'];
  files['fleet.yaml'] += `activation_window: ${WINDOW_MS / 1000}s\n`;
  files['models/od.yaml'] = modelYaml(fleet.models.good2, ['on_demand: { idle_timeout: 10m }']);
  await fleet.push(files, 'fleet: an always-on model and an on-demand one, a 6 s activation window');
  procs = await Promise.all(['a', 'b'].map((name) => spawnServe({ name, fleet, args: HA(etcd.endpoint) })));
  leader = (await until('one agreed leader', 90_000, () => agreedLeader(procs), { diag })).proc;
  standby = procs.find((p) => p !== leader)!;
  await until('good ready on the standby', 120_000, async () => (await models(standby)).good?.phase === 'ready', { diag });
});

after(async () => {
  for (const p of procs) if (p.alive()) p.child.kill('SIGCONT');
  await Promise.all(procs.map((p) => p.sigkill()));
  client?.close();
  await fleet?.cleanup();
  await etcd?.stop();
});

describe('a standby and the leader hold etcd to what the spec allows; activations through a standby answer within the window', () => {
  it('a snapshot in etcd pointing a model at a listener outside every node\'s ports: a chat through the standby is served by the real replica, the listener receives nothing', async () => {
    let connections = 0;
    const listener: Server = createServer((s) => {
      connections++;
      s.destroy();
    });
    const port = await freePort();
    assert.ok(portRanges(fleet.baseFiles()).every((r) => port < r.from || port > r.to), `port ${port} is inside a node's range`);
    await new Promise<void>((r) => listener.listen(port, '127.0.0.1', () => r()));
    // the published snapshot is one key per model (and a head written last in each save: a standby applies a save when its head arrives)
    const key = `${PREFIX}/published/models/good`;
    const headKey = `${PREFIX}/published/head`;
    const rewrite = async (value: string): Promise<void> => {
      await client.put(key).value(value);
      await client.put(headKey).value((await client.get(headKey).string())!);
    };
    // the leader publishes on every change: forge only once its snapshot has settled (3 s unchanged)
    let seen = { value: '', since: 0 };
    const original = await until('the published snapshot settled', 60_000, async () => {
      const v = (await client.get(key).string()) ?? '';
      if (v !== seen.value) seen = { value: v, since: Date.now() };
      return v !== '' && Date.now() - seen.since >= 3_000 ? v : null;
    }, { diag });
    try {
      const good = JSON.parse(original) as { name: string; replicas: ReplicaJson[] };
      const real = good.replicas.find((r) => r.phase === 'ready')!;
      // the real replica moved to the listener (same host, outside the ports), and one more on a node the spec lacks
      good.replicas = [{ ...real, endpoint: `http://127.0.0.1:${port}` }, { ...real, id: `${real.id}x`, node: 'node-9', endpoint: `http://127.0.0.1:${port}` }];
      const forged = JSON.stringify(good);
      await rewrite(forged);
      await until('the standby refusing both forged endpoints', 10_000, () => logLines(standby.out()).filter((l) => l.code === 'ETCD_ENDPOINT_REFUSED' && l.endpoint === `http://127.0.0.1:${port}`).length >= 2, { diag });
      const refused = logLines(standby.out()).filter((l) => l.code === 'ETCD_ENDPOINT_REFUSED');
      assert.ok(refused.some((l) => /outside node node-1's ports|outside node node-2's ports/.test(String(l.why))), JSON.stringify(refused));
      assert.ok(refused.some((l) => /node-9/.test(String(l.why))), JSON.stringify(refused));
      for (let i = 0; i < 3; i++) {
        const r = await chat(standby, 'good');
        assert.equal(r.status, 200, `${JSON.stringify(r)}\n${diag()}`);
      }
      assert.equal(await client.get(key).string(), forged, 'the leader republished meanwhile: the chats did not test the forged snapshot');
      assert.equal(connections, 0, 'the listener named by the forged snapshot was reached');
    } finally {
      await rewrite(original);
      await new Promise<void>((r) => listener.close(() => r()));
    }
  });

  it('a forged restart-all written straight under requests/: refused with a reason in the leader\'s log, no replica replaced', async () => {
    const before = await models(leader);
    const goodIds = before.good!.replicas.map((r) => r.id).sort();
    const procsBefore = fleet.nodes.flatMap((n) => replicaProcesses(n.dataDir)).sort();
    const standbyId = (await standby.admin<HaStatusJson>('/status')).control.instance.id;
    const lease = client.lease(60, { autoKeepAlive: false });
    const leaseId = await lease.grant();
    const forge = async (msg: Record<string, unknown>, attach: boolean): Promise<string> => {
      const id = randomUUID();
      const put = client.put(`${PREFIX}/requests/${id}`).value(JSON.stringify({ id, kind: 'restart', body: { all: true }, from: standbyId, ...msg }));
      await (attach ? put.lease(leaseId).exec() : put.exec());
      return id;
    };
    const forgedAt = Date.now();
    // as `etcdctl put` writes it: naming a lease, attached to none; and attached to a lease it does not name
    const ids = [await forge({ lease: leaseId }, false), await forge({ lease: '7587891234' }, true)];
    const refusals = await until('both refusals in the leader\'s log', 15_000, () => {
      const r = logLines(leader.out()).filter((l) => l.code === 'FORWARDED_REQUEST_REFUSED' && ids.some((id) => String(l.key).endsWith(id)));
      return r.length === 2 ? r : null;
    }, { diag });
    for (const r of refusals) assert.match(String(r.why), /not attached to the sender's lease/);
    await lease.revoke();
    assert.equal(await client.getAll().prefix(`${PREFIX}/requests/`).count(), 0, 'a refused request was left in etcd');
    // a whole pass after the refusals: a restart would have started replacements by its end
    await leader.admin('/models/good/retry', { method: 'POST' });
    await until('a pass begun after the forgery and finished', 30_000, async () => {
      const s = await leader.admin<HaStatusJson>('/status');
      return s.lastPass !== null && Date.parse(s.lastPass.startedAt) > forgedAt;
    }, { diag });
    const afterModels = await models(leader);
    assert.deepEqual(afterModels.good!.replicas.map((r) => r.id).sort(), goodIds, 'a replica was replaced');
    assert.ok(afterModels.good!.replicas.every((r) => r.phase === 'ready'));
    assert.deepEqual(fleet.nodes.flatMap((n) => replicaProcesses(n.dataDir)).sort(), procsBefore);
  });

  it('the leader SIGSTOPped: an on-demand activation through the standby answers 503 leader_unavailable with Retry-After within the window', async () => {
    assert.equal((await models(standby)).od?.replicas.length ?? 0, 0, 'od runs already');
    leader.child.kill('SIGSTOP');
    try {
      const r = await chat(standby, 'od');
      assert.equal(r.status, 503, JSON.stringify(r));
      assert.equal(r.reason, 'LEADER_UNAVAILABLE');
      assert.equal(r.code, 'leader_unavailable');
      assert.equal(r.retryAfter, '5');
      assert.ok(r.ms < WINDOW_MS && r.ms > WINDOW_MS / 2, `answered after ${r.ms} ms (window ${WINDOW_MS} ms)`);
    } finally {
      leader.child.kill('SIGCONT');
    }
  });

  it('the leader SIGKILLed (its lease still held): likewise 503 leader_unavailable within the window', async () => {
    await leader.sigkill();
    const r = await chat(standby, 'od');
    assert.equal(r.status, 503, JSON.stringify(r));
    assert.equal(r.reason, 'LEADER_UNAVAILABLE');
    assert.equal(r.retryAfter, '5');
    assert.ok(r.ms < WINDOW_MS, `answered after ${r.ms} ms (window ${WINDOW_MS} ms)`);
    assert.equal((await standby.admin<HaStatusJson>('/status')).leader, false, 'the standby took over before the test could see no leader');
  });

  it('etcd down: the activation answers 503 etcd_unavailable with Retry-After within the window; a ready model is still served', async () => {
    etcd.kill();
    const r = await chat(standby, 'od');
    assert.equal(r.status, 503, JSON.stringify(r));
    assert.equal(r.reason, 'ETCD_UNAVAILABLE');
    assert.equal(r.code, 'etcd_unavailable');
    assert.equal(r.retryAfter, '5');
    assert.ok(r.ms < WINDOW_MS, `answered after ${r.ms} ms (window ${WINDOW_MS} ms)`);
    assert.equal((await chat(standby, 'good')).status, 200);
  });
});
