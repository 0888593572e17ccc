/**
 * `llmgw ctl`'s tables. Pure functions of the admin API's JSON; times are shown relative to the
 * snapshot's `at`, so the same answer always prints the same text.
 */
import { hintFor, printable } from '../errors/catalogue.js';
import type { ModelJson, ModelsJson, NodesJson, ReasonJson, ReplicaDeviceJson, ReplicasJson, StatusJson } from '../wire/shape.js';
import { MODEL_PHASES, type ModelPhase } from '../reconciler/view.js';
import { formatBytes, formatDuration } from '../fleet-spec/units.js';
import { relative, shortDuration } from './time-words.js';
import { stepText } from './rollout-format.js';

export { relative, shortDuration } from './time-words.js';

/** Aligned columns (two spaces apart), no trailing blanks. */
export function table(header: readonly string[], rows: readonly (readonly string[])[], indent = ''): string {
  const all = [header, ...rows];
  const widths = header.map((_, i) => Math.max(...all.map((r) => (r[i] ?? '').length)));
  return all
    .map((r) => indent + r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join('  ').trimEnd())
    .join('\n');
}

/** A reason as ctl prints it; its text printable whatever server sent it (reasons are made printable, catalogue.ts). */
export function reasonText(r: ReasonJson): string {
  return `${printable(r.message)} [${r.code}]`;
}

/** "1/1", "0/1", "0/0 idle", "1/2 degraded" is left to the phase column. */
export function readyCount(m: Pick<ModelJson, 'ready' | 'desired' | 'phase'>): string {
  return `${m.ready}/${m.desired}${m.phase === 'idle' ? ' idle' : ''}`;
}

export function scalingText(m: ModelJson, at?: string): string {
  if (m.scaling.mode === 'replicas' && m.schedule) {
    const s = m.schedule;
    const by = s.entry ? `by "${s.entry.cron}"` : 'by default';
    const next = s.next ? `; ${s.next.replicas} ${at ? relative(s.next.at, at) : `at ${s.next.at}`}` : '';
    return `${s.replicas} replica${s.replicas === 1 ? '' : 's'} ${by}${next}`;
  }
  if (m.scaling.mode === 'replicas' && (m.scaling.max ?? 0) > m.scaling.replicas) return `${m.scaling.replicas}..${m.scaling.max} replicas`;
  if (m.scaling.mode === 'replicas') return `${m.scaling.replicas} replica${m.scaling.replicas === 1 ? '' : 's'}`;
  return `on demand (idle ${formatDuration(m.scaling.idleTimeoutMs)}, max ${m.scaling.maxReplicas})`;
}

const plural = (n: number, one: string, many = `${one}s`): string => `${n} ${n === 1 ? one : many}`;

/** How to unpark a model, in words an operator types. */
export function unparkLine(name: string): string {
  return `llmgw ctl retry ${name}   (or push a commit with the trailer "Llmgw-Retry: ${name}")`;
}

/** One line of detail for a model: the reason it needs attention, or "-". */
export function modelDetail(m: ModelJson, at: string): string {
  if (m.rollout) return rolloutText(m.rollout, at);
  if (m.parked) return `parked ${relative(m.parked.since, at)}: ${reasonText(m.parked.lastError)}`;
  if (m.unplaceable) return m.unplaceable.reason;
  if (m.consecutiveFailures > 0 && (m.lastError || m.nextAttemptAt)) {
    const next = m.nextAttemptAt ? `next attempt ${relative(m.nextAttemptAt, at)}` : 'backing off';
    return m.lastError ? `${next}: ${reasonText(m.lastError)}` : next;
  }
  const drain = drainingText(m);
  const withDrain = (s: string): string => (drain ? `${s}; ${drain}` : s);
  if (m.phase === 'pending') return withDrain(m.scaling.mode === 'on_demand' ? 'asked for; not placed yet' : 'not placed yet');
  if (m.phase === 'starting') {
    const starting = m.replicas.filter((r) => r.phase === 'starting').length;
    return starting === 0 && drain ? `replacing: ${drain}` : withDrain(`starting ${plural(starting, 'replica')}`);
  }
  if (m.replicas.some((r) => r.outdated)) return withDrain('replicas on an older definition are being replaced');
  if (m.scale) return withDrain(scaleText(m.scale, m.desired, at));
  return drain ?? '-';
}

