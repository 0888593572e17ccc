/**
 * Failover does not scale with the status branch's history (#37 item 5, review N9). Two real
 * `llmgw serve` instances on one real etcd, the fleet repo over real git smart-HTTP, and status
 * branches built with `git fast-import` from before fence summaries (epoch trailers, no summary):
 * one of 200 first-parent commits, one of 200,000.
 *
 * For each: the leader writes the branch (its first write walks 1,000 commits, then signs a summary
 * with the cluster's key from etcd), then it is SIGKILLed, and the new leader publishes a snapshot
 * with its status written — it fetches 64 commits of the branch and reads back to the last summary
 * — within the lease and two passes, the same for 200 as for 200,000 commits.
 */
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { FENCE_TRAILER } from '../../src/git/status-fence.js';
import { SHALLOW_DEPTH } from '../../src/git/status-fence-walk.js';
import { epochOf, trailerValues } from '../../src/git/trailers.js';
import { startTestFleet, type TestFleet } from '../harness/controller.js';
import { startEtcd, type EtcdInstance } from '../harness/etcd.js';
import { git } from '../harness/git.js';
import { agreedLeader, procsDiag, spawnServe, type HaStatusJson, type ServeProc } from '../harness/serve-proc.js';
import { importStatusHistory } from '../harness/status-history.js';
import { until } from '../harness/wait.js';

const LEASE_S = 4;
const POLL_S = 3;
/** The acceptance: from the SIGKILL to the new leader's snapshot, the lease and two passes. */
const PUBLISH_WITHIN_MS = (LEASE_S + 2 * POLL_S) * 1000;
const HA = (endpoint: string): string[] => ['--etcd', endpoint, '--lease-ttl', `${LEASE_S}s`, '--renew-deadline', '3s', '--retry-period', '1s'];
const BIG = 200_000;
const SMALL = 200;

interface StatusJson extends HaStatusJson {
  statusWrite: { lastOk: string | null };
}

let etcd: EtcdInstance;
let fleet: TestFleet;
let procs: ServeProc[] = [];
let bare: string;
const diag = (): string => procsDiag(procs, 3000);

/** fleet.yaml: no models (the fence is what is measured), passes every POLL_S, the status branch named. */
function fleetFiles(statusBranch: string): Record<string, string | null> {
  const files: Record<string, string | null> = fleet.baseFiles();
  for (const k of Object.keys(files)) if (k.startsWith('models/')) delete files[k];
  files['fleet.yaml'] = files['fleet.yaml']!.replace('poll_interval: 1h', `poll_interval: ${POLL_S}s\nstatus_branch: ${statusBranch}`);
  return files;
}

/** The leader, once its published status says the branch was written at or after `since`. */
async function publishedAfter(live: readonly ServeProc[], since: number, epochAbove = 0): Promise<{ proc: ServeProc; epoch: number; writtenAt: number } | null> {
  const l = await agreedLeader(live);
  if (!l || l.epoch <= epochAbove) return null;
  const st = await l.proc.admin<StatusJson>('/status');
  const at = st.statusWrite.lastOk ? Date.parse(st.statusWrite.lastOk) : 0;
  return at >= since ? { ...l, writtenAt: at } : null;
}

before(async () => {
  [etcd, fleet] = await Promise.all([startEtcd(), startTestFleet({ nodes: 1 })]);
  await fleet.push(fleetFiles('llmgw/status-small'), 'fleet: no models, the small status branch');
  bare = join(fleet.git.root, 'fleet.git');
  // status history from before summaries: an epoch on most commits (1, below any leader's), none on some
  const old = (i: number): string => (i % 5 === 4 ? 'hand edit\n' : 'llmgw status at 0123456789ab\n\nLlmgw-Epoch: 1\n');
  await importStatusHistory(bare, 'refs/heads/llmgw/status-small', SMALL, old);
  procs = await Promise.all(['a', 'b'].map((name) => spawnServe({ name, fleet, args: HA(etcd.endpoint) })));
});

after(async () => {
  await Promise.all(procs.map((p) => p.sigkill()));
  await fleet?.cleanup();
  await etcd?.stop();
});

