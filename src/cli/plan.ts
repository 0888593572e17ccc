/** `llmgw plan --base REV --head REV [DIR]` — exit 0 no change, 1 changes, 2 error. */
import { readdir, readFile, stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { extractRetries } from '../git/trailers.js';
import { planChanges } from '../plan/plan.js';
import { renderGithub, renderJson, renderMarkdown, renderText } from '../plan/render.js';
import { DEFAULT_HEADER_TIMEOUT_MS, memoryNeeds } from '../plan/needs.js';
import { documentMeta, observedFromPlanStatus, type ObservedFleet } from '../plan/observed.js';
import { statusFromBranchFiles, statusFromJson, StatusFormatError } from '../plan/status.js';
import { readStatusBranch } from '../plan/status-branch.js';
import type { FleetSpec } from '../fleet-spec/types.js';
import { parseDuration } from '../fleet-spec/units.js';
import { loadFleetSpec } from '../fleet-spec/load.js';
import { usageError } from '../errors/catalogue.js';
import { oneOf, parse } from './args.js';
import { localRepo } from './fleet-input.js';
import { formatProblemText } from './problems-format.js';
import type { Io } from './io.js';

export const planUsage = `usage: llmgw plan [--base REV] [--head REV] [DIR] [--status PATH] [--format text|json|markdown|github]

Says what merging HEAD into the fleet would do, per model: added, removed, definition changed
(replicas replaced; a parked model unparked), scaling and schedule changes, retries requested
(Llmgw-Retry trailers), engine installs per node, and where each changed model's replicas go —
simulated with the controller's own planner on the fleet's usage as the status branch reports it:
fits, fits after evicting idle on-demand replicas, or fits nowhere.
A model with a rollout: block shows the checks, canary steps and times a definition change runs,
and whether a node has room for both revisions (else a replica is replaced: replicas − 1).

  --base REV            the revision in force (default: the merge-base of --head with --default-branch)
  --head REV            the proposed revision (default: HEAD)
  --default-branch      branch for the default base (default: main)
  --status-branch NAME  the status branch to read (default: the head's fleet.yaml status_branch,
                        llmgw/status); a local branch or origin/NAME (a CI clone: git fetch origin NAME)
  --status PATH         read the status from PATH instead: a status JSON file, the admin API's
                        /admin/v1/models or /nodes JSON, or a checkout of the status branch (a folder);
                        give it more than once to combine
  --no-status           read no status: declared capacity, the base's replicas where the planner puts them
  --header-timeout DUR  how long to wait for a model's GGUF header over https (default 10s)
  --at TIME             plan for this time (ISO 8601; default now): schedules, on-demand activity
  --format FORMAT       text (default), json, markdown (one PR comment) or github (workflow annotations
                        on the changed model files, then the text)
  DIR                   the fleet git repo (default: the current directory); files are read from git objects
Exit status: 0 no change, 1 changes, 2 error (including an invalid head).`;

async function readStatusPath(path: string): Promise<ObservedFleet> {
  try {
    if ((await stat(path)).isDirectory()) {
      const files: Record<string, string> = {};
      for (const f of ['fleet.json', ...(await readdir(join(path, 'models')).catch(() => [] as string[])).map((n) => `models/${n}`)]) {
        files[f] = await readFile(join(path, f), 'utf8');
      }
      const meta = documentMeta(JSON.parse(files['fleet.json'] ?? '{}') as unknown);
      return observedFromPlanStatus(statusFromBranchFiles(files, path), { source: `status checkout ${path}`, writtenAt: (await stat(join(path, 'fleet.json'))).mtimeMs, appliedRevision: meta.revision });
    }
    const doc = JSON.parse(await readFile(path, 'utf8')) as unknown;
    const meta = documentMeta(doc);
    return observedFromPlanStatus(statusFromJson(doc, path), { source: `--status ${path}`, writtenAt: meta.writtenAt, appliedRevision: meta.revision });
  } catch (e) {
    if (e instanceof StatusFormatError) throw usageError(`--status ${e.message}`);
    throw usageError(`--status ${path}: cannot read llmgw status (${e instanceof Error ? e.message : String(e)})`);
  }
}

/** Several status documents (e.g. the admin API's /models and /nodes) as one. */
function mergeObserved(parts: readonly ObservedFleet[]): ObservedFleet {
  const times = parts.map((p) => p.writtenAt).filter((t): t is number => t !== null);
  return {
    source: parts.map((p) => p.source).join(' + '),
    writtenAt: times.length ? Math.min(...times) : null,
    appliedRevision: parts.find((p) => p.appliedRevision)?.appliedRevision ?? null,
    nodes: Object.assign({}, ...parts.map((p) => p.nodes)) as ObservedFleet['nodes'],
    models: Object.assign({}, ...parts.map((p) => p.models)) as ObservedFleet['models'],
  };
}

/** Models whose need is read from their header: added, or a new source / checksum / profile. */
function toRead(base: FleetSpec | null, head: FleetSpec): string[] {
  return Object.values(head.models)
    .filter((h) => {
      const b = base?.models[h.name];
      return !b || b.digest !== h.digest || b.memoryBytes !== h.memoryBytes;
    })
    .map((m) => m.name);
}

export async function planCommand(argv: readonly string[], io: Io): Promise<number> {
  const { values, positionals } = parse(argv, {
    base: { type: 'string' },
    head: { type: 'string' },
    'default-branch': { type: 'string' },
    'status-branch': { type: 'string' },
    status: { type: 'string', multiple: true },
    'no-status': { type: 'boolean' },
    'header-timeout': { type: 'string' },
    at: { type: 'string' },
    format: { type: 'string', short: 'f' },
    help: { type: 'boolean', short: 'h' },
  });
  if (values.help) {
    io.out(planUsage);
    return 0;
  }
  if (positionals.length > 1) throw usageError('at most one DIR');
  const format = oneOf('format', values.format as string | undefined, ['text', 'json', 'markdown', 'github'] as const, 'text');
  const timeoutMs = values['header-timeout'] === undefined ? DEFAULT_HEADER_TIMEOUT_MS : parseDuration(values['header-timeout'] as string);
  if (timeoutMs === null || timeoutMs <= 0) throw usageError(`--header-timeout must be a duration such as 10s (got ${JSON.stringify(values['header-timeout'])})`);
  const now = values.at === undefined ? Date.now() : Date.parse(values.at as string);
  if (!Number.isFinite(now)) throw usageError(`--at must be an ISO 8601 time such as 2026-03-30T08:00:00Z (got ${JSON.stringify(values.at)})`);
  const { repo, prefix } = await localRepo(positionals[0] ?? '.', io.cwd);
  const statusPaths = (values.status ?? []) as unknown as readonly string[];

  const head = await repo.resolve((values.head as string | undefined) ?? 'HEAD');
  let base: string | null;
  if (values.base !== undefined) base = await repo.resolve(values.base as string);
  else {
    // a PR check's clone has the default branch as origin/NAME only
    const name = (values['default-branch'] as string | undefined) ?? 'main';
    const branch = await repo.resolve(name).catch(() => repo.resolve(`origin/${name}`));
    base = await repo.mergeBase(head, branch);
  }

  const headSpec = await loadFleetSpec(repo.files(head), head);
  if (!headSpec.ok) {
    io.err(`llmgw plan: the head revision ${head.slice(0, 12)} is invalid; a merge would be rejected and change nothing:`);
    for (const p of headSpec.problems) io.err(formatProblemText(p, prefix));
    return 2;
  }
  let baseSpec: FleetSpec | null = null;
  if (base) {
    const r = await loadFleetSpec(repo.files(base), base);
    if (r.ok) baseSpec = r.spec;
    else io.err(`llmgw plan: note: the base revision ${base.slice(0, 12)} is invalid (${r.problems.length} problems); planning as if nothing were in force`);
  }

  let observed: ObservedFleet | null = null;
  let statusNote: string | null = null;
  if (statusPaths.length) observed = mergeObserved(await Promise.all(statusPaths.map((p) => readStatusPath(resolve(io.cwd, p)))));
  else if (!values['no-status']) {
    const branch = (values['status-branch'] as string | undefined) ?? (baseSpec ?? headSpec.spec).settings.statusBranch;
    const read = await readStatusBranch(repo, branch, base);
    if (read) {
      observed = read.observed;
      statusNote = read.note;
    } else {
      io.err(`llmgw plan: note: no status branch ${branch} in this clone (in CI: git fetch origin ${branch}); planning on declared capacity, the base's replicas where the planner would put them`);
    }
  }

  const commits = base ? await repo.commitsBetween(base, head) : [await repo.readCommit(head)];
  const retries = extractRetries(commits).map((r) => ({ model: r.model, commit: r.commit }));
  const known: Record<string, number | null> = {};
  for (const [name, m] of Object.entries(observed?.models ?? {})) known[name] = m.memoryBytes;
  const needs = await memoryNeeds(headSpec.spec, toRead(baseSpec, headSpec.spec), { timeoutMs, known });
  const report = planChanges({ base: baseSpec, baseRevision: base, head: headSpec.spec, observed, statusNote, needs, retries, now });
  if (format === 'json') io.out(renderJson(report));
  else if (format === 'markdown') io.out(renderMarkdown(report));
  else if (format === 'github') {
    const files = repo.files(head);
    const texts: Record<string, string> = {};
    for (const m of report.models) {
      if (m.change === 'unchanged' || m.change === 'removed') continue;
      texts[m.file] = Buffer.from(await files.read(m.file, 256 * 1024)).toString('utf8');
    }
    for (const line of renderGithub(report, texts, prefix)) io.out(line);
    io.out(renderText(report));
  } else io.out(renderText(report));
  return report.changed ? 1 : 0;
}
