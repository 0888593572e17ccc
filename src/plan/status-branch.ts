/**
 * The status branch (llmgw/status) of the fleet repo, read from git objects as `llmgw plan` finds
 * it in a PR check's clone: the newest status commit written for the base revision (fleet.json's
 * appliedRevision), else the branch tip with a note that it is for another revision.
 */
import type { FleetRepo } from '../git/repo.js';
import type { CommitInfo } from '../git/commits.js';
import { documentMeta, observedFromPlanStatus, type ObservedFleet } from './observed.js';
import { statusFromBranchFiles } from './status.js';

export interface StatusBranchRead {
  readonly observed: ObservedFleet;
  readonly commit: string;
  /** Set when the status is not for the base revision. */
  readonly note: string | null;
}

/** How many status commits are searched for the base revision. */
const MAX_WALK = 200;
const MAX_FILE = 1024 * 1024;

async function filesAt(repo: FleetRepo, oid: string): Promise<Record<string, string>> {
  const files = repo.files(oid);
  const out: Record<string, string> = {};
  for (const e of await files.list()) {
    if (e.kind !== 'file' || !(e.path === 'fleet.json' || /^models\/[^/]+\.json$/.test(e.path))) continue;
    out[e.path] = Buffer.from(await files.read(e.path, MAX_FILE)).toString('utf8');
  }
  return out;
}

async function appliedAt(repo: FleetRepo, oid: string): Promise<string | null> {
  try {
    const text = Buffer.from(await repo.files(oid).read('fleet.json', MAX_FILE)).toString('utf8');
    return documentMeta(JSON.parse(text) as unknown).revision;
  } catch {
    return null;
  }
}

/** The branch's tip: a local branch, else the remote-tracking one (a CI clone fetches it there). */
export async function resolveStatusBranch(repo: FleetRepo, branch: string): Promise<string | null> {
  for (const ref of [`refs/heads/${branch}`, `refs/remotes/origin/${branch}`]) {
    try {
      return await repo.resolve(ref);
    } catch {
      // next
    }
  }
  return null;
}

export async function readStatusBranch(repo: FleetRepo, branch: string, base: string | null): Promise<StatusBranchRead | null> {
  const tip = await resolveStatusBranch(repo, branch);
  if (tip === null) return null;
  let found: CommitInfo | null = null;
  let tipInfo: CommitInfo | null = null;
  let cur: string | undefined = tip;
  for (let i = 0; cur && i < MAX_WALK; i++) {
    const c: CommitInfo = await repo.readCommit(cur);
    tipInfo ??= c;
    if (base !== null && (await appliedAt(repo, cur)) === base) {
      found = c;
      break;
    }
    cur = c.parents[0];
  }
  const use = found ?? tipInfo!;
  const source = `status branch ${branch} at ${use.oid.slice(0, 12)}`;
  const files = await filesAt(repo, use.oid);
  const observed = observedFromPlanStatus(statusFromBranchFiles(files, source), {
    source,
    writtenAt: use.author.timestamp * 1000,
    appliedRevision: files['fleet.json'] ? documentMeta(JSON.parse(files['fleet.json']) as unknown).revision : null,
  });
  const note =
    found || base === null
      ? null
      : `the status branch has no status for the base ${base.slice(0, 12)}; using its newest, for ${observed.appliedRevision ? observed.appliedRevision.slice(0, 12) : 'no applied revision'}`;
  return { observed, commit: use.oid, note };
}
