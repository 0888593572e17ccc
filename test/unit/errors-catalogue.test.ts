/**
 * Keeps the documentation, the catalogue, the metric names and the alert rules in step (after
 * fastify's test/internals/errors.test.js):
 * - docs/reasons.md's table ↔ src/errors/catalogue.ts (every code both ways, status, flags, OpenAI
 *   type/code, hint);
 * - docs/metrics.md's metrics table ↔ the metrics llmgw exports (name, type, labels) ↔
 *   src/metrics/names.ts; its alerts table ↔ alerts/*.rules.yaml (name, severity, for);
 * - each reason code, metric and alert has exactly one row in all of README.md and docs/ (on its page);
 * - alert rules, their promtool tests and the dashboard select only metrics and labels that exist;
 * - every catalogue code is raised somewhere in src/ (TypeScript already checks the converse for
 *   `new LlmgwError('X'`), and every code the node scripts raise in shell is in the catalogue.
 * The tables are parsed as markdown; when one drifts, the failure names the page and section and
 * prints the row to paste.
 */
import { strict as assert } from 'node:assert';
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';
import ts from 'typescript';
import { parse } from 'yaml';
import { Reasons, type Reason } from '../../src/errors/catalogue.js';
import { createMetrics } from '../../src/metrics/registry.js';
import { HISTOGRAM_NAMES, METRIC_NAMES, MetricNames, baseMetricName } from '../../src/metrics/names.js';
import { codeCell as code, markdownPages, readPage, section, tableRows } from '../harness/markdown.js';
import { repoRoot } from '../harness/paths.js';
import { selectors, templateQueries, type Selector } from '../harness/promql.js';

/** Where each table lives: the page and the heading its table sits under. */
const REASONS = { page: 'docs/reasons.md', heading: '# Reasons' } as const;
const METRICS = { page: 'docs/metrics.md', heading: '## Every metric' } as const;
const ALERTS = { page: 'docs/metrics.md', heading: '## Alerts' } as const;
const at = (t: { page: string; heading: string }): string => `${t.page}, the table under "${t.heading}"`;

/** A table cell's text as markdown: pipes escaped, `<` as an entity (so `<model>` is not an HTML tag). */
const mdText = (s: string): string => s.replaceAll('|', '\\|').replaceAll('<', '&lt;');
const yesNo = (b: boolean): string => (b ? 'yes' : 'no');

function reasonRow(c: string, r: Reason): string {
  const oa = r.openai ? `\`${r.openai.type}\` / \`${r.openai.code}\`` : '–';
  return `| \`${c}\` | ${r.http} | ${yesNo(r.retryable)} | ${yesNo(r.countsTowardParking)} | ${yesNo(r.avoidsNode)} | ${oa} | ${mdText(r.hint)} |`;
}

/** Per name, the pages whose table rows start with it (`| \`NAME\` |`), across README.md and docs/. */
function rowsByName(names: ReadonlySet<string>): Map<string, string[]> {
  const found = new Map<string, string[]>();
  for (const page of markdownPages()) {
    for (const cells of tableRows(readPage(page))) {
      const c = code(cells[0] ?? '');
      if (c !== null && names.has(c)) found.set(c, [...(found.get(c) ?? []), page]);
    }
  }
  return found;
}

/** Each name has one row in all the docs, on `home`'s page: the problems otherwise. */
function documentedOnce(what: string, names: readonly string[], home: { page: string; heading: string }): string[] {
  const found = rowsByName(new Set(names));
  const problems: string[] = [];
  for (const n of names) {
    const pages = found.get(n) ?? [];
    if (pages.length > 1) problems.push(`${what} ${n} has ${pages.length} rows (${pages.join(', ')}): keep only the one in ${at(home)}`);
    else if (pages.length === 1 && pages[0] !== home.page) problems.push(`${what} ${n} has its row in ${pages[0]}: move it to ${at(home)}`);
  }
  return problems;
}

/** Where a new name's row goes: after the last documented name before it in `order` (the order its source declares them in). */
function after(name: string, order: readonly string[], documented: ReadonlySet<string>): string {
  const before = order.slice(0, order.indexOf(name)).filter((n) => documented.has(n));
  return before.length > 0 ? ` after the \`${before[before.length - 1]}\` row` : ' as the first row';
}

