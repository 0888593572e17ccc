import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { parse, stringify } from 'yaml';
import { Reasons } from '../../src/errors/catalogue.js';
import { createMetrics } from '../../src/metrics/registry.js';
import { HISTOGRAM_NAMES, MODEL_STATES, MetricNames, baseMetricName } from '../../src/metrics/names.js';
import { parseExposition } from '../../src/metrics/parse.js';
import { STANDALONE, type FleetSnapshot, type ModelView } from '../../src/reconciler/view.js';
import { unplaceableView } from '../harness/fake-fleet-view.js';
import { repoRoot } from '../harness/paths.js';

const alertsDir = join(repoRoot, 'alerts');
const rulesFile = join(alertsDir, 'llmgw.rules.yaml');
const dashboardFile = join(repoRoot, 'dashboards', 'llmgw-fleet.json');

function promtool(args: string[], cwd: string): { status: number | null; output: string } {
  const res = spawnSync('promtool', args, { cwd, encoding: 'utf8', timeout: 120_000 });
  if (res.error) throw new Error(`promtool ${args.join(' ')}: ${res.error.message} (install the Debian package "prometheus")`);
  return { status: res.status, output: `${res.stdout}${res.stderr}` };
}

interface Rule {
  alert?: string;
  record?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
interface RuleFile {
  groups: { name: string; rules: Rule[] }[];
}

const rules = (): RuleFile => parse(readFileSync(rulesFile, 'utf8')) as RuleFile;
const alerts = (): Rule[] => rules().groups.flatMap((g) => g.rules.filter((r) => r.alert));

/** Every PromQL expression in the dashboard: panel targets and template variable queries. */
function dashboardExprs(): string[] {
  const out: string[] = [];
  const walk = (v: unknown, key: string): void => {
    if (Array.isArray(v)) v.forEach((x) => walk(x, key));
    else if (v && typeof v === 'object') for (const [k, x] of Object.entries(v)) walk(x, k);
    else if (typeof v === 'string' && (key === 'expr' || key === 'definition' || key === 'query') && /llmgw_/.test(v)) out.push(v);
  };
  walk(JSON.parse(readFileSync(dashboardFile, 'utf8')), '');
  return out;
}

function metricIdentifiers(text: string): string[] {
  return [...new Set([...text.matchAll(/\bllmgw_[a-zA-Z0-9_:]+/g)].map((m) => m[0]))];
}

describe('alert rules (promtool)', () => {
  it('LlmgwRouter5xxRatio leaves out exactly 5xx catalogue refusals, the same list on both sides and in the description', () => {
    const rule = alerts().find((a) => a.alert === 'LlmgwRouter5xxRatio')!;
    const lists = [...`${rule.expr}${rule.annotations?.description ?? ''}`.matchAll(/reason!~"([^"]+)"/g)].map((m) => m[1]!);
    assert.equal(lists.length, 3, 'numerator, denominator and the description\'s query');
    assert.equal(new Set(lists).size, 1, `one list: ${lists.join(' / ')}`);
    const codes = lists[0]!.split('|');
    assert.deepEqual(codes, ['MODEL_PARKED', 'MODEL_UNPLACEABLE', 'MODEL_FAILING', 'MODEL_LOADING', 'NO_VALID_SPEC']);
    for (const code of codes) {
      const reason = (Reasons as Record<string, { http: number } | undefined>)[code];
      assert.ok(reason && reason.http >= 500, `${code} is a catalogue code answered with a 5xx`);
    }
  });

  it('promtool check rules alerts/llmgw.rules.yaml', () => {
    const res = promtool(['check', 'rules', 'llmgw.rules.yaml'], alertsDir);
    assert.equal(res.status, 0, res.output);
  });

  it('promtool test rules alerts/llmgw.rules.test.yaml', () => {
    const res = promtool(['test', 'rules', 'llmgw.rules.test.yaml'], alertsDir);
    assert.equal(res.status, 0, res.output);
  });

  it('the tests catch the original bug: an alert that needs a ready series cannot fire without one', () => {
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-alerts-'));
    try {
      cpSync(alertsDir, dir, { recursive: true });
      const file = rules();
      const rule = file.groups.flatMap((g) => g.rules).find((r) => r.alert === 'LlmgwModelNotServing');
      assert.ok(rule);
      // The naive rule that shipped: it only sees models whose ready series exists.
      rule.expr = 'llmgw_model_ready_replicas == 0 and on (job, instance, model) llmgw_model_desired_replicas > 0 and on (job, instance) (llmgw_leader == 1)';
      writeFileSync(join(dir, 'llmgw.rules.yaml'), stringify(file));
      const res = promtool(['test', 'rules', 'llmgw.rules.test.yaml'], dir);
      assert.notEqual(res.status, 0, res.output);
      assert.match(res.output, /no-ready-series/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('every alert has a severity, a summary and a description, and a promtool test case', () => {
    const tests = readFileSync(join(alertsDir, 'llmgw.rules.test.yaml'), 'utf8');
    const names = alerts().map((a) => a.alert as string);
    assert.equal(new Set(names).size, names.length, 'alert names are unique');
    for (const a of alerts()) {
      assert.match(a.labels?.['severity'] ?? '', /^(critical|warning|info)$/, `${a.alert} severity`);
      assert.ok(a.annotations?.['summary'], `${a.alert} summary`);
      assert.ok(a.annotations?.['description'], `${a.alert} description`);
      assert.match(a.alert ?? '', /^Llmgw[A-Z][A-Za-z0-9]+$/);
      // Fires somewhere in the tests (exp_alerts with its labels) and is evaluated where it must not.
      const cases = tests.split(/alertname: /).slice(1).filter((c) => c.startsWith(`${a.alert}\n`));
      assert.ok(cases.some((c) => /exp_alerts:\s*\n\s*- exp_labels/.test(c)), `${a.alert} has a firing case`);
      assert.ok(cases.some((c) => /exp_alerts: \[\]/.test(c)), `${a.alert} has a not-firing case`);
    }
    for (const name of [
      'LlmgwModelParked', 'LlmgwModelUnplaceable', 'LlmgwModelNotServing', 'LlmgwModelStartFailures', 'LlmgwEngineInstallFailing',
      'LlmgwNoLeader', 'LlmgwMultipleLeaders', 'LlmgwCertificateExpiringSoon', 'LlmgwCertificateUnreadable', 'LlmgwSpecInvalid',
      'LlmgwGitSyncStale', 'LlmgwStatusWriteStale', 'LlmgwRouter5xxRatio', 'LlmgwNodeUnreachable', 'LlmgwEpochForged',
    ]) assert.ok(names.includes(name), `alert ${name} exists`);
  });
});

describe('metric names used by alerts and the dashboard', () => {
  const exported = new Set(createMetrics({ defaultMetrics: false }).metricNames());

  function assertExported(where: string, text: string): void {
    for (const id of metricIdentifiers(text)) {
      const base = baseMetricName(id);
      assert.ok(exported.has(base), `${where} uses ${id}, which llmgw does not export`);
      if (base !== id) assert.ok((HISTOGRAM_NAMES as readonly string[]).includes(base));
    }
  }

  it('every metric in the alert rules (expressions and annotation queries) is one the code exports', () => {
    let count = 0;
    for (const a of alerts()) {
      assertExported(`${a.alert} expr`, a.expr);
      for (const [k, v] of Object.entries(a.annotations ?? {})) assertExported(`${a.alert} ${k}`, v);
      count += metricIdentifiers(a.expr).length;
    }
    assert.ok(count > 15);
  });

  it('every metric in the dashboard\'s PromQL is one the code exports', () => {
    const exprs = dashboardExprs();
    assert.ok(exprs.length > 20, `found ${exprs.length} expressions`);
    for (const e of exprs) assertExported('dashboard', e);
  });

  it('every health metric has an alert', () => {
    const used = new Set(alerts().flatMap((a) => metricIdentifiers(a.expr)).map(baseMetricName));
    for (const name of [
      MetricNames.modelDesiredReplicas, MetricNames.modelReadyReplicas, MetricNames.modelConsecutiveStartFailures,
      MetricNames.modelParked, MetricNames.modelUnplaceable, MetricNames.nodeReachable, MetricNames.nodeEngineInstalls,
      MetricNames.nodeEngineInstallFailuresTotal, MetricNames.leader, MetricNames.reconcileLastSuccessTimestampSeconds,
      MetricNames.specValid, MetricNames.specRejectedRevisionInfo, MetricNames.gitSyncLastSuccessTimestampSeconds,
      MetricNames.statusWriteLastSuccessTimestampSeconds, MetricNames.certificateExpiryTimestampSeconds,
      MetricNames.certificateReadErrors, MetricNames.routerRequestsTotal, MetricNames.forgedEpochs,
    ]) assert.ok(used.has(name), `${name} is used by an alert`);
  });
});

describe('dashboard (provisionable Grafana JSON)', () => {
  const dash = JSON.parse(readFileSync(dashboardFile, 'utf8')) as {
    uid: string;
    title: string;
    id: unknown;
    schemaVersion: number;
    templating: { list: { name: string; type: string; query: unknown }[] };
    panels: { id: number; type: string; title: string; gridPos: { x: number; y: number; w: number; h: number }; datasource?: { uid: string }; targets?: { expr: string; datasource?: { uid: string } }[] }[];
  };

  it('has a uid, a schema version and a ${datasource} Prometheus variable used by every query', () => {
    assert.equal(dash.uid, 'llmgw-fleet');
    assert.equal(dash.id, null);
    assert.ok(dash.schemaVersion >= 36 && dash.schemaVersion <= 41, String(dash.schemaVersion));
    const ds = dash.templating.list.find((v) => v.name === 'datasource');
    assert.ok(ds && ds.type === 'datasource' && ds.query === 'prometheus');
    const ids = new Set<number>();
    for (const p of dash.panels) {
      assert.ok(!ids.has(p.id), `panel id ${p.id} unique`);
      ids.add(p.id);
      assert.ok(p.gridPos.x + p.gridPos.w <= 24, `${p.title} fits the grid`);
      if (p.type === 'row') continue;
      assert.equal(p.datasource?.uid, '${datasource}', p.title);
      assert.ok(p.targets && p.targets.length > 0, `${p.title} has queries`);
      for (const t of p.targets) assert.equal(t.datasource?.uid, '${datasource}', p.title);
    }
    const titles = dash.panels.map((p) => p.title);
    for (const t of ['Models by state', 'Parked models', 'Unplaceable models', 'Ready vs desired replicas', 'Requests by code', 'Request duration', 'Time to first token', 'Node memory available', 'Reconcile duration']) {
      assert.ok(titles.includes(t), `panel ${t}`);
    }
  });

  it('has only valid PromQL (checked by promtool as recording rules)', () => {
    const exprs = dashboard_exprs_for_promtool();
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-dash-'));
    try {
      const file = { groups: [{ name: 'dashboard', rules: exprs.map((expr, i) => ({ record: `llmgw_dashboard:expr${i}`, expr })) }] };
      writeFileSync(join(dir, 'dashboard.rules.yaml'), stringify(file));
      const res = promtool(['check', 'rules', 'dashboard.rules.yaml'], dir);
      assert.equal(res.status, 0, res.output);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  function dashboard_exprs_for_promtool(): string[] {
    return dashboardExprs()
      .filter((e) => !/^label_values\(/.test(e))
      .map((e) => e.replaceAll('$__rate_interval', '5m').replaceAll('$job', '.+'));
  }
});

/** A model as the reconciler publishes it (only what metrics read matters). */
function modelView(name: string, over: Partial<ModelView>): ModelView {
  return {
    name,
    spec: {
      name, file: `models/${name}.yaml`, source: `https://example.com/${name}.gguf`, sha256: '0'.repeat(64), profile: 'chat',
      scaling: { mode: 'replicas', replicas: 1 }, aliases: [], nodeSelector: {}, memoryBytes: null, maxConcurrency: null, routing: 'affinity', queue: { max: 64, timeoutMs: 60_000 }, token: null, rollout: null, digest: `digest-${name}`,
    },
    phase: 'ready', desired: 1, ready: 1, replicas: [], consecutiveFailures: 0, lastError: null, parked: null, unplaceable: null,
    nextAttemptAt: null, memoryBytes: null, lastHandledRetry: null,
    ...over,
  };
}

const UNKNOWN_ARCH = { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: "unknown model architecture: 'zzz'" };
const UNPLACEABLE = unplaceableView('needs 14.2 GiB; largest free is 11.8 GiB on cpu-02; 3 nodes checked')!;

/** The parking scenario as a snapshot: a parked model, an oversize one, a healthy and an idle one. */
const parkingSnapshot: FleetSnapshot = {
  at: Date.parse('2025-01-01T00:00:00.000Z'),
  leader: true,
  control: STANDALONE,
  appliedRevision: 'abc123',
  specValid: true,
  rejected: null,
  lastSyncOk: Date.parse('2025-01-01T00:00:00.000Z'),
  lastSyncError: null,
  lastStatusWriteOk: Date.parse('2025-01-01T00:00:00.000Z'),
  stateError: null,
  models: [
    modelView('new-arch', { phase: 'parked', ready: 0, consecutiveFailures: 5, lastError: UNKNOWN_ARCH, parked: { since: Date.parse('2025-01-01T00:00:00.000Z'), lastError: UNKNOWN_ARCH } }),
    modelView('huge', { phase: 'unplaceable', ready: 0, unplaceable: UNPLACEABLE }),
    modelView('ok', {}),
    modelView('idle', { phase: 'idle', desired: 0, ready: 0 }),
  ],
  nodes: [
    { name: 'cpu-01', reachable: true, error: null, memory: { totalBytes: 16 * 2 ** 30, availableBytes: 11 * 2 ** 30 }, diskFreeBytes: null, engines: ['llama-cpp@b5000'], engineInstallFailures: {}, replicas: 1 },
  ],
  lastPass: { startedAt: Date.parse('2025-01-01T00:00:00.000Z'), durationMs: 120, result: 'ok', error: null, actions: 1 },
};

const quote = (v: string): string => JSON.stringify(v);

describe('alert rules and dashboard against the series the code exports', () => {
  it('the parking scenario\'s scrape fires exactly the model alerts, and the dashboard queries show it', async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    metrics.applySnapshot(parkingSnapshot);
    // six refusals of the parked model and six answers of the ready one, a minute (the counters below)
    for (let i = 0; i < 6; i++) {
      metrics.router.request('new-arch', 503, 0.01, 'MODEL_PARKED');
      metrics.router.request('ok', 200, 0.5, '');
    }
    const samples = parseExposition(await metrics.registry.metrics());
    // The scrape, as Prometheus stores it (job and instance added), constant for 30 minutes.
    const input_series = samples.map((smp) => {
      const labels = { ...smp.labels, job: 'llmgw', instance: 'c1:9464' };
      const body = Object.entries(labels).map(([k, v]) => `${k}=${quote(v)}`).join(',');
      // counters of requests grow by their value each minute; everything else stays as scraped
      const values = smp.name === 'llmgw_router_requests_total' ? `0+${smp.value}x30` : `${smp.value}x30`;
      return { series: `${smp.name}{${body}}`, values };
    });

    const dash = JSON.parse(readFileSync(dashboardFile, 'utf8')) as { panels: { title: string; targets?: { expr: string }[] }[] };
    const panelExpr = (title: string): string => {
      const expr = dash.panels.find((p) => p.title === title)?.targets?.[0]?.expr;
      assert.ok(expr, `panel ${title}`);
      return expr.replaceAll('$__rate_interval', '5m').replaceAll('$job', '.+');
    };

    const test = {
      rule_files: ['llmgw.rules.yaml'],
      evaluation_interval: '1m',
      tests: [{
        interval: '1m',
        input_series,
        promql_expr_test: [
          {
            // Every alert firing 11 minutes in: the parked model, the oversize model, both not serving, and the parked one's refusals.
            expr: 'count by (alertname, model) (ALERTS{alertstate="firing"})',
            eval_time: '11m',
            exp_samples: [
              { labels: '{alertname="LlmgwModelNotServing", model="new-arch"}', value: 1 },
              { labels: '{alertname="LlmgwModelNotServing", model="huge"}', value: 1 },
              { labels: '{alertname="LlmgwModelParked", model="new-arch"}', value: 1 },
              { labels: '{alertname="LlmgwModelUnplaceable", model="huge"}', value: 1 },
              // every request for the parked model is refused with a 503 (reason MODEL_PARKED), which
              // LlmgwModelParked covers: LlmgwRouter5xxRatio leaves those refusals out and stays quiet
            ],
          },
          { expr: panelExpr('Models not serving'), eval_time: '11m', exp_samples: [{ labels: '{}', value: 2 }] },
          { expr: panelExpr('Parked'), eval_time: '11m', exp_samples: [{ labels: '{}', value: 1 }] },
          { expr: panelExpr('Unplaceable'), eval_time: '11m', exp_samples: [{ labels: '{}', value: 1 }] },
          {
            expr: panelExpr('Parked models'),
            eval_time: '11m',
            exp_samples: [{ labels: `{model="new-arch", code="${UNKNOWN_ARCH.code}"}`, value: 5 }],
          },
          {
            expr: panelExpr('Unplaceable models'),
            eval_time: '11m',
            exp_samples: [{ labels: `{model="huge", code=${quote(UNPLACEABLE.code)}}`, value: 1 }],
          },
          {
            expr: panelExpr('Models by state'),
            eval_time: '11m',
            // one series a model, for its current phase: the phases no model is in are absent
            exp_samples: MODEL_STATES.filter((state) => ['parked', 'unplaceable', 'ready', 'idle'].includes(state)).map((state) => ({ labels: `{state="${state}"}`, value: 1 })),
          },
          {
            expr: panelExpr('Model states'),
            eval_time: '11m',
            exp_samples: [
              { labels: '{model="new-arch", state="parked"}', value: 1 },
              { labels: '{model="huge", state="unplaceable"}', value: 1 },
              { labels: '{model="ok", state="ready"}', value: 1 },
              { labels: '{model="idle", state="idle"}', value: 1 },
            ],
          },
          {
            // refusals by their catalogue code; the ready model's answers (reason "") are not refusals
            expr: panelExpr('Refused requests by reason'),
            eval_time: '11m',
            exp_samples: [{ labels: '{model="new-arch", reason="MODEL_PARKED"}', value: 0.1 }],
          },
          { expr: panelExpr('Requests by code'), eval_time: '11m', exp_samples: [{ labels: '{code="200"}', value: 0.1 }, { labels: '{code="503"}', value: 0.1 }] },
        ],
      }],
    };
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-scrape-alerts-'));
    try {
      cpSync(rulesFile, join(dir, 'llmgw.rules.yaml'));
      writeFileSync(join(dir, 'scrape.test.yaml'), stringify(test, { lineWidth: 0 }));
      const res = promtool(['test', 'rules', 'scrape.test.yaml'], dir);
      assert.equal(res.status, 0, res.output);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