/** "desired 3 of 1..3: scaled 1 → 3 2m ago: 1 busy and 5 waiting…", or "wants 3, 2 fit: …" (#42). */
export function scaleText(s: NonNullable<ModelJson['scale']>, desired: number, at: string): string {
  const of = `desired ${desired} of ${s.min === s.max ? s.min : `${s.min}..${s.max}`}`;
  if (s.short) return `${of}: wants ${s.short.wants}, ${s.short.fit} fit: ${s.short.reason}`;
  if (s.last) return `${of}: scaled ${s.last.from} → ${s.last.to} ${relative(s.last.at, at)}: ${s.last.why}`;
  return `${of}: ${desired === 0 ? 'idle' : desired === s.min ? 'at its min' : 'as decided'}`;
}

/** A rollout in a line: the revision under test and where it stands, or why it is held back. */
export function rolloutText(r: NonNullable<ModelJson['rollout']>, at: string): string {
  const text = rolloutPhaseText(r, at);
  return r.stableGone ? `${text}; NO replica of ${r.stableDigest.slice(0, 12)} is left and it cannot be started again: promote the new revision or revert the definition` : text;
}

function rolloutPhaseText(r: NonNullable<ModelJson['rollout']>, at: string): string {
  const rev = `revision ${r.digest.slice(0, 12)}`;
  if (r.phase === 'checking') return `rollout: ${rev} runs its checks (since ${relative(r.since, at)}); ${r.stableDigest.slice(0, 12)} serves meanwhile`;
  if (r.phase === 'canary') return `rollout: ${rev} ${stepText(r, at) ?? 'canary'}; ${r.stableDigest.slice(0, 12)} serves the rest`;
  if (r.phase === 'promoted') return `rollout: ${rev} promoted; it replaces ${r.stableDigest.slice(0, 12)}`;
  const what = r.phase === 'rolled_back' ? 'ROLLED BACK' : 'HELD';
  return `rollout ${what} ${relative(r.since, at)}: ${r.verdict ? reasonText(r.verdict) : rev}; ${r.stableDigest.slice(0, 12)} serves`;
}

/** "draining 1 replica (2 in flight)": replicas being stopped, with what they still serve; null for none. */
export function drainingText(m: Pick<ModelJson, 'replicas'>): string | null {
  const leaving = m.replicas.filter((r) => r.phase === 'draining' || r.phase === 'stopping');
  if (leaving.length === 0) return null;
  const draining = leaving.filter((r) => r.phase === 'draining');
  const inFlight = draining.reduce((n, r) => n + (r.inFlight ?? 0), 0);
  const parts: string[] = [];
  if (draining.length) parts.push(`draining ${plural(draining.length, 'replica')} (${inFlight} in flight)`);
  if (leaving.length > draining.length) parts.push(`stopping ${plural(leaving.length - draining.length, 'replica')}`);
  return parts.join(', ');
}

/**
 * A replica's place on devices: "Vulkan0 9/9 layers, 24.5 MiB reserved" (K of M as llama-server
 * counted them; "(asked)" where its log does not say and the -ngl it was started with is shown).
 */
export function replicaDeviceText(d: ReplicaDeviceJson): string {
  const layers = `${d.layers === null ? 'all' : d.layers}/${d.layersOf === null ? '?' : d.layersOf} layers${d.layersFrom === 'asked' ? ' (asked)' : ''}`;
  return `${d.devices.join('+')} ${layers}, ${d.reservedBytes === null ? 'reserved bytes unknown' : `${formatBytes(d.reservedBytes)} reserved`}`;
}

/** A model's replicas on devices, each with its node ("node-1 Vulkan0 9/9 layers, 24.5 MiB reserved"), or null for none. */
export function modelDevicesText(m: Pick<ModelJson, 'replicas'>): string | null {
  const on = m.replicas.filter((r) => r.device !== undefined);
  return on.length === 0 ? null : on.map((r) => `${r.node} ${replicaDeviceText(r.device!)}`).join('; ');
}

/** Who this instance is, who leads and since when, and why this one does not act. */
/** A line of the control section: key, text, and whether it is a problem to act on (with its hint). */
export type ControlLine = readonly [key: string, text: string, problem?: boolean];

