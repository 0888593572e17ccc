/**
 * A drain waits for the routers, not a fixed second (#37 item 7, N13): real etcd, two `llmgw serve`
 * processes — the leader on etcd directly, a standby whose etcd link holds every byte from etcd for
 * 3 s (test/harness/tcp-forwarder.ts delayDown: its published-snapshot watch lags 3 s) — two sshd
 * nodes running real llama-server, and the official `openai` client (maxRetries 0) pointed at the
 * standby's router.
 *
 * The model's only replica is restarted (surge, then the drain) under streams through the standby,
 * with gaps between each worker's requests: in a gap the replica's /slots reads 0 while the lagging
 * standby still offers it, which is when a drain that waited a fixed second stopped it under the
 * standby's next request. Expected: 0 streams cut or failed; the standby is seen offering the old
 * replica well after the leader took it out of routing, and the leader stops it only after that
 * (its drain line counts the one other router it waited for), never on DRAIN_ROUTERS_BEHIND.
 */
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { writeTinyModel, type TinyModelFile } from '../fixtures/gguf.js';
import { modelYaml, startTestFleet, type TestFleet } from '../harness/controller.js';
import { startEtcd, type EtcdInstance } from '../harness/etcd.js';
import { replicaProcesses } from '../harness/replica-procs.js';
import { agreedLeader, logLines, procsDiag, spawnServe, type ServeProc } from '../harness/serve-proc.js';
import { streamLoad } from '../harness/stream-load.js';
import { startTcpForwarder, type TcpForwarder } from '../harness/tcp-forwarder.js';
import { until } from '../harness/wait.js';

/** How long every byte from etcd to the standby is held. */
const LAG_MS = 3000;

interface ReplicaJson {
  id: string;
  model: string;
  phase: string;
}

let etcd: EtcdInstance;
let fwd: TcpForwarder;
let fleet: TestFleet;
let chat: TinyModelFile;
let leader: ServeProc;
let standby: ServeProc;
const procs: ServeProc[] = [];
const diag = (): string => procsDiag(procs, 4000);
const processes = (): string[] => fleet.nodes.flatMap((n) => replicaProcesses(n.dataDir));

function files(): Record<string, string | null> {
  const f: Record<string, string | null> = fleet.baseFiles();
  delete f['models/kev.yaml'];
  delete f['models/huge.yaml'];
  delete f['models/good.yaml'];
  f['fleet.yaml'] = ['poll_interval: 1h', 'placement_reserve: 256MiB', 'stop_grace: 10s', 'drain_grace: 90s', ''].join('\n');
  f['profiles/stream.yaml'] = ['engine: llama-cpp@test', 'ctx_size: 8192', 'threads: 1', 'parallel: 4', 'memory_overhead: 64MiB', 'cache_ram: 16MiB', 'start_timeout: 60s', ''].join('\n');
  f['models/chat.yaml'] = modelYaml(chat, ['replicas: 1']).replace('profile: tiny', 'profile: stream');
  return f;
}

async function replicas(p: ServeProc): Promise<ReplicaJson[]> {
  return (await p.admin<{ replicas: ReplicaJson[] }>('/replicas')).replicas.filter((r) => r.model === 'chat');
}

/** The one ready chat replica `p` routes to, when it lists exactly that. */
async function onlyReady(p: ServeProc, not?: string): Promise<string | null> {
  const r = await replicas(p);
  return r.length === 1 && r[0]!.phase === 'ready' && r[0]!.id !== not ? r[0]!.id : null;
}

before(async () => {
  [etcd, fleet] = await Promise.all([startEtcd(), startTestFleet({ nodes: 2 })]);
  chat = await writeTinyModel(join(fleet.stateDir, '..', 'models', 'chat.gguf'), { seed: 11, embeddingLength: 512, layers: 8, tensorType: 'f16', contextLength: 8192 });
  await fleet.push(files(), 'chat: one replica');
  leader = await spawnServe({ name: 'a', fleet, args: ['--etcd', etcd.endpoint] });
  procs.push(leader);
  await until('a leading', 60_000, async () => (await agreedLeader([leader]))?.proc === leader, { diag });
  await until('the chat replica ready', 180_000, () => onlyReady(leader), { diag });
  fwd = await startTcpForwarder(Number(new URL(etcd.endpoint).port));
  standby = await spawnServe({ name: 'b', fleet, args: ['--etcd', `http://127.0.0.1:${fwd.port}`] });
  procs.push(standby);
  await until('the standby routing the replica', 180_000, () => onlyReady(standby), { diag });
  // from now on its etcd link lags (its connection is open: etcd's answers and watch events come 3 s late)
  fwd.delayDown(LAG_MS);
});

