/**
 * HA on etcd, two figures (issue #16's bench):
 *
 * 1. etcd writes per reconcile pass at 1,000 models with nothing changing (goal: zero). A real etcd,
 *    an HaController with the real Election, EtcdStateStore, Published and Requests, and a
 *    Reconciler per term over fake nodes (test/harness/fake-node.ts) holding 1,000 models' replicas.
 *    Once the fleet is settled, passes are asked for one at a time and etcd's revision is read
 *    before and after each (every put and successful txn bumps it; lease keepalives do not). The
 *    baseline, in the same run: a pass after one replica died on its node, which must write.
 * 2. Failover time: three real `llmgw serve` on a real etcd over a one-node sshd fleet running a
 *    real llama-server, SIGKILL of the leader, time until a survivor leads with a higher epoch and
 *    has completed a pass that started after the kill — with the default lease settings and with
 *    the short ones the tests use, three times each, against the lease TTL (the expected bound:
 *    lease + one pass).
 *
 *   npm run bench:ha
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Etcd3, IKeyValue } from 'etcd3';
import pino from 'pino';
import { dirFiles } from '../src/fleet-spec/dir-files.js';
import { loadFleetSpec } from '../src/fleet-spec/load.js';
import type { FleetSpec } from '../src/fleet-spec/types.js';
import { Requests } from '../src/ha/channel.js';
import { Published } from '../src/ha/published-channel.js';
import type { PublishedSnapshot } from '../src/ha/published.js';
import { HaController } from '../src/ha/controller.js';
import { Election } from '../src/ha/election.js';
import { ETCD_DEFAULTS, openEtcd } from '../src/ha/etcd.js';
import { EtcdStateStore } from '../src/ha/etcd-state.js';
import { Reconciler } from '../src/reconciler/reconciler.js';
import { modelYaml, startTestFleet } from '../test/harness/controller.js';
import { startEtcd, type EtcdInstance } from '../test/harness/etcd.js';
import { FakeClock, FakeFleetLog, FakeNode } from '../test/harness/fake-node.js';
import { writeFleet } from '../test/harness/fleet.js';
import { FixedSpec } from '../test/harness/fixed-spec.js';
import { realTime } from '../test/harness/real-time.js';
import { spawnServe, type ServeProc } from '../test/harness/serve-proc.js';

const MODELS = Number(process.env.BENCH_HA_MODELS ?? 1000);
const NODES = 10;
const STEADY_PASSES = 20;
const RUNS = 3;
const SHA = 'a'.repeat(64);
const silent = pino({ level: process.env.BENCH_HA_LOG ?? 'silent' });

const median = (xs: readonly number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const s1 = (ms: number): string => `${(ms / 1000).toFixed(2)} s`;

// ------------------------------------------------------------------ 1. writes per pass

async function fleetSpec(): Promise<FleetSpec> {
  const files: Record<string, string> = {
    'fleet.yaml': 'poll_interval: 1h\nplacement_reserve: 1GiB\npark_after_failures: 5\n',
    'engines/llama-cpp.yaml': 'versions:\n  b1:\n    path: /opt/llama/b1/llama-server\n',
    'profiles/chat.yaml': 'engine: llama-cpp@b1\nctx_size: 2048\n',
  };
  for (let i = 0; i < NODES; i++) {
    const n = String(i).padStart(2, '0');
    files[`nodes/node-${n}.yaml`] = [`host: 10.0.0.${i + 1}`, 'host_key: ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBvVj2GfUu1xJ1u3u9QmTq2l1nq8mQnJ6zq3l9nG7Y0a', 'identity: fleet-key', 'capacity: { memory: 64GiB }', 'ports: { from: 20000, to: 20999 }', ''].join('\n');
  }
  for (let i = 0; i < MODELS; i++) {
    files[`models/m-${String(i).padStart(4, '0')}.yaml`] = [`source: hf://org/m-${i}/m.gguf`, `sha256: ${SHA}`, 'profile: chat', 'replicas: 1', 'memory: 256MiB', ''].join('\n');
  }
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-ha-bench-fleet-'));
  try {
    writeFleet(dir, files);
    const r = await loadFleetSpec(dirFiles(dir), 'rev1');
    if (!r.ok) throw new Error(`the bench fleet did not load: ${JSON.stringify(r.problems).slice(0, 500)}`);
    return r.spec;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Published that lets the bench wait for the snapshot writes the controller starts without awaiting. */
class TrackedPublished extends Published {
  private pending = new Set<Promise<void>>();
  override publish(snapshot: PublishedSnapshot): Promise<void> {
    const p = super.publish(snapshot);
    this.pending.add(p);
    void p.catch(() => undefined).finally(() => this.pending.delete(p));
    return p;
  }
  async settled(): Promise<void> {
    while (this.pending.size > 0) await Promise.allSettled([...this.pending]);
  }
}

