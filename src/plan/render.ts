/** A plan for people (text), for a PR comment (markdown), for CI annotations (github) and for tools (json). */
import { join } from 'node:path';
import { formatBytes, formatDuration } from '../fleet-spec/units.js';
import type { ModelPlan, NodePlan, PlanReport } from './plan.js';

const MARK: Record<ModelPlan['change'], string> = { added: '+', removed: '-', changed: '~', unchanged: ' ' };

/** The first line of the one PR comment `llmgw plan --format markdown` writes (CI finds it by this). */
export const MARKDOWN_MARKER = '<!-- llmgw-plan -->';

function short(rev: string | null): string {
  return rev ? rev.slice(0, 12) : '(nothing)';
}

const plural = (n: number, one: string, many = `${one}s`): string => `${n} ${n === 1 ? one : many}`;

function totals(r: PlanReport): string {
  const changed = r.models.filter((m) => m.change !== 'unchanged');
  const nowhere = changed.filter((m) => m.placement?.verdict === 'fits-nowhere').length;
  const partly = changed.filter((m) => m.placement?.verdict === 'partly').length;
  const unknown = changed.filter((m) => m.placement?.verdict === 'need-unknown').length;
  const evicting = changed.filter((m) => m.placement?.verdict === 'fits-after-eviction').length;
  const installs = r.engineInstalls.reduce((n, e) => n + e.nodes.length, 0);
  const parts = [`${plural(changed.length, 'model')} change${changed.length === 1 ? 's' : ''}`];
  if (installs) parts.push(plural(installs, 'engine install'));
  if (r.other.length) parts.push(plural(r.other.length, 'other change'));
  if (evicting) parts.push(`${plural(evicting, 'model')} fit${evicting === 1 ? 's' : ''} only after evicting idle on-demand replicas`);
  if (partly) parts.push(`${plural(partly, 'model')} fit${partly === 1 ? 's' : ''} only in part`);
  if (unknown) parts.push(unknown === 1 ? "1 model's memory need is unknown" : `${unknown} models' memory needs are unknown`);
  if (nowhere) parts.push(`${nowhere} changed model${nowhere === 1 ? '' : 's'} fit${nowhere === 1 ? 's' : ''} nowhere`);
  return r.changed ? `${parts.join('; ')}.` : 'No changes.';
}

/** "status branch llmgw/status at 1a2b… (written 2h ago, for 3c4d…)" or how capacity was taken. */
function statusLine(r: PlanReport): string {
  if (!r.status) return 'no status: capacity as declared in nodes/, the base\'s replicas where the planner would put them';
  const age = r.status.ageMs === null ? 'age unknown' : `written ${formatDuration(Math.round(r.status.ageMs / 60_000) * 60_000 || r.status.ageMs)} ago`;
  const applied = r.status.appliedRevision ? `, for ${short(r.status.appliedRevision)}` : '';
  const usage = r.usage === 'assumed' ? '; it does not say where replicas run: the base\'s replicas placed as the planner would' : '';
  return `${r.status.source} (${age}${applied})${usage}${r.status.note ? `; note: ${r.status.note}` : ''}`;
}

function nodeRow(n: NodePlan): { capacity: string; before: string; after: string; free: string; changes: string; over: string | null } {
  const cap = n.capacityBytes;
  const starts = n.starts.map((m) => `+${m}`);
  const stops = n.stops.map((s) => `-${s.model} (${s.reason})`);
  return {
    capacity: cap === null ? 'unknown' : formatBytes(cap),
    before: formatBytes(n.usedBefore),
    after: formatBytes(n.usedAfter),
    free: cap === null ? 'unknown' : formatBytes(Math.max(0, cap - n.usedAfter)),
    changes: [...starts, ...stops].join(', ') || '-',
    over: n.roomBytes !== null && n.usedAfter > n.roomBytes ? `over its room (capacity − placement_reserve) by ${formatBytes(n.usedAfter - n.roomBytes)}` : null,
  };
}

export function renderText(r: PlanReport): string {
  const lines: string[] = [];
  lines.push(`llmgw plan: ${short(r.base)} → ${short(r.head)}`, `status: ${statusLine(r)}`);
  const changed = r.models.filter((m) => m.change !== 'unchanged');
  const unchanged = r.models.filter((m) => m.change === 'unchanged');
  if (changed.length) {
    lines.push('', 'models:');
    const width = Math.max(...changed.map((m) => m.model.length));
    for (const m of changed) {
      const details = [...m.effects, ...(m.placement ? [m.placement.text, ...(m.placement.details ?? []).map((d) => `  ${d}`)] : [])];
      lines.push(`  ${MARK[m.change]} ${m.model.padEnd(width)}  ${details[0] ?? ''}`);
      for (const d of details.slice(1)) lines.push(`    ${''.padEnd(width)}  ${d}`);
    }
  }
  if (unchanged.length) lines.push('', `unchanged: ${unchanged.map((m) => m.model).join(', ')}`);
  const touched = r.nodes.filter((n) => n.starts.length || n.stops.length);
  if (touched.length) {
    lines.push('', 'nodes (memory in use: now → after the merge’s next pass):');
    const width = Math.max(...touched.map((n) => n.name.length));
    for (const n of touched) {
      const row = nodeRow(n);
      lines.push(`  ${n.name.padEnd(width)}  ${row.before} → ${row.after} of ${row.capacity}: ${row.changes}${row.over ? `; ${row.over}` : ''}`);
    }
  }
  if (r.engineInstalls.length) {
    lines.push('', 'engine installs:');
    for (const e of r.engineInstalls) lines.push(`  ${e.engine} on ${e.nodes.join(', ')}`);
  }
  if (r.other.length) {
    lines.push('', 'other changes:');
    for (const o of r.other) lines.push(`  ${o}`);
  }
  lines.push('', totals(r));
  return lines.join('\n');
}