describe('docs/reasons.md ↔ catalogue', () => {
  const rows = tableRows(section(readPage(REASONS.page), REASONS.heading, REASONS.page));
  const header = rows[0];
  const codes = Object.keys(Reasons);

  it('has the columns code, HTTP, retryable, counts toward parking, avoids the node, OpenAI type / code, hint', () => {
    assert.deepEqual(header, ['code', 'HTTP', 'retryable', 'counts toward parking', 'avoids the node', 'OpenAI type / code', 'hint']);
  });

  it('lists every catalogue code once, with its status, flags, OpenAI type/code and hint, and no code the catalogue lacks', () => {
    const documented = new Map<string, string[]>();
    const problems: string[] = [];
    for (const cells of rows.slice(1)) {
      const c = code(cells[0] ?? '');
      if (c === null) {
        problems.push(`${at(REASONS)}: a row whose first cell is not a \`CODE\`: | ${cells.join(' | ')} |`);
        continue;
      }
      if (documented.has(c)) problems.push(`${at(REASONS)}: ${c} is listed twice`);
      documented.set(c, cells);
    }
    const have = new Set(documented.keys());
    for (const [c, r] of Object.entries(Reasons)) {
      const cells = documented.get(c);
      const want = reasonRow(c, r);
      if (!cells) problems.push(`${c} is missing: add this row to ${at(REASONS)}${after(c, codes, have)}:\n${want}`);
      else if (`| ${cells.join(' | ')} |` !== want) problems.push(`${c} differs from the catalogue: replace its row in ${at(REASONS)} with\n${want}\n  (now: | ${cells.join(' | ')} |)`);
    }
    for (const c of documented.keys()) if (!Object.hasOwn(Reasons, c)) problems.push(`${c} is in ${at(REASONS)} but not in src/errors/catalogue.ts: remove the row`);
    assert.ok(documented.size >= 70, `only ${documented.size} codes documented`);
    assert.deepEqual(problems, []);
  });

  it('documents each code exactly once in README.md and docs/', () => {
    assert.deepEqual(documentedOnce('reason', codes, REASONS), []);
  });
});

