/** Which models an /admin/v1/models answer lists (pure): phase, name glob, pages; and ctl status at 10,000 models. */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import type { ModelPhase, ModelView } from '../../src/reconciler/view.js';
import { globRegExp, pickModels } from '../../src/wire/models-query.js';
import type { ModelJson, ModelsJson, StatusJson } from '../../src/wire/shape.js';
import { ATTENTION_PHASES, renderStatus, STATUS_ATTENTION_LIMIT, STATUS_HEALTHY_LIMIT } from '../../src/format/ctl-format.js';

const view = (name: string, phase: ModelPhase, aliases: string[] = []): ModelView => ({ name, phase, spec: { aliases } }) as unknown as ModelView;
const names = (p: { models: readonly ModelView[] }): string[] => p.models.map((m) => m.name);

describe('pickModels', () => {
  const models = [view('qwen-7b', 'ready', ['chat']), view('kev', 'parked'), view('huge', 'unplaceable'), view('qwen-0.5b', 'idle'), view('llama-3', 'ready')];

  const cases: [string, Parameters<typeof pickModels>[1], string[], number, string | null][] = [
    ['no query: every model, by name', {}, ['huge', 'kev', 'llama-3', 'qwen-0.5b', 'qwen-7b'], 5, null],
    ['one phase', { phases: ['parked'] }, ['kev'], 1, null],
    ['several phases', { phases: ['parked', 'unplaceable'] }, ['huge', 'kev'], 2, null],
    ['a name glob', { name: 'qwen-*' }, ['qwen-0.5b', 'qwen-7b'], 2, null],
    ['a glob matches aliases too', { name: 'ch?t' }, ['qwen-7b'], 1, null],
    ['glob characters other than * and ? are literal', { name: 'qwen-0.5*' }, ['qwen-0.5b'], 1, null],
    ['a page', { limit: 2 }, ['huge', 'kev'], 5, 'kev'],
    ['the next page', { limit: 2, after: 'kev' }, ['llama-3', 'qwen-0.5b'], 5, 'qwen-0.5b'],
    ['the last page', { limit: 2, after: 'qwen-0.5b' }, ['qwen-7b'], 5, null],
    ['after the last name', { after: 'zzz' }, [], 5, null],
    ['after a name that is gone: the names after it', { after: 'j' }, ['kev', 'llama-3', 'qwen-0.5b', 'qwen-7b'], 5, null],
    ['filters and a page together', { phases: ['ready', 'idle'], limit: 1 }, ['llama-3'], 3, 'llama-3'],
  ];
  for (const [what, q, want, total, next] of cases) {
    test(what, () => {
      const p = pickModels(models, q);
      assert.deepEqual(names(p), want);
      assert.equal(p.total, total);
      assert.equal(p.next, next);
    });
  }

  test('globRegExp anchors and escapes', () => {
    assert.ok(globRegExp('a.b').test('a.b'));
    assert.ok(!globRegExp('a.b').test('axb'));
    assert.ok(!globRegExp('qwen').test('qwen-7b'));
    assert.ok(globRegExp('(x)+[y]').test('(x)+[y]'));
  });

  test('paging visits every model once', () => {
    const many = Array.from({ length: 1003 }, (_, i) => view(`m-${String(i).padStart(4, '0')}`, i % 7 ? 'ready' : 'parked'));
    const seen: string[] = [];
    let after: string | undefined;
    for (;;) {
      const p = pickModels(many, { limit: 100, ...(after !== undefined ? { after } : {}) });
      seen.push(...names(p));
      if (p.next === null) break;
      after = p.next;
    }
    assert.deepEqual(seen, many.map((m) => m.name));
  });
});

describe('ctl status at 10,000 models', () => {
  const at = '2026-12-01T12:00:00.000Z';
  const model = (i: number, phase: ModelJson['phase']): ModelJson =>
    ({ name: `m-${String(i).padStart(5, '0')}`, phase, desired: 1, ready: phase === 'ready' ? 1 : 0, scaling: { mode: 'replicas', replicas: 1 }, consecutiveFailures: 0, lastError: null, parked: null, unplaceable: null, replicas: [], digest: 'd'.repeat(64), revision: null }) as unknown as ModelJson;
  const status = {
    at, revision: 'a'.repeat(40), spec: { valid: true, rejected: null }, control: { mode: 'standalone', instance: { id: 'i', label: 'i' }, leader: { id: 'i', label: 'i', since: null, epoch: null, self: true }, notActing: null, etcd: null },
    sync: { lastOk: at, error: null }, stateError: null, lastPass: null,
    models: { total: 10_000, desired: 10_000, ready: 9_990, byPhase: { parked: 0, unplaceable: 0, failing: 0, starting: 10, pending: 0, degraded: 0, ready: 9_990, idle: 0 } },
    nodes: { total: 100, reachable: 100, unreachable: [] },
  } as unknown as StatusJson;

  test('the healthy models are a page and a count, what needs attention is listed', () => {
    const attention: ModelsJson = { at, revision: status.revision, models: Array.from({ length: 10 }, (_, i) => model(i, 'starting')), total: 10, next: null };
    const healthy: ModelsJson = { at, revision: status.revision, models: Array.from({ length: STATUS_HEALTHY_LIMIT }, (_, i) => model(100 + i, 'ready')), total: 9_990, next: 'm-00149' };
    const text = renderStatus(status, attention, healthy);
    assert.match(text, /NOT READY \(10\)/);
    assert.match(text, new RegExp(`READY / IDLE \\(${STATUS_HEALTHY_LIMIT}\\)`));
    assert.match(text, /… 9940 more models in ready,idle: `llmgw ctl models --phase ready,idle`/);
    assert.ok(text.split('\n').length < 100, 'readable: under 100 lines');
    assert.ok(ATTENTION_PHASES.length > 0 && STATUS_ATTENTION_LIMIT >= 100);
  });
});