export function controlLines(s: StatusJson, at: string): ControlLine[] {
  const c = s.control;
  const lines: ControlLine[] = [];
  /** A problem an operator must act on, and its hint (the page shows them in red). */
  const problem = (key: string, text: string, hint?: string): void => {
    lines.push([key, text, true]);
    if (hint !== undefined) lines.push(['', `hint: ${hint}`, true]);
  };
  const since = c.leader?.since ? ` since ${c.leader.since} (${relative(c.leader.since, at)})` : '';
  const epoch = c.leader?.epoch ? `, epoch ${c.leader.epoch}` : '';
  if (c.mode === 'standalone') {
    if (s.leader) lines.push(['controller', `acting alone (${c.instance.label})`]);
    else problem('controller', `NOT acting (${c.instance.label})`);
  } else if (c.leader?.self && s.leader) lines.push(['controller', `LEADER of the etcd cluster${epoch}${since}: ${c.instance.label}`]);
  else if (c.leader) lines.push(['controller', `standby (${c.instance.label}); leader: ${c.leader.label}${epoch}${since}`]);
  else problem('controller', `standby (${c.instance.label}); leader: NONE`);
  if (c.notActing && c.notActing.code !== 'CONTROLLER_STANDBY') problem('not acting', reasonText(c.notActing), c.notActing.hint);
  if (c.etcd && !c.etcd.reachable) problem('etcd', `UNREACHABLE${c.etcd.error ? `: ${reasonText(c.etcd.error)}` : ''}`);
  // reachable, and a write failed (e.g. a publish refused: ETCD_VALUE_TOO_LARGE)
  else if (c.etcd?.error) problem('etcd', `FAILED: ${reasonText(c.etcd.error)}`, c.etcd.error.hint);
  const kp = c.etcd?.keyProblem;
  if (kp) problem('leader key', `PROBLEM ${relative(kp.at, at)}: ${reasonText(kp)}`, kp.hint);
  // absent in the answer of a controller older than the field
  for (const f of c.forgedEpochs ?? []) problem('FORGED EPOCH', reasonText(f), f.hint);
  return lines;
}

/** What a group of models means, as `ctl status` and the status page say it. */
export const GROUP_BLURBS: Readonly<Partial<Record<ModelPhase, string>>> = {
  parked: 'not started again until the cause is fixed and a retry is handled',
  unplaceable: 'fits on no node',
};

/** Phases `ctl status` lists model by model; ready and idle models are a page, then counted. */
export const ATTENTION_PHASES: readonly ModelPhase[] = ['parked', 'unplaceable', 'failing', 'starting', 'pending', 'degraded'];
export const STATUS_ATTENTION_LIMIT = 200;
export const STATUS_HEALTHY_LIMIT = 50;

/**
 * `ctl status`: the summary, then the models that need attention (`attention`: a page of the
 * ATTENTION_PHASES), then a page of the ready and idle ones (`healthy`; without it, `attention`
 * holds every model). What a page left out is counted, with the command that lists it.
 */