describe('docs/metrics.md ↔ exported metrics ↔ names.ts ↔ alerts', () => {
  const registry = createMetrics({ defaultMetrics: false }).registry;
  const exported = new Map(registry.getMetricsAsArray().map((m) => [(m as unknown as { name: string }).name, m as unknown as { name: string; type?: string; labelNames?: readonly string[] }]));
  const metricsPage = readPage(METRICS.page);

  it('exports exactly the metrics names.ts lists', () => {
    assert.deepEqual([...exported.keys()].sort(), [...METRIC_NAMES]);
  });

  it('the metrics table lists every metric with its type and labels, and nothing else', async () => {
    const rows = tableRows(section(metricsPage, METRICS.heading, METRICS.page));
    assert.deepEqual(rows[0], ['metric', 'type', 'labels', 'what it says']);
    const documented = new Map(rows.slice(1).map((cells) => [code(cells[0] ?? '') ?? cells[0]!, cells]));
    const have = new Set(documented.keys());
    const problems: string[] = [];
    for (const name of METRIC_NAMES) {
      const m = exported.get(name)!;
      const { type, help } = await (m as unknown as { get(): Promise<{ type: string; help: string }> }).get();
      const labels = (m.labelNames ?? []).map((l) => `\`${l}\``).join(', ') || '–';
      const want = `| \`${name}\` | ${type} | ${labels} | ${mdText(help)} |`;
      const cells = documented.get(name);
      if (!cells) problems.push(`${name} is missing: add this row to ${at(METRICS)}${after(name, Object.values(MetricNames), have)}:\n${want}`);
      // the description is the reader's; name, type and labels must match
      else if (cells[1] !== type || cells[2] !== labels) problems.push(`${name} differs from the code: in ${at(METRICS)} its type and labels are | ${cells[1]} | ${cells[2]} |, the code's: | ${type} | ${labels} |`);
    }
    for (const name of documented.keys()) if (!(METRIC_NAMES as readonly string[]).includes(name)) problems.push(`${name} is in ${at(METRICS)} but llmgw does not export it: remove the row`);
    assert.deepEqual(problems, []);
  });

  it('documents each metric exactly once in README.md and docs/', () => {
    assert.deepEqual(documentedOnce('metric', METRIC_NAMES, METRICS), []);
  });

  const labelsOf = (metric: string): Set<string> => {
    const base = baseMetricName(metric);
    const s = new Set(['job', 'instance', ...(exported.get(base)?.labelNames ?? [])]);
    if (base !== metric && metric.endsWith('_bucket')) s.add('le');
    return s;
  };

  /** Problems with the selectors of one expression: unknown metrics, labels the metric does not have. */
  function check(where: string, sel: readonly Selector[], allowed: ReadonlySet<string> = new Set()): string[] {
    const out: string[] = [];
    for (const s of sel) {
      if (allowed.has(s.metric)) continue;
      const base = baseMetricName(s.metric);
      if (!(METRIC_NAMES as readonly string[]).includes(base)) {
        out.push(`${where}: ${s.metric} is not in src/metrics/names.ts`);
        continue;
      }
      if (base !== s.metric) assert.ok((HISTOGRAM_NAMES as readonly string[]).includes(base), `${where}: ${s.metric}`);
      const have = labelsOf(s.metric);
      for (const l of s.labels) if (!have.has(l)) out.push(`${where}: ${s.metric} has no label "${l}" (it has ${[...have].join(', ')})`);
    }
    return out;
  }

  interface Rule { alert?: string; record?: string; expr: string; for?: string; labels?: Record<string, string>; annotations?: Record<string, string> }
  const alertsDir = join(repoRoot, 'alerts');
  const ruleFiles = readdirSync(alertsDir).filter((f) => f.endsWith('.yaml') && !f.endsWith('.test.yaml'));
  const testFiles = readdirSync(alertsDir).filter((f) => f.endsWith('.test.yaml'));

  it('every metric an alert rule selects (expressions and annotation queries) is in names.ts, with labels it has', () => {
    assert.ok(ruleFiles.length >= 1);
    const problems: string[] = [];
    let selected = 0;
    for (const f of ruleFiles) {
      const doc = parse(readFileSync(join(alertsDir, f), 'utf8')) as { groups: { rules: Rule[] }[] };
      for (const r of doc.groups.flatMap((g) => g.rules)) {
        const name = `${f} ${r.alert ?? r.record}`;
        const sel = selectors(r.expr);
        assert.ok(sel.length > 0, `${name} selects no metric`);
        selected += sel.length;
        problems.push(...check(`${name} expr`, sel));
        for (const [k, v] of Object.entries(r.annotations ?? {})) for (const q of templateQueries(v)) problems.push(...check(`${name} ${k}`, selectors(q)));
      }
    }
    assert.ok(selected > 20, `${selected} selectors`);
    assert.deepEqual(problems, []);
  });

  it('the alerts table lists every alert rule with its severity and `for`, and nothing else', () => {
    const rules = ruleFiles.flatMap((f) =>
      (parse(readFileSync(join(alertsDir, f), 'utf8')) as { groups: { rules: Rule[] }[] }).groups.flatMap((g) => g.rules).filter((r) => r.alert !== undefined),
    );
    assert.ok(rules.length >= 10, `${rules.length} alert rules`);
    const names = rules.map((r) => r.alert!);
    const rows = tableRows(section(metricsPage, ALERTS.heading, ALERTS.page));
    assert.deepEqual(rows[0], ['alert', 'severity', 'for', 'fires when']);
    const documented = new Map(rows.slice(1).map((cells) => [code(cells[0] ?? '') ?? cells[0]!, cells]));
    const have = new Set(documented.keys());
    const problems: string[] = [];
    for (const r of rules) {
      const want = [r.labels?.['severity'] ?? '–', r.for ?? '–'];
      const cells = documented.get(r.alert!);
      if (!cells) problems.push(`${r.alert} is missing: add this row to ${at(ALERTS)}${after(r.alert!, names, have)} (the last cell in your words):\n| \`${r.alert}\` | ${want.join(' | ')} | WHAT FIRES IT |`);
      else if (cells[1] !== want[0] || cells[2] !== want[1]) problems.push(`${r.alert} differs from its rule: in ${at(ALERTS)} severity and for are | ${cells[1]} | ${cells[2]} |, the rule's: | ${want.join(' | ')} |`);
    }
    for (const n of documented.keys()) if (!names.includes(n)) problems.push(`${n} is in ${at(ALERTS)} but no rule in alerts/ has that alert: remove the row`);
    problems.push(...documentedOnce('alert', names, ALERTS));
    assert.deepEqual(problems, []);
  });

  /** Series Prometheus makes itself: the scrape's `up` and the rules' alerts. */
  const PROMETHEUS_OWN = new Set(['up', 'ALERTS', 'ALERTS_FOR_STATE']);

  it('the promtool tests feed only series llmgw exports (or Prometheus makes), with their labels', () => {
    const problems: string[] = [];
    let series = 0;
    for (const f of testFiles) {
      const doc = parse(readFileSync(join(alertsDir, f), 'utf8')) as { tests: { input_series?: { series: string }[]; promql_expr_test?: { expr: string }[] }[] };
      for (const t of doc.tests) {
        for (const s of t.input_series ?? []) {
          series++;
          problems.push(...check(`${f} input series`, selectors(s.series), PROMETHEUS_OWN));
        }
        for (const e of t.promql_expr_test ?? []) problems.push(...check(`${f} promql_expr_test`, selectors(e.expr), PROMETHEUS_OWN));
      }
    }
    assert.ok(series > 20, `${series} input series`);
    assert.deepEqual(problems, []);
  });

  it('the dashboard\'s queries select only metrics llmgw exports, with their labels', () => {
    const exprs: string[] = [];
    const walk = (v: unknown, key: string): void => {
      if (Array.isArray(v)) v.forEach((x) => walk(x, key));
      else if (v && typeof v === 'object') for (const [k, x] of Object.entries(v)) walk(x, k);
      else if (typeof v === 'string' && (key === 'expr' || key === 'query' || key === 'definition')) exprs.push(v);
    };
    walk(JSON.parse(readFileSync(join(repoRoot, 'dashboards', 'llmgw-fleet.json'), 'utf8')), '');
    const promql = exprs.filter((e) => /llmgw_/.test(e));
    assert.ok(promql.length > 20);
    // Grafana's label_values(SELECTOR, LABEL) holds a selector and a label name
    const problems = promql.flatMap((e) => check('dashboard', selectors(/^label_values\((.*),\s*[a-zA-Z_]+\)$/.exec(e)?.[1] ?? e)));
    assert.deepEqual(problems, []);
  });
});

