/** `llmgw plan --base REV --head REV [DIR]` — exit 0 no change, 1 changes, 2 error. */
import { readdir, readFile, stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { extractRetries } from '../git/trailers.js';
import { planChanges } from '../plan/plan.js';
import { renderJson, renderMarkdown, renderText } from '../plan/render.js';
import { mergeStatus, statusFromBranchFiles, statusFromJson, StatusFormatError, type PlanStatus } from '../plan/status.js';
import { loadFleetSpec } from '../fleet-spec/load.js';
import { oneOf, parse, UsageError } from './args.js';
import { localRepo } from './fleet-input.js';
import { formatProblemText } from './problems-format.js';
import type { Io } from './io.js';

export const planUsage = `usage: llmgw plan [--base REV] [--head REV] [DIR] [--status FILE] [--format text|json|markdown]

Says what merging HEAD into the fleet would do, per model: added, removed, definition changed
(replicas replaced; a parked model unparked), scaling changes, retries requested (Llmgw-Retry
trailers), engine installs per node, and where each changed model would fit.

  --base REV        the revision in force (default: the merge-base of --head with --default-branch)
  --head REV        the proposed revision (default: HEAD)
  --default-branch  branch for the default base (default: main)
  --status PATH     observed state for capacity, installed engines, memory needs and parked models: a
                    checkout of the status branch (llmgw/status), or JSON the admin API answers
                    (GET /admin/v1/models, /admin/v1/nodes); give it more than once to combine
  DIR               the fleet git repo (default: the current directory); files are read from git objects
Exit status: 0 no change, 1 changes, 2 error (including an invalid head).`;

async function readStatus(path: string): Promise<PlanStatus> {
  try {
    if ((await stat(path)).isDirectory()) {
      const files: Record<string, string> = {};
      for (const f of ['fleet.json', ...(await readdir(join(path, 'models')).catch(() => [] as string[])).map((n) => `models/${n}`)]) {
        files[f] = await readFile(join(path, f), 'utf8');
      }
      return statusFromBranchFiles(files, path);
    }
    return statusFromJson(JSON.parse(await readFile(path, 'utf8')), path);
  } catch (e) {
    if (e instanceof StatusFormatError) throw new UsageError(`--status ${e.message}`);
    throw new UsageError(`--status ${path}: cannot read llmgw status (${e instanceof Error ? e.message : String(e)})`);
  }
}

export async function planCommand(argv: readonly string[], io: Io): Promise<number> {
  const { values, positionals } = parse(argv, {
    base: { type: 'string' },
    head: { type: 'string' },
    'default-branch': { type: 'string' },
    status: { type: 'string', multiple: true },
    format: { type: 'string', short: 'f' },
    help: { type: 'boolean', short: 'h' },
  });
  if (values.help) {
    io.out(planUsage);
    return 0;
  }
  if (positionals.length > 1) throw new UsageError('at most one DIR');
  const format = oneOf('format', values.format, ['text', 'json', 'markdown'] as const, 'text');
  const { repo, prefix } = localRepo(positionals[0] ?? '.', io.cwd);
  const statusPaths = (values.status ?? []) as unknown as readonly string[];
  const status = statusPaths.length ? mergeStatus(await Promise.all(statusPaths.map((p) => readStatus(resolve(io.cwd, p))))) : null;

  const head = await repo.resolve(values.head ?? 'HEAD');
  let base: string | null;
  if (values.base !== undefined) base = await repo.resolve(values.base);
  else {
    const branch = await repo.resolve(values['default-branch'] ?? 'main');
    base = await repo.mergeBase(head, branch);
  }

  const headSpec = await loadFleetSpec(repo.files(head), head);
  if (!headSpec.ok) {
    io.err(`llmgw plan: the head revision ${head.slice(0, 12)} is invalid; a merge would be rejected and change nothing:`);
    for (const p of headSpec.problems) io.err(formatProblemText(p, prefix));
    return 2;
  }
  let baseSpec = null;
  if (base) {
    const r = await loadFleetSpec(repo.files(base), base);
    if (r.ok) baseSpec = r.spec;
    else io.err(`llmgw plan: note: the base revision ${base.slice(0, 12)} is invalid (${r.problems.length} problems); planning as if nothing were in force`);
  }
  const commits = base ? await repo.commitsBetween(base, head) : [await repo.readCommit(head)];
  const retries = extractRetries(commits).map((r) => ({ model: r.model, commit: r.commit }));
  const report = planChanges({ base: baseSpec, baseRevision: base, head: headSpec.spec, status, retries });
  io.out(format === 'json' ? renderJson(report) : format === 'markdown' ? renderMarkdown(report) : renderText(report));
  return report.changed ? 1 : 0;
}