function md(s: string): string {
  return s.replace(/\|/g, '\\|').replace(/\n/g, ' ');
}

const VERDICT_ICON: Record<NonNullable<ModelPlan['placement']>['verdict'], string> = {
  fits: '✅',
  'fits-after-eviction': '♻️',
  partly: '⚠️',
  'fits-nowhere': '❌',
  'need-unknown': '❓',
  parked: '⏸️',
  'none-wanted': '💤',
  running: '✅',
};

export function renderMarkdown(r: PlanReport): string {
  const lines: string[] = [MARKDOWN_MARKER];
  lines.push(`### llmgw plan: \`${short(r.base)}\` → \`${short(r.head)}\``, '');
  lines.push(`<sub>Status: ${md(statusLine(r))}</sub>`, '');
  const changed = r.models.filter((m) => m.change !== 'unchanged');
  if (changed.length) {
    lines.push('#### Models', '', '| | model | what the merge does | placement |', '|---|---|---|---|');
    for (const m of changed) {
      const icon = m.change === 'added' ? '➕' : m.change === 'removed' ? '➖' : m.unparks ? '🔓' : '✏️';
      const effects = m.effects.map((e) => (m.unparks && /unparks/.test(e) ? `**${md(e)}**` : md(e)));
      const placement = m.placement ? `${VERDICT_ICON[m.placement.verdict]} ${[m.placement.text, ...(m.placement.details ?? [])].map(md).join('<br>')}` : '—';
      lines.push(`| ${icon} | \`${m.model}\` | ${effects.join('<br>')} | ${placement} |`);
    }
    lines.push('');
  }
  const touched = r.nodes.filter((n) => n.starts.length || n.stops.length);
  if (touched.length) {
    lines.push('#### Nodes', '', '| node | memory | in use now | after the merge | free after | starts (+) and stops (−) |', '|---|---|---|---|---|---|');
    for (const n of touched) {
      const row = nodeRow(n);
      const changes = [
        ...n.starts.map((m) => `➕ \`${m}\``),
        ...n.stops.map((s) => (s.reason === 'evicted' ? `♻️ **evicts** \`${s.model}\`` : `➖ \`${s.model}\` (${s.reason})`)),
      ].join('<br>');
      lines.push(`| \`${n.name}\` | ${row.capacity} | ${row.before} | ${row.after}${row.over ? ` ⚠️ ${row.over}` : ''} | ${row.free} | ${changes} |`);
    }
    lines.push('');
  }
  if (r.engineInstalls.length) {
    lines.push('**Engine installs:** ' + r.engineInstalls.map((e) => `\`${e.engine}\` on ${e.nodes.join(', ')}`).join('; '), '');
  }
  if (r.other.length) {
    lines.push('**Other changes:**', ...r.other.map((o) => `- ${md(o)}`), '');
  }
  if (unchangedLine(r)) lines.push(unchangedLine(r)!, '');
  lines.push(`_${totals(r)}_`);
  return lines.join('\n');
}

function unchangedLine(r: PlanReport): string | null {
  const unchanged = r.models.filter((m) => m.change === 'unchanged');
  return unchanged.length ? `Unchanged: ${unchanged.map((m) => `\`${m.model}\``).join(', ')}` : null;
}

/** GitHub workflow commands escape %, CR and LF in messages; properties also ":" and ",". */
const escData = (s: string): string => s.replace(/%/g, '%25').replace(/\r/g, '%0D').replace(/\n/g, '%0A');
const escProp = (s: string): string => escData(s).replace(/:/g, '%3A').replace(/,/g, '%2C');

/** The line of the first of `keys` in a model file (1 when none is there). */
function lineOf(text: string | undefined, keys: readonly string[]): number {
  if (!text) return 1;
  const lines = text.split('\n');
  for (const k of keys) {
    const i = lines.findIndex((l) => l.startsWith(`${k}:`));
    if (i >= 0) return i + 1;
  }
  return 1;
}

/**
 * One annotation per changed model, on its file (`::warning` when it fits nowhere, only in part,
 * or its need is unknown; `::notice` otherwise), understood by GitHub and Gitea/Forgejo Actions.
 * `files`: the head's model file texts (to point at the line), `prefix`: the repo's path in the
 * checkout ('' at its root).
 */
export function renderGithub(r: PlanReport, files: Readonly<Record<string, string>>, prefix = ''): string[] {
  const out: string[] = [];
  for (const m of r.models) {
    if (m.change === 'unchanged' || m.change === 'removed' || !m.placement) continue;
    const p = m.placement;
    const warn = p.verdict === 'fits-nowhere' || p.verdict === 'partly' || p.verdict === 'need-unknown';
    const keys = p.verdict === 'need-unknown' ? ['memory', 'source'] : ['replicas', 'on_demand', 'schedule', 'memory', 'source'];
    const file = prefix ? join(prefix, m.file) : m.file;
    const title = `llmgw plan: ${m.model} ${p.verdict === 'fits-nowhere' ? 'fits nowhere' : p.verdict === 'partly' ? 'fits only in part' : p.verdict === 'need-unknown' ? 'memory need unknown' : m.change}`;
    const message = [...m.effects, p.text, ...(p.details ?? [])].join('\n');
    out.push(`::${warn ? 'warning' : 'notice'} file=${escProp(file)},line=${lineOf(files[m.file], keys)},title=${escProp(title)}::${escData(message)}`);
  }
  return out;
}

export function renderJson(r: PlanReport): string {
  return JSON.stringify(r, null, 2);
}