describe('catalogue ↔ src/', () => {
  /**
   * Codes in the catalogue that src/ does not raise yet, and why. An entry that src/ does use is
   * stale and fails the test: remove it.
   */
  const UNUSED_BY_DESIGN: Record<string, string> = {};

  const srcDir = join(repoRoot, 'src');
  const files = (dir: string): string[] =>
    readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : []));
  /** The node scripts' way of failing with a reason: `llmgw_fail CODE "message"` (src/nodes/ops/). */
  const SHELL_FAIL = /\bllmgw_(?:build_)?fail\s+([A-Za-z][A-Za-z0-9_]*)/g;

  /** Per code, the src/ files that use it as a string literal (not a comment), and the codes shell scripts raise. */
  function scan(): { used: Map<string, Set<string>>; shellCodes: Map<string, string> } {
    const used = new Map<string, Set<string>>();
    const shellCodes = new Map<string, string>();
    const use = (c: string, file: string): void => {
      if (!used.has(c)) used.set(c, new Set());
      used.get(c)!.add(file);
    };
    for (const path of files(srcDir)) {
      const file = relative(repoRoot, path);
      if (file === join('src', 'errors', 'catalogue.ts')) continue;
      const sf = ts.createSourceFile(path, readFileSync(path, 'utf8'), ts.ScriptTarget.Latest, false, ts.ScriptKind.TS);
      const visit = (n: ts.Node): void => {
        if (ts.isStringLiteralLike(n) || ts.isTemplateHead(n) || ts.isTemplateMiddle(n) || ts.isTemplateTail(n)) {
          const text = n.text;
          if (Object.hasOwn(Reasons, text)) use(text, file);
          for (const m of text.matchAll(SHELL_FAIL)) {
            shellCodes.set(m[1]!, file);
            use(m[1]!, file);
          }
        } else if (ts.isPropertyAccessExpression(n) && ts.isIdentifier(n.expression) && n.expression.text === 'Reasons') {
          use(n.name.text, file);
        }
        ts.forEachChild(n, visit);
      };
      visit(sf);
    }
    return { used, shellCodes };
  }

  it('every catalogue code is raised somewhere in src/, except the documented ones; no exception is stale', () => {
    const { used } = scan();
    const unused = Object.keys(Reasons).filter((c) => !used.has(c) && !Object.hasOwn(UNUSED_BY_DESIGN, c));
    assert.deepEqual(unused, [], 'catalogue codes nothing in src/ uses: use them, delete them, or document why in UNUSED_BY_DESIGN');
    const stale = Object.keys(UNUSED_BY_DESIGN).filter((c) => used.has(c));
    assert.deepEqual(stale, [], `UNUSED_BY_DESIGN entries that src/ uses now (${stale.map((c) => [...used.get(c)!].join(' ')).join('; ')}): remove them`);
    for (const c of Object.keys(UNUSED_BY_DESIGN)) assert.ok(Object.hasOwn(Reasons, c), `UNUSED_BY_DESIGN names ${c}, which is not in the catalogue`);
    // an entry says why a code is in the catalogue while nothing raises it
    assert.ok(used.size >= 60, `the scan found only ${used.size} codes`);
  });

  it('every code the node scripts raise (llmgw_fail CODE) is in the catalogue (TypeScript cannot check shell)', () => {
    const { shellCodes } = scan();
    assert.ok(shellCodes.size >= 10, `found ${shellCodes.size} shell codes`);
    const unknown = [...shellCodes].filter(([c]) => !Object.hasOwn(Reasons, c)).map(([c, f]) => `${c} (${f})`);
    assert.deepEqual(unknown, []);
  });
});

