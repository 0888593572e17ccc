/**
 * The etcd layer against a real etcd (Debian's etcd-server, started on loopback like the tests):
 * 1. the state record at 1,000 models: etcd writes per save when nothing changed (goal: zero; read
 *    off etcd's revision), the time such a save costs against JSON.stringify of the same record
 *    (the baseline), and a changed save (a guarded txn) against a plain put of the same value;
 * 2. failover with the test timings (lease 3 s, renew deadline 2 s, retry 500 ms): leader stops
 *    (resigns) → a standby elected, and leader vanishes (its gRPC client closed: no renewal, no
 *    resign, what etcd sees of a SIGKILL) → a standby elected, as a ratio to the lease TTL.
 * Prints figures; not a test.
 *
 *   npm run bench:etcd   [models=1000] [rounds=5]
 */
import { performance } from 'node:perf_hooks';
import pino from 'pino';
import { Election } from '../src/ha/election.js';
import { openEtcd } from '../src/ha/etcd.js';
import { EtcdStateStore } from '../src/ha/etcd-state.js';
import { initialHealth } from '../src/reconciler/health.js';
import { emptyState, type ControllerState, type ModelRecord, type ReplicaRecord } from '../src/reconciler/state.js';
import { startEtcd } from '../test/harness/etcd.js';

const modelCount = Number(process.argv[2] ?? 1000);
const rounds = Number(process.argv[3] ?? 5);
const FAST = { leaseTtlSeconds: 3, renewDeadlineMs: 2_000, retryPeriodMs: 500 };
const silent = pino({ level: 'silent' });

function fleetState(n: number, tick: number): ControllerState {
  const at = (i: number): number => 1_700_000_000_000 + i;
  const models: Record<string, ModelRecord> = Object.fromEntries(Array.from({ length: n }, (_, i) => [`m-${i}`, { health: initialHealth(`digest-${i}`), ...(i % 4 === 0 ? { demand: at(i / 4) } : {}) }]));
  const replicas: Record<string, ReplicaRecord> = Object.fromEntries(
    Array.from({ length: n }, (_, i) => [`m-${i}-r0`, { model: `m-${i}`, node: `node-${i % 100}`, digest: `digest-${i}`, startedAt: at(i), phase: { kind: 'ready', since: at(i), seen: true } }]),
  );
  return { ...emptyState, appliedRevision: `rev-${tick}`, models, replicas, handledRetries: Array.from({ length: 200 }, (_, i) => `commit:${i.toString(16).padStart(12, '0')}`) };
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function main(): Promise<void> {
  const etcd = await startEtcd();
  const prefix = '/llmgw-bench/fleet';
  const settings = { hosts: [etcd.endpoint], prefix, tls: null, auth: null, ...FAST };
  const client = openEtcd(settings, Date.now);
  try {
    // --- 1. the state record ---
    const leader = new Election(client, { prefix, id: 'bench', label: 'bench', ...FAST, logger: silent });
    leader.start();
    await new Promise<void>((r) => leader.once('elected', () => r()));
    const store = new EtcdStateStore(leader, client, prefix);
    const s = fleetState(modelCount, 0);
    const bytes = JSON.stringify(s).length;
    await store.save(s);
    const rev0 = Number((await client.get('/x').exec()).header.revision);
    const saves = 200;
    let t = performance.now();
    // (each save yields to the event loop, as passes do: a loop blocked past the renew deadline deposes the leader)
    const tick = (): Promise<void> => new Promise((r) => setImmediate(r));
    for (let i = 0; i < saves; i++) {
      await store.save(fleetState(modelCount, 0));
      await tick();
    }
    const unchangedMs = (performance.now() - t) / saves;
    const rev1 = Number((await client.get('/x').exec()).header.revision);
    t = performance.now();
    for (let i = 0; i < saves; i++) {
      JSON.stringify(fleetState(modelCount, 0));
      await tick();
    }
    const baselineMs = (performance.now() - t) / saves;
    const guarded: number[] = [];
    const plain: number[] = [];
    for (let i = 1; i <= 20; i++) {
      const next = fleetState(modelCount, i);
      let t0 = performance.now();
      await store.save(next);
      guarded.push(performance.now() - t0);
      t0 = performance.now();
      await client.put(`${prefix}/plain`).value(JSON.stringify(next));
      plain.push(performance.now() - t0);
    }
    console.log(`state record, ${modelCount} models (${(bytes / 1024).toFixed(0)} KiB):`);
    console.log(`  unchanged saves: ${rev1 - rev0} etcd writes in ${saves} saves (goal 0); ${unchangedMs.toFixed(2)} ms per save vs ${baselineMs.toFixed(2)} ms for JSON.stringify alone (ratio ${(unchangedMs / baselineMs).toFixed(2)})`);
    console.log(`  changed save: guarded txn median ${median(guarded).toFixed(1)} ms vs plain put ${median(plain).toFixed(1)} ms (ratio ${(median(guarded) / median(plain)).toFixed(2)})`);
    await leader.stop();

    // --- 2. failover ---
    for (const how of ['stop', 'vanish'] as const) {
      const times: number[] = [];
      for (let r = 0; r < rounds; r++) {
        const p = `${prefix}/failover-${how}-${r}`;
        const clients = [openEtcd({ ...settings, prefix: p }, Date.now), openEtcd({ ...settings, prefix: p }, Date.now)];
        const es = clients.map((c, i) => new Election(c, { prefix: p, id: `i${i}`, label: `i${i}`, ...FAST, logger: silent }));
        es[0]!.start();
        await new Promise<void>((res) => es[0]!.once('elected', () => res()));
        es[1]!.start();
        await new Promise<void>((res) => {
          const check = (): void => (es[1]!.current()?.id === 'i0' ? res() : void setTimeout(check, 10));
          check();
        });
        const took = new Promise<number>((res) => es[1]!.once('elected', () => res(performance.now())));
        const t0 = performance.now();
        if (how === 'stop') await es[0]!.stop();
        else clients[0]!.close();
        times.push((await took) - t0);
        await es[1]!.stop();
        if (how === 'stop') clients[0]!.close();
        else await es[0]!.stop().catch(() => undefined);
        clients[1]!.close();
      }
      const m = median(times);
      console.log(`failover (${how === 'stop' ? 'leader resigns' : 'leader vanishes, lease expires'}): median ${m.toFixed(0)} ms over ${rounds} rounds (min ${Math.min(...times).toFixed(0)}, max ${Math.max(...times).toFixed(0)}); ratio to the ${FAST.leaseTtlSeconds} s lease ${(m / (FAST.leaseTtlSeconds * 1000)).toFixed(2)}`);
    }
  } finally {
    client.close();
    await etcd.stop();
  }
}

await main();
