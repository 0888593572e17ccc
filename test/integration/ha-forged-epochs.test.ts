/**
 * Forged and stale epochs on the real stack (#27): two `llmgw serve` instances on one real etcd, an
 * sshd node running a real llama-server, the fleet repo over git smart-HTTP.
 *
 * (a0) #36 N2: ten pushes of `Llmgw-Epoch: <leader epoch + 1>` (below etcd's revision), each after
 *     the leader wrote status: the term goes on (llmgw_leader_changes_total unchanged), the forgery
 *     is shown (STATUS_EPOCH_FORGED), a replica killed meanwhile is replaced within lease + 2 passes.
 * (a) A commit `Llmgw-Epoch: 999999999999` pushed to llmgw/status, then the replica SIGKILLed: the
 *     leader's term goes on (no STATUS_EPOCH_STALE, no resign), it starts the replica again within
 *     lease + 2 passes, and the forgery is a reason in `ctl status` and in llmgw_forged_epochs (the
 *     series LlmgwEpochForged reads).
 * (b) An etcd restored from a snapshot saved early (an hour of epochs before: 5000 revisions, then a
 *     new leader term that wrote its epoch into the node's owner record): a leader of the restored
 *     etcd acts within lease + 2 passes — it takes the node over (NODE_EPOCH_FORGED, shown) with no
 *     hand edit on the node, and replaces a killed replica.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Etcd3 } from 'etcd3';
import { parseExposition, sampleValue } from '../../src/metrics/parse.js';
import { runCli } from '../harness/cli.js';
import { killReplicasUnder, startTestFleet, type TestFleet } from '../harness/controller.js';
import { startRestorableEtcd, type RestorableEtcd } from '../harness/etcd.js';
import { makeTempDir, WorkRepo } from '../harness/git.js';
import { agreedLeader, logLines, spawnServe, type HaStatusJson, type ServeProc, procsDiag } from '../harness/serve-proc.js';
import { until } from '../harness/wait.js';

const LEASE_S = 4;
const POLL_S = 3;
/** What the acceptance allows from the fault to a leader acting: the lease and two passes (poll intervals). */
const ACT_WITHIN_MS = (LEASE_S + 2 * POLL_S) * 1000;
const HA = (endpoint: string): string[] => ['--etcd', endpoint, '--lease-ttl', `${LEASE_S}s`, '--renew-deadline', '3s', '--retry-period', '1s'];
const FORGED = 999_999_999_999;

interface StatusJson extends HaStatusJson {
  control: HaStatusJson['control'] & { forgedEpochs: { code: string; message: string }[] };
}
interface ModelJson {
  name: string;
  phase: string;
  replicas: { id: string; phase: string }[];
}

let etcd: RestorableEtcd;
let fleet: TestFleet;
let procs: ServeProc[] = [];
let snapshotFile: string;

const diag = (): string => procsDiag(procs, 4000);
const statusOf = (p: ServeProc): Promise<StatusJson> => p.admin<StatusJson>('/status');

async function good(p: ServeProc): Promise<ModelJson | undefined> {
  return (await p.admin<{ models: ModelJson[] }>('/models')).models.find((m) => m.name === 'good');
}
const readyId = async (p: ServeProc): Promise<string | null> => (await good(p))?.replicas.find((r) => r.phase === 'ready')?.id ?? null;

async function forgedMetric(p: ServeProc, code: string): Promise<number | undefined> {
  const text = await (await fetch(`http://127.0.0.1:${p.adminPort}/metrics`)).text();
  return sampleValue(parseExposition(text), 'llmgw_forged_epochs', { code });
}

/** The node's owner record: `1 <owner b64> <epoch> <renewedAt> <ttl> <label b64> <seq>`. */
function ownerEpoch(): number {
  return Number(readFileSync(join(fleet.nodes[0]!.dataDir, '.locks', 'owner'), 'utf8').split(' ')[2]);
}