describe('the PromQL lexer the checks above use', () => {
  const table: [string, Selector[]][] = [
    ['llmgw_leader == 1', [{ metric: 'llmgw_leader', labels: [] }]],
    [
      'sum by (job, model) (rate(llmgw_router_requests_total{code=~"5..", reason!=""}[5m])) / sum by (job, model) (rate(llmgw_router_requests_total[5m])) > 0.05',
      [{ metric: 'llmgw_router_requests_total', labels: ['code', 'reason'] }, { metric: 'llmgw_router_requests_total', labels: [] }],
    ],
    [
      'llmgw_model_desired_replicas > 0 unless on (job, instance, model) llmgw_model_ready_replicas offset 5m and on (job) (llmgw_leader == 1)',
      [{ metric: 'llmgw_model_desired_replicas', labels: [] }, { metric: 'llmgw_model_ready_replicas', labels: [] }, { metric: 'llmgw_leader', labels: [] }],
    ],
    [
      'histogram_quantile(0.95, sum by (le, model) (rate(llmgw_router_request_duration_seconds_bucket{job=~"a|b",model="x{y}"}[$__rate_interval])))',
      [{ metric: 'llmgw_router_request_duration_seconds_bucket', labels: ['job', 'model'] }],
    ],
    ['count by (alertname) (ALERTS{alertstate="firing"}) # a comment llmgw_not_a_metric', [{ metric: 'ALERTS', labels: ['alertstate'] }]],
    ['time() - max without (instance) (llmgw_git_sync_last_success_timestamp_seconds) > 1e3', [{ metric: 'llmgw_git_sync_last_success_timestamp_seconds', labels: [] }]],
  ];
  for (const [expr, want] of table) {
    it(expr.slice(0, 60), () => assert.deepEqual(selectors(expr), want));
  }

  it('finds the queries of an annotation template', () => {
    assert.deepEqual(
      templateQueries('x {{ with printf "llmgw_model_info{model=%q}" $labels.model | query }}y{{ end }} {{ with printf `topk(1, llmgw_leader{job=%q})` $labels.job | query }}{{ end }}'),
      ['llmgw_model_info{model="x"}', 'topk(1, llmgw_leader{job="x"})'],
    );
  });
});
