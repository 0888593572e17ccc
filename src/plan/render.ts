/** A plan for people (text), for a PR comment (markdown) and for tools (json). */
import type { ModelPlan, PlanReport } from './plan.js';

const MARK: Record<ModelPlan['change'], string> = { added: '+', removed: '-', changed: '~', unchanged: ' ' };

function short(rev: string | null): string {
  return rev ? rev.slice(0, 12) : '(nothing)';
}

function totals(r: PlanReport): string {
  const changed = r.models.filter((m) => m.change !== 'unchanged').length;
  const nowhere = r.models.filter((m) => m.change !== 'removed' && m.change !== 'unchanged' && m.placement && !m.placement.fits).length;
  const installs = r.engineInstalls.reduce((n, e) => n + e.nodes.length, 0);
  const parts = [`${changed} model${changed === 1 ? '' : 's'} change${changed === 1 ? 's' : ''}`];
  if (installs) parts.push(`${installs} engine install${installs === 1 ? '' : 's'}`);
  if (r.other.length) parts.push(`${r.other.length} other change${r.other.length === 1 ? '' : 's'}`);
  if (nowhere) parts.push(`${nowhere} changed model${nowhere === 1 ? '' : 's'} fit${nowhere === 1 ? 's' : ''} nowhere`);
  return r.changed ? `${parts.join('; ')}.` : 'No changes.';
}

export function renderText(r: PlanReport): string {
  const lines: string[] = [];
  lines.push(`llmgw plan: ${short(r.base)} → ${short(r.head)} (capacity: ${r.capacitySource === 'status' ? 'observed, from the status file' : 'declared in nodes/'})`);
  const changed = r.models.filter((m) => m.change !== 'unchanged');
  const unchanged = r.models.filter((m) => m.change === 'unchanged');
  if (changed.length) {
    lines.push('', 'models:');
    const width = Math.max(...changed.map((m) => m.model.length));
    for (const m of changed) {
      const details = [...m.effects, ...(m.placement ? [m.placement.text] : [])];
      lines.push(`  ${MARK[m.change]} ${m.model.padEnd(width)}  ${details[0] ?? ''}`);
      for (const d of details.slice(1)) lines.push(`    ${''.padEnd(width)}  ${d}`);
    }
  }
  if (unchanged.length) lines.push('', `unchanged: ${unchanged.map((m) => m.model).join(', ')}`);
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

export function renderMarkdown(r: PlanReport): string {
  const lines: string[] = [];
  lines.push(`### llmgw plan: \`${short(r.base)}\` → \`${short(r.head)}\``, '');
  const changed = r.models.filter((m) => m.change !== 'unchanged');
  if (changed.length) {
    lines.push('| | model | what the merge does | placement |', '|---|---|---|---|');
    for (const m of changed) {
      const icon = m.change === 'added' ? '➕' : m.change === 'removed' ? '➖' : m.unparks ? '🔓' : '✏️';
      const placement = m.placement ? `${m.placement.fits ? '' : '⚠️ '}${md(m.placement.text)}` : '—';
      lines.push(`| ${icon} | \`${m.model}\` | ${m.effects.map(md).join('<br>')} | ${placement} |`);
    }
    lines.push('');
  }
  if (r.engineInstalls.length) {
    lines.push('**Engine installs:** ' + r.engineInstalls.map((e) => `\`${e.engine}\` on ${e.nodes.join(', ')}`).join('; '), '');
  }
  if (r.other.length) {
    lines.push('**Other changes:**', ...r.other.map((o) => `- ${md(o)}`), '');
  }
  lines.push(`_${totals(r)} Capacity: ${r.capacitySource === 'status' ? 'observed (status file)' : 'declared in nodes/'}._`);
  return lines.join('\n');
}

export function renderJson(r: PlanReport): string {
  return JSON.stringify(r, null, 2);
}
