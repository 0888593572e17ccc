/**
 * What the real `llmgw serve` holds per model (#37 item 9): heap snapshots of a serve at 10 and at
 * 1,000 idle on-demand models (test/harness/scale-fleet.ts, started as the service starts it), and
 * the live V8 heap objects the 990 more models added, counted (a snapshot is taken after a full
 * collection: live objects only). A count, not a byte or time bound: a model's objects held twice,
 * or a cache that keeps something per model and pass, shows as more objects a model. Measured
 * 2026-12-07: ~40 a model (objects ~18, strings ~14, numbers 5, arrays 3), twice in a row.
 */
import { strict as assert } from 'node:assert';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { makeScaleFleet, serveScaleFleet, waitFor } from '../harness/scale-fleet.js';

/** Objects a model may add to the serve's live heap. */
const MAX_OBJECTS_PER_MODEL = 60;

interface Counts {
  readonly total: number;
  readonly byType: Record<string, number>;
}

/** The live objects of a serve of `models` idle on-demand models once its first pass is done. */
async function liveObjects(models: number): Promise<Counts> {
  const fleet = await makeScaleFleet(models, { hot: false });
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-heap-'));
  const s = await serveScaleFleet(fleet, { nodeArgs: ['--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${dir}`] });
  try {
    await waitFor('the first pass', 300_000, s, async () => ((await (await fetch(`${s.adminUrl}/admin/v1/status`)).json()) as { lastPass: unknown }).lastPass);
    // the pass's status-branch write and the first scrape, as a running serve has done
    await (await fetch(`${s.adminUrl}/metrics`)).text();
    s.child.kill('SIGUSR2');
    const snapshot = await waitFor('the heap snapshot', 120_000, s, async () => {
      const file = readdirSync(dir).find((f) => f.endsWith('.heapsnapshot'));
      if (!file) return null;
      try {
        return JSON.parse(readFileSync(join(dir, file), 'utf8')) as { snapshot: { meta: { node_fields: string[]; node_types: [string[]] } }; nodes: number[] };
      } catch {
        return null; // still being written
      }
    });
    const { node_fields: fields, node_types: [types] } = snapshot.snapshot.meta;
    const typeAt = fields.indexOf('type');
    const byType: Record<string, number> = {};
    for (let i = typeAt; i < snapshot.nodes.length; i += fields.length) {
      const t = types[snapshot.nodes[i]!]!;
      byType[t] = (byType[t] ?? 0) + 1;
    }
    return { total: snapshot.nodes.length / fields.length, byType };
  } finally {
    await s.stop();
    fleet.cleanup();
    rmSync(dir, { recursive: true, force: true });
  }
}

describe('the serve heap per model', () => {
  it(`1,000 idle on-demand models hold at most ${MAX_OBJECTS_PER_MODEL} live heap objects a model more than 10`, async (t) => {
    const small = await liveObjects(10);
    const large = await liveObjects(1000);
    const perModel = (large.total - small.total) / 990;
    const types = Object.keys(large.byType)
      .map((k) => [k, ((large.byType[k] ?? 0) - (small.byType[k] ?? 0)) / 990] as const)
      .filter(([, v]) => Math.abs(v) >= 0.5)
      .sort((a, b) => b[1] - a[1])
      .map(([k, v]) => `${k} ${v.toFixed(1)}`)
      .join(', ');
    t.diagnostic(`live heap objects: ${small.total} at 10 models, ${large.total} at 1,000: ${perModel.toFixed(1)} a model (${types})`);
    assert.ok(perModel > 0, 'more models hold more objects (the count sees them)');
    assert.ok(perModel <= MAX_OBJECTS_PER_MODEL, `${perModel.toFixed(1)} objects a model (${types})`);
  });
});