export function renderStatus(s: StatusJson, attention: ModelsJson, healthy?: ModelsJson): string {
  const models: ModelsJson = healthy ? { ...attention, models: [...attention.models, ...healthy.models] } : attention;
  const at = s.at;
  const out: string[] = [];
  const head: (readonly [string, string, boolean?])[] = [];

  const rev = s.revision ? `revision ${s.revision.slice(0, 12)}` : 'no revision applied yet';
  const spec = s.spec.rejected ? `${s.revision ? ' in force' : ''}; revision ${s.spec.rejected.revision.slice(0, 12)} REJECTED (see below)` : s.spec.valid ? ', spec valid' : '';
  head.push(['fleet', `${rev}${spec}`]);
  head.push(...controlLines(s, at));
  if (s.sync.error) {
    head.push(['git sync', `FAILED: ${reasonText(s.sync.error)}; last ok ${relative(s.sync.lastOk, at)}`]);
    head.push(['', `hint: ${s.sync.error.hint}`]);
  } else {
    head.push(['git sync', s.sync.lastOk ? `ok ${relative(s.sync.lastOk, at)}` : 'not yet']);
  }
  if (s.stateError) {
    head.push(['state file', `FAILED: ${reasonText(s.stateError)}`]);
    head.push(['', `hint: ${s.stateError.hint}`]);
  }
  if (s.lastPass) {
    const p = s.lastPass;
    head.push(['last pass', `${p.result === 'ok' ? 'ok' : 'FAILED'} ${relative(p.startedAt, at)}: ${plural(p.actions, 'action')} in ${formatDuration(p.durationMs)}${p.error ? `; ${reasonText(p.error)}` : ''}`]);
  } else {
    head.push(['last pass', 'none yet']);
  }
  head.push(['nodes', `${s.nodes.reachable} of ${s.nodes.total} reachable`]);
  for (const n of s.nodes.unreachable) head.push(['', `${n.name}: unreachable${n.error ? `: ${reasonText(n.error)}` : ''}`]);
  const counts = MODEL_PHASES.filter((p) => s.models.byPhase[p] > 0).map((p) => `${s.models.byPhase[p]} ${p}`);
  head.push(['models', `${s.models.total}${counts.length ? ` (${counts.join(', ')})` : ''}; replicas ${s.models.ready} of ${s.models.desired} wanted now are ready`]);
  const w = Math.max(...head.map(([k]) => k.length));
  for (const [k, v] of head) out.push(`${k.padEnd(w)}  ${v}`.trimEnd());

  if (s.spec.rejected) {
    const r = s.spec.rejected;
    out.push('', `REJECTED revision ${r.revision.slice(0, 12)}: ${plural(r.problems.length, 'problem')}; ${s.revision ? `revision ${s.revision.slice(0, 12)} stays in force` : 'nothing is applied'}`);
    for (const p of r.problems) out.push(`  ${p.file}${p.line !== null ? `:${p.line}` : ''}: ${p.message} [${p.code}]`);
    out.push(`  hint: ${r.hint}`);
  }

  const byPhase = (...phases: ModelPhase[]): ModelJson[] => models.models.filter((m) => phases.includes(m.phase));

  const parked = byPhase('parked');
  if (parked.length) {
    out.push('', `PARKED (${parked.length}): ${GROUP_BLURBS.parked}`);
    const w2 = Math.max(...parked.map((m) => m.name.length));
    for (const m of parked) {
      const p = m.parked!;
      out.push(`  ${m.name.padEnd(w2)}  ${readyCount(m)}  parked ${relative(p.since, at)} after ${plural(m.consecutiveFailures, 'failure')} in a row`);
      out.push(`    last error  ${reasonText(p.lastError)}`);
      out.push(`    fix         ${p.lastError.hint}`);
      out.push(`    unpark      ${unparkLine(m.name)}`);
    }
  }

  const rollouts = models.models.filter((m) => m.rollout);
  if (rollouts.length) {
    out.push('', `ROLLOUTS (${rollouts.length}): a new revision proves itself before it takes the model's traffic`);
    for (const m of rollouts) {
      const r = m.rollout!;
      out.push(`  ${m.name}  ${rolloutText(r, at)}`);
      if ((r.phase === 'held' || r.phase === 'rolled_back') && r.verdict?.hint) out.push(`    hint  ${r.verdict.hint}`);
    }
  }

  const unplaceable = byPhase('unplaceable');
  if (unplaceable.length) {
    out.push('', `UNPLACEABLE (${unplaceable.length}): ${GROUP_BLURBS.unplaceable}`);
    out.push(table(['MODEL', 'READY', 'REASON'], unplaceable.map((m) => [m.name, readyCount(m), m.unplaceable?.reason ?? '-']), '  '));
    out.push(`  hint: ${unplaceable[0]!.unplaceable?.hint ?? ''}`.trimEnd());
  }

  const notReady = byPhase('failing', 'starting', 'pending', 'degraded');
  if (notReady.length) {
    const order = (m: ModelJson): number => MODEL_PHASES.indexOf(m.phase);
    notReady.sort((a, b) => order(a) - order(b) || a.name.localeCompare(b.name));
    out.push('', `NOT READY (${notReady.length})`);
    // an ON DEVICES column where a listed model has a replica on a device
    const gpu = notReady.some((m) => modelDevicesText(m) !== null);
    out.push(
      table(
        ['MODEL', 'PHASE', 'READY', 'FAILURES', ...(gpu ? ['ON DEVICES'] : []), 'DETAIL'],
        notReady.map((m) => [m.name, m.phase, readyCount(m), String(m.consecutiveFailures), ...(gpu ? [modelDevicesText(m) ?? '-'] : []), modelDetail(m, at)]),
        '  ',
      ),
    );
  }

  const ok = byPhase('ready', 'idle');
  if (ok.length) {
    out.push('', `READY / IDLE (${ok.length})`);
    const gpu = ok.some((m) => modelDevicesText(m) !== null);
    out.push(
      table(
        ['MODEL', 'READY', 'SCALING', 'NODES', ...(gpu ? ['ON DEVICES'] : [])],
        ok.map((m) => {
          const nodes = [...new Set(m.replicas.filter((r) => r.phase === 'ready').map((r) => r.node))].sort();
          return [m.name, readyCount(m), scalingText(m), nodes.length ? nodes.join(', ') : '-', ...(gpu ? [modelDevicesText(m) ?? '-'] : [])];
        }),
        '  ',
      ),
    );
    // scaling models (#42): the count of their range and why — "wants 3, 2 fit: …" where room is short
    for (const m of ok) if (m.scale && m.phase === 'ready' && (m.scale.short || m.scale.last)) out.push(`  ${m.name}  ${scaleText(m.scale, m.desired, at)}`);
  }
  for (const page of healthy ? [attention, healthy] : []) {
    if (page.next === null) continue;
    const phases = page === healthy ? 'ready,idle' : ATTENTION_PHASES.join(',');
    out.push('', `… ${plural(page.total - page.models.length, 'more model')} in ${phases}: \`llmgw ctl models --phase ${phases}\``);
  }
  if (models.models.length === 0 && s.models.total === 0) out.push('', 'no models in the fleet spec');
  return out.join('\n');
}

