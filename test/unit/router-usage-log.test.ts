/** The usage log's file handling: batches, fsync on flush, rotation by size, append across restarts. */
import { strict as assert } from 'node:assert';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { UsageLog, usageLine } from '../../src/router/usage-log.js';
import type { UsageRecord } from '../../src/router/usage.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-usage-log-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const rec = (i: number): UsageRecord => ({ time: Date.UTC(2026, 11, 1, 12, 0, i), key: 'team-a', model: 'm', replica: 'm-r1', status: 200, reason: '', durationSeconds: 0.0123456, tokens: { prompt: i, cached: 1, completion: 2 } });

describe('usage log', () => {
  test('one JSON line per request, with the key name, no text fields', () => {
    assert.equal(usageLine(rec(3)), '{"time":"2026-12-01T12:00:03.000Z","key":"team-a","model":"m","replica":"m-r1","status":200,"reason":"","duration_ms":12.346,"prompt_tokens":3,"cached_tokens":1,"completion_tokens":2,"ended_early":false}\n');
  });

  test('lines wait at most flushMs, then are written in one batch; a new log appends', (t) => {
    t.mock.timers.enable({ apis: ['setTimeout'] }); // node's fake timers: the batch's flushMs passes on tick()
    const path = join(dir, 'a.jsonl');
    const log = new UsageLog({ path, flushMs: 50 });
    log.record(rec(1));
    t.mock.timers.tick(30);
    log.record(rec(2));
    assert.equal(readFileSync(path, 'utf8'), '', 'buffered');
    t.mock.timers.tick(19);
    assert.equal(readFileSync(path, 'utf8'), '', 'still buffered 49 ms after the first line');
    t.mock.timers.tick(1);
    assert.equal(readFileSync(path, 'utf8').split('\n').length - 1, 2, 'both lines, flushMs after the first');
    log.close();
    const again = new UsageLog({ path, flushMs: 50 });
    again.record(rec(3));
    again.close();
    assert.deepEqual(readFileSync(path, 'utf8').trim().split('\n').map((l) => (JSON.parse(l) as { prompt_tokens: number }).prompt_tokens), [1, 2, 3]);
  });

  test('rotated by size to FILE.1 … FILE.keep; no line is split between files', () => {
    const path = join(dir, 'b.jsonl');
    const one = Buffer.byteLength(usageLine(rec(1)));
    const log = new UsageLog({ path, maxBytes: one * 2, keep: 2 });
    for (let i = 0; i < 7; i++) {
      log.record(rec(i));
      log.flush();
    }
    log.close();
    assert.deepEqual(readdirSync(dir).filter((f) => f.startsWith('b.jsonl')).sort(), ['b.jsonl', 'b.jsonl.1', 'b.jsonl.2']);
    const n = (f: string): number[] => readFileSync(join(dir, f), 'utf8').trim().split('\n').map((l) => (JSON.parse(l) as { prompt_tokens: number }).prompt_tokens);
    assert.deepEqual(n('b.jsonl'), [6]);
    assert.deepEqual(n('b.jsonl.1'), [4, 5]);
    assert.deepEqual(n('b.jsonl.2'), [2, 3]);
  });
});