/** Log lines of `p` after `mark` (an out() length) with one of the codes. */
const codesLogged = (p: ServeProc, mark: number, codes: readonly string[]): string[] =>
  logLines(p.out().slice(mark)).filter((l) => codes.includes(String(l['code']))).map((l) => `${p.name}: ${String(l['code'])} ${String(l['msg'])}`);

async function ctlStatus(p: ServeProc): Promise<string> {
  const r = await runCli(['ctl', 'status', '--server', `http://127.0.0.1:${p.adminPort}`]);
  assert.equal(r.code, 0, r.stdout + r.stderr);
  return r.stdout;
}

before(async () => {
  [etcd, fleet] = await Promise.all([startRestorableEtcd(), startTestFleet({ nodes: 1 })]);
  const files = fleet.baseFiles();
  delete files['models/huge.yaml'];
  delete files['models/kev.yaml'];
  files['fleet.yaml'] = files['fleet.yaml']!.replace('poll_interval: 1h', `poll_interval: ${POLL_S}s`);
  await fleet.push(files, `fleet: one always-on model, passes every ${POLL_S} s`);
  snapshotFile = join(await makeTempDir('llmgw-etcd-backup-'), 'etcd.snapshot');
  procs = await Promise.all(['a', 'b'].map((name) => spawnServe({ name, fleet, args: HA(etcd.endpoint) })));
});

after(async () => {
  await Promise.all(procs.map((p) => p.sigkill()));
  await fleet?.cleanup();
  await etcd?.stop();
});