describe('failover on a long status branch, two instances on etcd', () => {
  const figures: string[] = [];

  /** SIGKILL the leader; the survivor publishes with its status written; the killed one comes back as a standby. */
  async function failover(label: string, statusBranch: string, t: { diagnostic(m: string): void }): Promise<number> {
    const leader = await until('a leader that wrote the branch', 60_000, () => publishedAfter(procs, 0), { diag });
    const survivors = procs.filter((p) => p !== leader.proc);
    const killedAt = Date.now();
    await leader.proc.sigkill();
    const next = await until(`a new leader publishing with ${label} written`, 90_000, () => publishedAfter(survivors, killedAt, leader.epoch), { diag });
    const ms = next.writtenAt - killedAt;
    // the new leader fetched the branch shallow (64 commits, and what came since), whatever the history's length
    const mirror = join(next.proc.stateDir, 'fleet.git');
    const fetched = Number(await git(mirror, ['rev-list', '--count', `refs/remotes/origin/${statusBranch}`]));
    figures.push(`${label}: the new leader's status written ${ms} ms after the SIGKILL (allowed ${PUBLISH_WITHIN_MS} ms); its mirror holds ${fetched} commits of the branch`);
    t.diagnostic(figures[figures.length - 1]!);
    assert.ok(ms <= PUBLISH_WITHIN_MS, `${label}: published ${ms} ms after the kill\n${diag()}`);
    assert.ok(fetched <= 2 * SHALLOW_DEPTH, `${label}: ${fetched} commits fetched`);
    leader.proc.restart();
    await until('the killed instance back as a standby', 60_000, async () => (await leader.proc.admin<StatusJson>('/status').catch(() => null))?.control.leader?.id === (await next.proc.admin<StatusJson>('/status')).control.instance.id, { diag });
    return ms;
  }

  /** The branch's newest commit by `epoch` carries a summary that verified nothing by hand: its shape. */
  async function lastSummary(statusBranch: string): Promise<{ epoch: number | null; summary: string }> {
    const msg = await git(bare, ['log', '-1', '--format=%B', statusBranch]);
    return { epoch: epochOf(msg), summary: trailerValues(msg, FENCE_TRAILER)[0] ?? '' };
  }

  it(`${SMALL} commits: the leader signs a summary; SIGKILL, and the new leader publishes within lease + 2 passes`, async (t) => {
    await until('the leader writing the small branch', 60_000, async () => (await lastSummary('llmgw/status-small')).summary !== '', { diag });
    // 200 commits: walked to the root, no cut
    assert.match((await lastSummary('llmgw/status-small')).summary, /^1@[0-9a-f]{40} mac=[0-9a-f]{32}$/);
    await failover(`${SMALL} commits`, 'llmgw/status-small', t);
  });

  it(`${BIG.toLocaleString('en')} commits (git fast-import): the same, within lease + 2 passes`, async (t) => {
    const made = await importStatusHistory(bare, 'refs/heads/llmgw/status', BIG, (i) => (i % 5 === 4 ? 'hand edit\n' : 'llmgw status at 0123456789ab\n\nLlmgw-Epoch: 1\n'));
    t.diagnostic(`fixture: ${BIG} first-parent commits made with git fast-import in ${made.ms} ms`);
    const movedAt = Date.now();
    await fleet.push(fleetFiles('llmgw/status'), 'fleet: the long status branch');
    // the leader's first write on it: a shallow fetch, 1,000 commits walked, then a cut covered by its own epoch
    const leader = await until('the leader writing the long branch', 90_000, async () => {
      const s = await lastSummary('llmgw/status');
      return s.summary !== '' ? s : null;
    }, { diag });
    assert.match(leader.summary, new RegExp(`^1@[0-9a-f]{40} cover=${leader.epoch} mac=[0-9a-f]{32}$`));
    t.diagnostic(`the leader's first write on the ${BIG}-commit branch landed ${Date.now() - movedAt} ms after the fleet push`);
    await failover(`${BIG.toLocaleString('en')} commits`, 'llmgw/status', t);
    t.diagnostic(figures.join('\n'));
  });
});
