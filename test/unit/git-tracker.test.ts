/** SpecTracker over a fake repo and a fake loader: apply, reject, retries, sync failures. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { CommitInfo } from '../../src/git/commits.js';
import { SpecTracker, type SpecLoader, type TrackedRepo } from '../../src/git/tracker.js';
import { LlmgwError } from '../../src/errors/catalogue.js';
import type { FleetFiles } from '../../src/fleet-spec/files.js';
import type { FleetSpec, LoadResult, Problem } from '../../src/fleet-spec/types.js';

/** A linear history; each commit says whether its spec is valid and which models it retries. */
class FakeRepo implements TrackedRepo {
  readonly commits: CommitInfo[] = [];
  readonly valid = new Map<string, boolean>();
  head: string | null = null;
  down = false;
  syncs = 0;

  commit(opts: { valid: boolean; retry?: string[] }): string {
    const oid = String(this.commits.length + 1).padStart(40, '0');
    const msg = `commit ${oid}\n${opts.retry ? `\nLlmgw-Retry: ${opts.retry.join(', ')}\n` : ''}`;
    this.commits.push({ oid, parents: this.head ? [this.head] : [], message: msg, author: { name: 'Op', email: 'op@x', timestamp: this.commits.length } });
    this.valid.set(oid, opts.valid);
    this.head = oid;
    return oid;
  }

  async sync(): Promise<{ head: string }> {
    this.syncs++;
    if (this.down) throw new LlmgwError('GIT_UNREACHABLE', 'fetch main: ECONNREFUSED');
    if (!this.head) throw new LlmgwError('GIT_REF_NOT_FOUND', 'no main');
    return { head: this.head };
  }

  files(oid: string): FleetFiles {
    return { label: oid, list: async () => [], read: async () => new Uint8Array() };
  }

  async commitsBetween(base: string | null, head: string): Promise<CommitInfo[]> {
    const hi = this.commits.findIndex((c) => c.oid === head);
    if (base === null) return [this.commits[hi] as CommitInfo];
    const lo = this.commits.findIndex((c) => c.oid === base);
    if (lo < 0) throw new LlmgwError('GIT_REF_NOT_FOUND', `no ${base}`);
    return this.commits.slice(lo + 1, hi + 1);
  }
}

const problem: Problem = { file: 'fleet.yaml', line: 1, col: 1, path: '', code: 'SPEC_YAML_SYNTAX', message: 'bad', hint: 'fix' };

function loaderFor(repo: FakeRepo): SpecLoader {
  return async (files, revision): Promise<LoadResult> => {
    if (repo.valid.get(files.label)) return { ok: true, spec: { revision } as unknown as FleetSpec, warnings: [] };
    return { ok: false, problems: [problem], warnings: [] };
  };
}