export function renderModels(ms: ModelsJson): string {
  if (ms.models.length === 0) return 'no models in the fleet spec';
  const rows = ms.models.map((m) => [m.name, m.phase, readyCount(m), String(m.consecutiveFailures), scalingText(m, ms.at), m.digest.slice(0, 12), modelDetail(m, ms.at)]);
  const out = [table(['MODEL', 'PHASE', 'READY', 'FAILURES', 'SCALING', 'DIGEST', 'DETAIL'], rows)];
  const parked = ms.models.filter((m) => m.parked);
  // the catalogue's hint (the wire's names the model): the one statement of how to unpark
  if (parked.length) out.push('', `Parked: ${parked.map((m) => m.name).join(', ')}. ${parked.length === 1 ? parked[0]!.parked!.hint : hintFor('MODEL_PARKED')}`);
  return out.join('\n');
}

export function renderReplicas(rs: ReplicasJson): string {
  if (rs.replicas.length === 0) return 'no replicas';
  const phase = (r: ReplicasJson['replicas'][number]): string => {
    const p = r.phase === 'draining' && r.inFlight != null ? `draining (${r.inFlight} in flight)` : r.phase;
    return r.outdated ? `${p} (outdated)` : p;
  };
  // a DEVICE column (devices, layers K/M, reserved bytes) where some replica runs on a device
  const gpu = rs.replicas.some((r) => r.device !== undefined);
  // a GROUP column (each host and its share) where some replica runs as an RPC group (#40)
  const groups = rs.replicas.some((r) => r.group !== undefined);
  const rows = rs.replicas.map((r) => [r.id, r.model, r.node, phase(r), shortDuration(Date.parse(rs.at) - Date.parse(r.startedAt)), ...(gpu ? [r.device ? replicaDeviceText(r.device) : '-'] : []), ...(groups ? [r.group ? groupText(r.group) : '-'] : []), r.endpoint || '-']);
  return table(['REPLICA', 'MODEL', 'NODE', 'PHASE', 'AGE', ...(gpu ? ['DEVICE'] : []), ...(groups ? ['RPC GROUP'] : []), 'ENDPOINT'], rows);
}

/** "node-1 head 600 MiB + node-2 worker 600 MiB" */
export function groupText(group: NonNullable<ReplicasJson['replicas'][number]['group']>): string {
  return group.map((h) => `${h.node} ${h.role} ${formatBytes(h.bytes)}`).join(' + ');
}

export function renderNodes(ns: NodesJson): string {
  if (ns.nodes.length === 0) return 'no nodes in the fleet spec';
  const anyDevices = ns.nodes.some((n) => (n.devices?.length ?? 0) > 0);
  const rows = ns.nodes.map((n) => {
    const mem = n.memory ? `${formatBytes(n.memory.availableBytes)} of ${formatBytes(n.memory.totalBytes)}` : '-';
    const failures = Object.entries(n.engineInstallFailures).filter(([, c]) => c > 0);
    const problems = [...(n.error ? [reasonText(n.error)] : []), ...failures.map(([e, c]) => `${e}: ${plural(c, 'install failure')}`)];
    const devices = (n.devices ?? []).map((d) => `${d.name} ${formatBytes(Math.max(0, d.capacityBytes - d.reservedBytes))} of ${formatBytes(d.capacityBytes)}`);
    const row = [n.name, n.transport ?? '-', n.reachable ? 'yes' : 'NO', mem, String(n.replicas), n.engines.length ? n.engines.join(', ') : '-', problems.length ? problems.join('; ') : '-'];
    return anyDevices ? [...row.slice(0, 4), devices.length ? devices.join(', ') : '-', ...row.slice(4)] : row;
  });
  // a DEVICES column (free for placement, of what it offers) where some node has a device
  const head = ['NODE', 'TRANSPORT', 'REACHABLE', 'MEMORY FREE', 'REPLICAS', 'ENGINES', 'PROBLEMS'];
  const out = [table(anyDevices ? [...head.slice(0, 4), 'DEVICES FREE', ...head.slice(4)] : head, rows)];
  const hints = [...new Set(ns.nodes.flatMap((n) => (n.error ? [`${n.error.code}: ${n.error.hint}`] : [])))];
  for (const h of hints) out.push(`hint: ${h}`);
  return out.join('\n');
}