after(async () => {
  await Promise.all(procs.map((p) => p.sigkill()));
  await fwd?.close();
  await fleet?.cleanup();
  await etcd?.stop();
});

describe('a drain waits for a standby whose etcd watch lags 3 s', { timeout: 10 * 60_000 }, () => {
  it('its only replica restarted under streams through the standby: 0 cut, 0 failed, stopped only once the standby routed without it', async (t) => {
    const old = (await onlyReady(leader))!;
    // both views every 100 ms (wall clock, as the log lines' times): when the leader first had the old
    // replica out of routing, and when the standby last offered it
    let leaderOut: number | null = null;
    let standbyLastReady = 0;
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        const [l, s] = await Promise.all([replicas(leader).catch(() => null), replicas(standby).catch(() => null)]);
        const now = Date.now();
        if (l && leaderOut === null && l.some((r) => r.id === old && r.phase !== 'ready')) leaderOut = now;
        if (s?.some((r) => r.id === old && r.phase === 'ready')) standbyLastReady = now;
        await new Promise((r) => setTimeout(r, 100)); // deliberate: the sampler's period (both views every 100 ms: when each changed is what is measured, no condition to wait on)
      }
    })();
    const client = new OpenAI({ baseURL: `http://127.0.0.1:${standby.routerPort}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
    const load = streamLoad(client, 'chat', 2, { maxTokens: 24, pauseMs: 300 });
    await until('streams through the standby', 60_000, () => load.tally.ok >= 4, { diag });

    const r = await fetch(`http://127.0.0.1:${leader.adminPort}/admin/v1/restart`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ replicas: [old] }) });
    assert.ok(r.status === 200 || r.status === 202, `restart: ${r.status} ${await r.text()}`);
    const replacement = await until('the old replica stopped and the standby routing the replacement', 240_000, async () => (processes().includes(old) ? null : onlyReady(standby, old)), { diag });
    const okThen = load.tally.ok;
    await until('streams through the standby on the replacement', 60_000, () => load.tally.ok >= okThen + 4, { diag });
    const tally = await load.stop();
    watching = false;
    await watcher;

    const lines = logLines(leader.out());
    const drained = lines.filter((l) => l.msg === 'replica drained: stopping it' && l.replica === old);
    const time = drained[0]?.time;
    const stoppedAt = typeof time === 'string' ? Date.parse(time) : (time as number | undefined);
    t.diagnostic(`sent ${tally.sent}, ok ${tally.ok}, cut ${tally.cut}, failed ${tally.failed}; replacement ${replacement}; leader had ${old} out at ${String(leaderOut)}, the standby offered it until ${standbyLastReady} (${leaderOut === null ? '?' : standbyLastReady - leaderOut} ms later); drained after ${String(drained[0]?.drainedMs)} ms, stopped at ${String(stoppedAt)} with ${String(drained[0]?.routers)} other router(s)`);

    assert.deepEqual(tally.errors, [], `streams through the standby cut or failed:\n${diag()}`);
    assert.equal(tally.cut + tally.failed, 0);
    assert.equal(drained.length, 1, `the leader drained ${old} once:\n${diag()}`);
    assert.equal(drained[0]!.routers, 1, 'the drain waited for the one other router');
    assert.ok(leaderOut !== null, 'the leader showed the old replica out of routing');
    // the lag is real: the standby still offered the replica more than the old fixed settle (1 s) after the leader took it out
    assert.ok(standbyLastReady - leaderOut >= 1000, `the standby offered ${old} only ${standbyLastReady - leaderOut} ms after the leader took it out: its link is not lagging`);
    // and the leader stopped it only after the standby no longer offered it
    assert.ok(typeof stoppedAt === 'number' && stoppedAt > standbyLastReady, `the leader stopped ${old} at ${String(stoppedAt)}, while the standby offered it until ${standbyLastReady}`);
    assert.deepEqual(lines.filter((l) => l.code === 'DRAIN_ROUTERS_BEHIND' || String(l.msg).startsWith('drain grace over')), [], 'no drain ran out of its grace');
  });
});