describe('SpecTracker', () => {
  it('applies a valid head; a second refresh of the same head changes nothing', async () => {
    const repo = new FakeRepo();
    const c1 = repo.commit({ valid: true, retry: ['m0'] });
    const t = new SpecTracker(repo, { load: loaderFor(repo) });
    const r1 = await t.refresh();
    assert.equal(r1.outcome, 'applied');
    assert.equal(t.applied?.revision, c1);
    assert.equal(t.applied?.spec.revision, c1);
    // First sync: only the head commit's own trailers, not history's.
    assert.deepEqual(r1.retries.map((r) => r.model), ['m0']);
    assert.ok(t.lastSyncOk);
    const r2 = await t.refresh();
    assert.equal(r2.outcome, 'unchanged');
    assert.deepEqual(r2.retries, []);
  });

  it('first sync does not replay older commits', async () => {
    const repo = new FakeRepo();
    repo.commit({ valid: true, retry: ['old'] });
    repo.commit({ valid: true });
    const t = new SpecTracker(repo, { load: loaderFor(repo) });
    assert.deepEqual((await t.refresh()).retries, []);
  });

  it('rejects an invalid head, keeps the applied spec, and reports its retries once a later head applies', async () => {
    const repo = new FakeRepo();
    const good = repo.commit({ valid: true });
    const t = new SpecTracker(repo, { load: loaderFor(repo) });
    await t.refresh();

    const bad = repo.commit({ valid: false, retry: ['m1'] });
    const r = await t.refresh();
    assert.equal(r.outcome, 'rejected');
    assert.deepEqual(r.retries, []);
    assert.equal(t.applied?.revision, good);
    assert.equal(t.rejected?.revision, bad);
    assert.deepEqual(t.rejected?.problems, [problem]);
    assert.equal((await t.refresh()).outcome, 'unchanged');
    assert.equal(t.rejected?.revision, bad);

    const bad2 = repo.commit({ valid: false, retry: ['m2'] });
    await t.refresh();
    assert.equal(t.rejected?.revision, bad2);

    const fix = repo.commit({ valid: true, retry: ['m3'] });
    const r3 = await t.refresh();
    assert.equal(r3.outcome, 'applied');
    assert.equal(t.applied?.revision, fix);
    assert.equal(t.rejected, null);
    assert.deepEqual(
      r3.retries.map((x) => [x.model, x.commit]),
      [
        ['m1', bad],
        ['m2', bad2],
        ['m3', fix],
      ],
    );
    assert.deepEqual((await t.refresh()).retries, []);
  });

  it('a sync failure keeps the applied spec and records the error; recovery clears it', async () => {
    const repo = new FakeRepo();
    const c1 = repo.commit({ valid: true });
    const t = new SpecTracker(repo, { load: loaderFor(repo) });
    await t.refresh();
    const okAt = t.lastSyncOk;
    repo.down = true;
    const r = await t.refresh();
    assert.equal(r.outcome, 'failed');
    assert.equal(r.error?.code, 'GIT_UNREACHABLE');
    assert.equal(t.lastSyncError?.code, 'GIT_UNREACHABLE');
    assert.equal(t.applied?.revision, c1);
    assert.equal(t.lastSyncOk, okAt);
    repo.down = false;
    assert.equal((await t.refresh()).outcome, 'unchanged');
    assert.equal(t.lastSyncError, null);
  });

  it('a loader crash is a failure, not a rejection, and the head is retried next time', async () => {
    const repo = new FakeRepo();
    repo.commit({ valid: true });
    let crash = true;
    const load: SpecLoader = async (files, rev) => {
      if (crash) throw new Error('disk on fire');
      return loaderFor(repo)(files, rev);
    };
    const t = new SpecTracker(repo, { load });
    const r = await t.refresh();
    assert.equal(r.outcome, 'failed');
    assert.equal(r.error?.code, 'GIT_FAILED');
    assert.equal(t.applied, null);
    assert.equal(t.rejected, null);
    crash = false;
    assert.equal((await t.refresh()).outcome, 'applied');
  });

  it('resumeFrom counts retries since the revision applied before a restart', async () => {
    const repo = new FakeRepo();
    const c1 = repo.commit({ valid: true });
    repo.commit({ valid: true, retry: ['a'] });
    repo.commit({ valid: true, retry: ['b'] });
    const t = new SpecTracker(repo, { load: loaderFor(repo), resumeFrom: c1 });
    assert.deepEqual((await t.refresh()).retries.map((r) => r.model), ['a', 'b']);
  });

  it('restarted on a rejected head, the revision applied before the restart is in force again', async () => {
    const repo = new FakeRepo();
    const c1 = repo.commit({ valid: true });
    const c2 = repo.commit({ valid: false });
    const t = new SpecTracker(repo, { load: loaderFor(repo), resumeFrom: c1 });
    assert.equal((await t.refresh()).outcome, 'rejected');
    assert.equal(t.rejected?.revision, c2);
    assert.equal(t.applied?.revision, c1);
    assert.equal((t.applied?.spec as unknown as { revision: string }).revision, c1);
  });

  it('resumeFrom a revision the repo does not have falls back to the head commit only', async () => {
    const repo = new FakeRepo();
    repo.commit({ valid: true, retry: ['a'] });
    repo.commit({ valid: true, retry: ['b'] });
    const t = new SpecTracker(repo, { load: loaderFor(repo), resumeFrom: 'f'.repeat(40) });
    assert.deepEqual((await t.refresh()).retries.map((r) => r.model), ['b']);
  });

  it('concurrent refreshes share one sync', async () => {
    const repo = new FakeRepo();
    repo.commit({ valid: true });
    const t = new SpecTracker(repo, { load: loaderFor(repo) });
    const [a, b] = await Promise.all([t.refresh(), t.refresh()]);
    assert.equal(a, b);
    assert.equal(repo.syncs, 1);
  });
});