async function revision(client: Etcd3): Promise<number> {
  const r = await client.get('/llmgw-ha-bench/probe').exec();
  return Number(r.header.revision);
}

async function writesPerPass(etcd: EtcdInstance): Promise<void> {
  const spec = await fleetSpec();
  const prefix = '/llmgw-ha-bench';
  const settings = { hosts: [etcd.endpoint], prefix, tls: null, auth: null, ...ETCD_DEFAULTS };
  const client = openEtcd(settings, Date.now);
  const election = new Election(client, { prefix, id: 'bench-a', label: 'bench instance a', ...ETCD_DEFAULTS, logger: silent });
  const stateStore = new EtcdStateStore(election, client, prefix);
  const published = new TrackedPublished(election, client, prefix);
  const clock = new FakeClock();
  const fleetLog = new FakeFleetLog();
  const nodes = new Map(Object.keys(spec.nodes).map((n) => [n, new FakeNode(n, clock, fleetLog, new Set(), 1)]));
  const tracker = new FixedSpec(spec);
  let epoch = 0;
  const ha = new HaController({
    election,
    published,
    requests: new Requests(client, prefix, 'bench-a', realTime),
    time: realTime,
    stateStore,
    prefix,
    instance: { id: 'bench-a', label: 'bench instance a' },
    tracker,
    engineApiKey: 'bench-engine-key',
    logger: silent,
    makeReconciler: (t) => {
      epoch = t.epoch;
      return new Reconciler({
        tracker,
        status: null,
        driverFor: (n) => nodes.get(n.name)!,
        stateStore,
        initialState: t.initialState,
        initialStateProblem: t.initialStateProblem,
        engineApiKey: 'bench-engine-key',
        logger: silent,
        leader: t.leader,
        control: t.control,
        epoch: () => t.epoch,
        onDeposed: t.onDeposed,
      });
    },
  });

  // which keys each pass wrote (a watch on the prefix), to say what a non-zero count is made of
  const keysWritten: { key: string; rev: number }[] = [];
  const watcher = await client.watch().prefix(prefix).create();
  watcher.on('put', (kv: IKeyValue) => keysWritten.push({ key: kv.key.toString('utf8').slice(prefix.length), rev: Number(kv.mod_revision) }));
  watcher.on('delete', (kv: IKeyValue) => keysWritten.push({ key: `${kv.key.toString('utf8').slice(prefix.length)} (delete)`, rev: Number(kv.mod_revision) }));

  const t0 = performance.now();
  await ha.start();
  for (;;) {
    if (ha.reconciler() && ha.snapshot().leader) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  const ready = (): number => ha.snapshot().models.filter((m) => m.phase === 'ready').length;
  let settlingPasses = 0;
  for (; settlingPasses < 200; settlingPasses++) {
    await ha.requestPass('bench: settle');
    await published.settled();
    if (ready() === MODELS && ha.snapshot().lastPass?.actions === 0) break;
  }
  if (ready() !== MODELS) throw new Error(`only ${ready()} of ${MODELS} models ready after ${settlingPasses} passes`);
  // two more passes, so whatever the last start's outcome changed has been written
  for (let i = 0; i < 2; i++) {
    await ha.requestPass('bench: settle');
    await published.settled();
  }
  const settleMs = performance.now() - t0;
  const bytesUnder = async (base: string): Promise<number> => Object.values(await client.getAll().prefix(`${base}/`).strings()).reduce((n, v) => n + v.length, 0);
  const stateBytes = await bytesUnder(`${prefix}/state`);
  const snapshotBytes = await bytesUnder(`${prefix}/published`);

  const measure = async (trigger: string): Promise<{ writes: number; keys: string[]; ms: number }> => {
    const before = await revision(client);
    const p0 = performance.now();
    await ha.requestPass(trigger);
    const ms = performance.now() - p0;
    await published.settled();
    const after = await revision(client);
    // the keys written in (before, after]: the watch may trail the revision, so wait until it has seen `after`
    for (let i = 0; i < 200 && after > before && !keysWritten.some((k) => k.rev >= after); i++) await new Promise((r) => setTimeout(r, 10));
    return { writes: after - before, keys: keysWritten.filter((k) => k.rev > before && k.rev <= after).map((k) => k.key), ms };
  };

  const steady: { writes: number; keys: string[]; ms: number }[] = [];
  for (let i = 0; i < STEADY_PASSES; i++) steady.push(await measure('bench: nothing changed'));
  // baseline: one model changes (its replica died on the node), so the pass must write
  const victim = [...nodes.values()].find((n) => n.replicas.size > 0)!;
  const [victimId, victimReplica] = [...victim.replicas.entries()][0]!;
  victim.replicas.delete(victimId);
  const changed = await measure(`bench: ${victimReplica.model}'s replica died`);
  const recovered: { writes: number; keys: string[]; ms: number }[] = [];
  for (let i = 0; i < 3; i++) recovered.push(await measure('bench: after the change'));
  const steadyAgain: { writes: number; keys: string[]; ms: number }[] = [];
  for (let i = 0; i < 5; i++) steadyAgain.push(await measure('bench: nothing changed again'));

  const total = (xs: readonly { writes: number }[]): number => xs.reduce((n, x) => n + x.writes, 0);
  const keyList = (xs: readonly { keys: string[] }[]): string => {
    const c = new Map<string, number>();
    for (const x of xs) for (const k of x.keys) c.set(k, (c.get(k) ?? 0) + 1);
    return c.size === 0 ? 'none' : [...c.entries()].map(([k, n]) => `${k} ×${n}`).join(', ');
  };
  console.log(`\n1. etcd writes per pass, ${MODELS} models (${fleetLog.starts.length} replicas started on ${NODES} fake nodes), epoch ${epoch}`);
  console.log(`   settled in ${settlingPasses + 3} passes, ${s1(settleMs)}; state record ${(stateBytes / 1024).toFixed(0)} KiB, published snapshot ${(snapshotBytes / 1024).toFixed(0)} KiB in etcd`);
  console.log(`   nothing changing:            ${total(steady)} writes in ${STEADY_PASSES} passes = ${(total(steady) / STEADY_PASSES).toFixed(2)} per pass (goal: 0); keys: ${keyList(steady)}; median pass ${median(steady.map((x) => x.ms)).toFixed(0)} ms`);
  console.log(`   baseline, one model changed: ${changed.writes} writes in 1 pass (must be ≥ 1); keys: ${keyList([changed])}; pass ${changed.ms.toFixed(0)} ms`);
  console.log(`   the 3 passes after it:       ${recovered.map((x) => x.writes).join(', ')} writes (the replacement's outcome, ready, may land during a later pass); keys: ${keyList(recovered)}`);
  console.log(`   nothing changing again:      ${total(steadyAgain)} writes in ${steadyAgain.length} passes; keys: ${keyList(steadyAgain)}`);
  console.log(`   counters: EtcdStateStore.writes ${stateStore.writes}, Published.writes ${published.writes} over the whole run`);

  await watcher.cancel();
  await ha.stop();
  client.close();
}

// ------------------------------------------------------------------ 2. failover time

interface StatusJson {
  leader: boolean;
  control: { instance: { id: string }; leader: { id: string; epoch: number | null; since: string | number | null } | null };
  lastPass: { startedAt: string; durationMs: number } | null;
}

async function status(p: ServeProc): Promise<StatusJson | null> {
  return p.admin<StatusJson>('/status').catch(() => null);
}

/** The instance all of `live` agree leads (and says so), optionally with an epoch above and a pass started after a time. */
async function agreedLeader(live: readonly ServeProc[], after?: { epochAbove: number; passAfter: number }): Promise<{ proc: ServeProc; st: StatusJson; epoch: number } | null> {
  const statuses = await Promise.all(live.map(status));
  if (statuses.some((s) => s === null)) return null;
  const leading = statuses.map((s, i) => ({ s: s!, p: live[i]! })).filter((x) => x.s.leader);
  if (leading.length !== 1) return null;
  const { s, p } = leading[0]!;
  if (!statuses.every((o) => o!.control.leader?.id === s.control.instance.id)) return null;
  const epoch = s.control.leader?.epoch ?? 0;
  if (after && (epoch <= after.epochAbove || !s.lastPass || Date.parse(s.lastPass.startedAt) < after.passAfter)) return null;
  return { proc: p, st: s, epoch };
}

async function poll<T>(what: string, timeoutMs: number, everyMs: number, fn: () => Promise<T | null>, diag: () => string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn().catch(() => null);
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}\n${diag()}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

interface FailoverRun {
  readonly totalMs: number;
  readonly electedMs: number;
  readonly passMs: number;
}

async function failovers(label: string, leaseS: number, args: readonly string[], fleet: Awaited<ReturnType<typeof startTestFleet>>, names: readonly string[]): Promise<FailoverRun[]> {
  const procs = await Promise.all(names.map((name) => spawnServe({ name, fleet, args })));
  const diag = (): string => procs.map((p) => `--- ${p.name} (${p.alive() ? 'running' : 'exited'}) ---\n${p.out().slice(-2000)}`).join('\n');
  const runs: FailoverRun[] = [];
  try {
    let leader = await poll('one agreed leader', 120_000, 200, () => agreedLeader(procs), diag);
    await poll('good ready on the leader', 120_000, 200, async () => {
      const r = await leader.proc.admin<{ models: { name: string; phase: string }[] }>('/models');
      return r.models.find((m) => m.name === 'good')?.phase === 'ready' ? true : null;
    }, diag);
    for (let run = 1; run <= RUNS; run++) {
      const survivors = procs.filter((p) => p !== leader.proc);
      const killedAt = Date.now();
      await leader.proc.sigkill();
      const next = await poll('a new leader with a pass after the kill', (leaseS + 60) * 1000, 25, () => agreedLeader(survivors, { epochAbove: leader.epoch, passAfter: killedAt }), diag);
      const detectedMs = Date.now() - killedAt;
      const sinceRaw = next.st.control.leader?.since ?? null;
      const since = typeof sinceRaw === 'string' ? Date.parse(sinceRaw) : (sinceRaw ?? killedAt);
      const pass = next.st.lastPass!;
      // the new leader's own clock (same machine): elected at `since`, its pass ended at startedAt + durationMs
      const passEnd = Date.parse(pass.startedAt) + pass.durationMs;
      const r = { totalMs: Math.min(detectedMs, passEnd - killedAt), electedMs: since - killedAt, passMs: passEnd - since };
      runs.push(r);
      console.log(`   ${label} run ${run}: ${s1(r.totalMs)} from SIGKILL to the first completed pass (elected after ${s1(r.electedMs)}, then ${r.passMs} ms to the pass's end; seen by polling after ${s1(detectedMs)}); epoch ${leader.epoch} → ${next.epoch}`);
      // bring the killed instance back as a standby, so every run starts from three
      const killed = leader.proc;
      killed.restart();
      leader = next;
      await poll('the restarted instance agreeing on the leader', 120_000, 200, async () => {
        const a = await agreedLeader(procs);
        return a && a.proc === next.proc ? a : null;
      }, diag);
      leader = (await agreedLeader(procs)) ?? leader;
    }
  } finally {
    await Promise.all(procs.map((p) => p.stop()));
  }
  return runs;
}

async function failoverTime(etcd: EtcdInstance): Promise<void> {
  const fleet = await startTestFleet({ nodes: 1 });
  try {
    const files = fleet.baseFiles();
    delete files['models/huge.yaml'];
    delete files['models/kev.yaml'];
    files['models/good.yaml'] = modelYaml(fleet.models.good, ['replicas: 1']);
    await fleet.push(files, 'fleet: one always-on model');
    const summary: string[] = [];
    console.log('\n2. failover time: SIGKILL of the leader of three `llmgw serve` → a survivor leads (higher epoch) and has completed a pass started after the kill');
    const settings = [
      { label: 'default lease (15 s TTL, 10 s renew deadline, 2 s retry)', leaseS: ETCD_DEFAULTS.leaseTtlSeconds, retryS: ETCD_DEFAULTS.retryPeriodMs / 1000, args: ['--etcd', etcd.endpoint], names: ['a', 'b', 'c'] },
      { label: 'short lease (4 s TTL, 3 s renew deadline, 1 s retry)', leaseS: 4, retryS: 1, args: ['--etcd', etcd.endpoint, '--lease-ttl', '4s', '--renew-deadline', '3s', '--retry-period', '1s'], names: ['d', 'e', 'f'] },
    ];
    for (const s of settings) {
      console.log(`   ${s.label}:`);
      const runs = await failovers(s.label.split(' (')[0]!, s.leaseS, s.args, fleet, s.names);
      const med = median(runs.map((r) => r.totalMs));
      summary.push(`   ${s.label.padEnd(58)} median ${s1(med)} = ${(med / (s.leaseS * 1000)).toFixed(2)} × the lease TTL (${s.leaseS} s); runs ${runs.map((r) => s1(r.totalMs)).join(', ')}; median pass after election ${median(runs.map((r) => r.passMs))} ms; bound: lease + retry period + one pass ≈ ${s.leaseS + s.retryS} s + pass`);
    }
    console.log(summary.join('\n'));
  } finally {
    await fleet.cleanup();
  }
}

async function main(): Promise<void> {
  const t0 = performance.now();
  const etcd = await startEtcd();
  try {
    if (!process.argv.includes('--failover-only')) await writesPerPass(etcd);
    if (!process.argv.includes('--writes-only')) await failoverTime(etcd);
  } finally {
    await etcd.stop();
  }
  console.log(`\nbench:ha took ${s1(performance.now() - t0)}`);
}

await main();