describe('forged and stale epochs, two instances on etcd', () => {
  let leader: { proc: ServeProc; epoch: number };

  it('one leads and good is ready; etcd is backed up (etcdctl snapshot save)', async () => {
    leader = await until('one agreed leader', 90_000, () => agreedLeader(procs), { diag });
    await until('good ready', 120_000, () => readyId(leader.proc), { diag });
    await etcd.snapshotSave(snapshotFile);
  });

  it('(a0) #36 N2: ten pushes of Llmgw-Epoch <leader epoch + 1>, each after a pass the leader wrote: no leader change, the forgery shown, a killed replica replaced within lease + 2 passes', async (t) => {
    const bare = join(fleet.git.root, 'fleet.git');
    await until('the status branch written', 30_000, () => spawnSync('git', ['--git-dir', bare, 'rev-parse', '--verify', '-q', 'llmgw/status']).status === 0, { diag });
    const url = fleet.git.authUrl('fleet.git');
    const work = await WorkRepo.clone(url);
    const changes = async (p: ServeProc): Promise<number> => {
      const text = await (await fetch(`http://127.0.0.1:${p.adminPort}/metrics`)).text();
      return parseExposition(text).filter((x) => x.name === 'llmgw_leader_changes_total').reduce((n, x) => n + x.value, 0);
    };
    const changes0 = await Promise.all(procs.map(changes));
    const marks = procs.map((p) => p.out().length);
    const li = procs.indexOf(leader.proc);
    const firstParents = (): string[] => spawnSync('git', ['--git-dir', bare, 'log', '--first-parent', '--format=%H', 'llmgw/status'], { encoding: 'utf8' }).stdout.trim().split('\n');
    const files = fleet.baseFiles();
    delete files['models/huge.yaml'];
    delete files['models/kev.yaml'];
    const base = files['fleet.yaml']!.replace('poll_interval: 1h', `poll_interval: ${POLL_S}s`);
    const epoch1 = leader.epoch + 1;
    let killed: { at: number; old: string; mark: number } | null = null;
    for (let i = 0; i < 10; i++) {
      const forgedOid = await until(`forged push ${i + 1}`, 30_000, async () => {
        await work.git(['-c', 'credential.helper=', 'fetch', '-q', url, '+llmgw/status:refs/remotes/origin/llmgw/status']);
        await work.git(['checkout', '-q', '-B', 'llmgw/status', 'origin/llmgw/status']);
        await work.write({ 'forged.txt': `the next epoch, push ${i + 1}\n` });
        const oid = await work.commit(`depose the leader\n\nLlmgw-Epoch: ${epoch1}`);
        await work.push(url, 'llmgw/status');
        return oid;
      }, { diag });
      if (i === 5) {
        const old = (await readyId(leader.proc))!;
        killed = { at: Date.now(), old, mark: leader.proc.out().length };
        killReplicasUnder(fleet.nodes[0]!.dataDir);
      }
      // a new fleet revision: the leader's next pass has new status to write, on top of the forgery
      await fleet.push({ ...files, 'fleet.yaml': `${base}\n# round ${i + 1}\n` }, `fleet: round ${i + 1}`);
      await until(`the leader writing status over forged push ${i + 1}`, 30_000, () => {
        const fp = firstParents();
        return fp.indexOf(forgedOid) > 0 ? true : null;
      }, { diag });
    }
    const k = killed!;
    // when it acted: its log line's time (the pushes went on meanwhile)
    const started = await until('the leader starting good again', 60_000, () => logLines(leader.proc.out().slice(k.mark)).find((l) => l['msg'] === 'starting replica' && l['model'] === 'good'), { diag });
    const actedMs = Number(started['time']) - k.at;
    await until('good ready again on a new replica', 90_000, async () => {
      const id = await readyId(leader.proc);
      return id && id !== k.old ? id : null;
    }, { diag });
    t.diagnostic(`replica replaced: the leader started it again within ${actedMs} ms (allowed ${ACT_WITHIN_MS} ms)`);
    assert.ok(actedMs <= ACT_WITHIN_MS, `acted after ${actedMs} ms\n${diag()}`);

    const still = await until('one agreed leader', 10_000, () => agreedLeader(procs), { diag });
    assert.equal(still.proc, leader.proc);
    assert.equal(still.epoch, leader.epoch);
    assert.deepEqual(await Promise.all(procs.map(changes)), changes0, 'llmgw_leader_changes_total unchanged');
    assert.deepEqual(procs.flatMap((p, i) => codesLogged(p, marks[i]!, ['STATUS_EPOCH_STALE', 'NODE_FENCED', 'LEADER_DEPOSED'])), []);
    assert.ok(codesLogged(leader.proc, marks[li]!, ['STATUS_EPOCH_FORGED']).length > 0, 'the forgery is logged with its code');
    // shown from the pass after the write that found it
    let shown = '';
    await until('the forgery of epoch + 1 in the leader\'s status', 15_000, async () => {
      const st = await statusOf(leader.proc);
      shown = JSON.stringify(st.control.forgedEpochs);
      return st.control.forgedEpochs.some((f) => f.code === 'STATUS_EPOCH_FORGED' && f.message.includes(`carries Llmgw-Epoch ${epoch1}, above ${leader.epoch},`));
    }, { diag: () => `${shown}\n${diag()}` });
    assert.equal(await forgedMetric(leader.proc, 'STATUS_EPOCH_FORGED'), 1);
  });

  it('(a) a forged Llmgw-Epoch on llmgw/status, then the replica SIGKILLed: the leader acts within lease + 2 passes, its term goes on, the forgery is a reason and a metric', async (t) => {
    const bare = join(fleet.git.root, 'fleet.git');
    await until('the status branch written', 30_000, () => spawnSync('git', ['--git-dir', bare, 'rev-parse', '--verify', '-q', 'llmgw/status']).status === 0, { diag });
    // anyone who can push llmgw/status (again when the leader moved the branch meanwhile)
    const url = fleet.git.authUrl('fleet.git');
    const work = await WorkRepo.clone(url);
    const forgedOid = await until('the forged commit pushed', 30_000, async () => {
      await work.git(['-c', 'credential.helper=', 'fetch', '-q', url, '+llmgw/status:refs/remotes/origin/llmgw/status']);
      await work.git(['checkout', '-q', '-B', 'llmgw/status', 'origin/llmgw/status']);
      await work.write({ 'forged.txt': 'a forged epoch\n' });
      const oid = await work.commit(`take over the fleet\n\nLlmgw-Epoch: ${FORGED}`);
      await work.push(url, 'llmgw/status');
      return oid;
    }, { diag });

    const old = (await readyId(leader.proc))!;
    const marks = procs.map((p) => p.out().length);
    const killedAt = Date.now();
    killReplicasUnder(fleet.nodes[0]!.dataDir);
    await until('the leader starting good again', 60_000, () => logLines(leader.proc.out().slice(marks[procs.indexOf(leader.proc)])).some((l) => l['msg'] === 'starting replica' && l['model'] === 'good'), { diag });
    const actedMs = Date.now() - killedAt;
    const back = await until('good ready again on a new replica', 90_000, async () => {
      const id = await readyId(leader.proc);
      return id && id !== old ? id : null;
    }, { diag });
    t.diagnostic(`the leader started good again ${actedMs} ms after the SIGKILL (allowed ${ACT_WITHIN_MS} ms); new replica ${back}`);
    assert.ok(actedMs <= ACT_WITHIN_MS, `acted after ${actedMs} ms\n${diag()}`);

    // the term went on: same leader, same epoch, nobody stepped down or was fenced
    const still = await until('one agreed leader', 10_000, () => agreedLeader(procs), { diag });
    assert.equal(still.proc, leader.proc);
    assert.equal(still.epoch, leader.epoch);
    assert.deepEqual(procs.flatMap((p, i) => codesLogged(p, marks[i]!, ['STATUS_EPOCH_STALE', 'NODE_FENCED', 'LEADER_DEPOSED'])), []);
    assert.ok(codesLogged(leader.proc, marks[procs.indexOf(leader.proc)]!, ['STATUS_EPOCH_FORGED']).length > 0, 'the forgery is logged with its code');

    // shown: admin status, ctl status, the metric LlmgwEpochForged reads
    const st = await until('the forgery in the leader\'s status', 10_000, async () => {
      const s = await statusOf(leader.proc);
      return s.control.forgedEpochs.some((f) => f.code === 'STATUS_EPOCH_FORGED') ? s : null;
    }, { diag });
    assert.match(st.control.forgedEpochs.find((f) => f.code === 'STATUS_EPOCH_FORGED')!.message, new RegExp(`${forgedOid.slice(0, 12)} carries Llmgw-Epoch ${FORGED}`));
    const text = await ctlStatus(leader.proc);
    assert.match(text, new RegExp(`^FORGED EPOCH +status branch commit ${forgedOid.slice(0, 12)} carries Llmgw-Epoch ${FORGED}.*\\[STATUS_EPOCH_FORGED\\]$`, 'm'), text);
    assert.match(text, /^controller +LEADER of the etcd cluster/m, text);
    assert.equal(await forgedMetric(leader.proc, 'STATUS_EPOCH_FORGED'), 1);
    // and the leader's own status commits go on over it
    const log = spawnSync('git', ['--git-dir', bare, 'log', '--first-parent', '--format=%H %s', 'llmgw/status'], { encoding: 'utf8' }).stdout.trim().split('\n');
    assert.ok(log.findIndex((l) => l.startsWith(forgedOid)) > 0, `the leader wrote status on top of the forged commit:\n${log.slice(0, 5).join('\n')}`);
  });

  it('(b) etcd restored from the early snapshot after an hour of epochs: a leader of the restored etcd acts within lease + 2 passes, with no hand edit on the node', async (t) => {
    // an hour of epochs: 5000 revisions, then a new term that writes its epoch into the node's record
    const client = new Etcd3({ hosts: etcd.endpoint });
    try {
      let i = 0;
      await Promise.all(Array.from({ length: 20 }, async () => {
        while (i < 5000) await client.put(`/llmgw-test-elsewhere/${i++ % 50}`).value(String(i));
      }));
    } finally {
      client.close();
    }
    const killedAt = Date.now();
    await leader.proc.sigkill();
    const survivor = procs.find((p) => p !== leader.proc)!;
    const next = await until('a new term after the revisions', 60_000, () => agreedLeader([survivor], { epochAbove: leader.epoch, passAfter: killedAt }), { diag });
    assert.ok(next.epoch > leader.epoch + 5000, `epoch ${next.epoch}`);
    leader.proc.restart();
    await until('the node\'s owner record at the new epoch', 30_000, () => ownerEpoch() === next.epoch, { diag });
    await until('both instances agree again', 60_000, () => agreedLeader(procs), { diag });
    const before = (await readyId(next.proc))!;

    const marks = procs.map((p) => p.out().length);
    await etcd.restoreFrom(snapshotFile);
    const restoredAt = Date.now();
    // a leader of the restored etcd: an epoch below the record's, acting (status `leader` true: nothing bars it)
    const acting = await until('a leader of the restored etcd acting on the fleet', 120_000, async () => {
      const l = await agreedLeader(procs);
      if (!l || l.epoch >= next.epoch) return null;
      const s = await statusOf(l.proc);
      return s.lastPass && Date.parse(s.lastPass.startedAt) >= restoredAt ? { ...l, at: Date.now() } : null;
    }, { diag });
    const actedMs = acting.at - restoredAt;
    // where the time went, from the acting leader's log: its election, then its passes
    const lines = logLines(acting.proc.out().slice(marks[procs.indexOf(acting.proc)]));
    const at = (pred: (l: Record<string, unknown>) => boolean): string => {
      const l = lines.find(pred);
      return l ? `${Number(l['time']) - restoredAt} ms` : 'not logged';
    };
    const electedAt = lines.find((l) => l['msg'] === 'elected leader' && l['epoch'] === acting.epoch);
    const actingAt = lines.find((l) => String(l['msg']).startsWith('acting on the fleet again'));
    t.diagnostic(
      `a leader of the restored etcd (epoch ${acting.epoch}, the node's record had ${next.epoch}) acted ${actedMs} ms after etcd answered again (allowed ${ACT_WITHIN_MS} ms): ` +
        `elected at ${at((l) => l['msg'] === 'elected leader' && l['epoch'] === acting.epoch)}, the record judged at ${at((l) => l['code'] === 'NODE_EPOCH_FORGED')}, acting at ${at((l) => String(l['msg']).startsWith('acting on the fleet again'))}`,
    );
    // the leader's part: from its election, two passes (the first judges the record, the second takes it over and acts)
    assert.ok(electedAt && actingAt && Number(actingAt['time']) - Number(electedAt['time']) <= 2 * POLL_S * 1000, `elected → acting\n${diag()}`);
    // all of it: the election (here within a second: the restored leader record is removed by the
    // instance it names; one naming no live instance waits for its lease — the TTL plus the election
    // timeout, 1 s, a restarted etcd adds to every lease — then a retry period, 1 s), then two passes
    assert.ok(actedMs <= ACT_WITHIN_MS + 2000, `acted after ${actedMs} ms\n${diag()}`);
    assert.equal(ownerEpoch(), acting.epoch, 'the node\'s owner record was taken over at the new leader\'s epoch');

    // reported: the log, admin status, ctl status and the metric
    assert.ok(codesLogged(acting.proc, marks[procs.indexOf(acting.proc)]!, ['NODE_EPOCH_FORGED']).length > 0, 'the takeover is logged with its code');
    const st = await statusOf(acting.proc);
    assert.ok(st.control.forgedEpochs.some((f) => f.code === 'NODE_EPOCH_FORGED' && f.message.includes(`epoch ${next.epoch}`)), JSON.stringify(st.control.forgedEpochs));
    assert.match(await ctlStatus(acting.proc), /^FORGED EPOCH +node node-1: took over its owner record of epoch \d+ .*\[NODE_EPOCH_FORGED\]$/m);
    assert.equal(await forgedMetric(acting.proc, 'NODE_EPOCH_FORGED'), 1);

    // it acts: the replica (adopted, not restarted) is replaced when killed
    assert.equal(await readyId(acting.proc), before, 'the replica was adopted, not restarted');
    killReplicasUnder(fleet.nodes[0]!.dataDir);
    await until('good ready again on a new replica', 90_000, async () => {
      const id = await readyId(acting.proc);
      return id && id !== before ? id : null;
    }, { diag });
  });
});
