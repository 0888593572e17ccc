/** How a replica was warmed (#38 item 3; pure): restore kept only where the first replay saw the gain; the donor a new replica takes slot files from. */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import type { ReplicaObservation } from '../../src/nodes/driver.js';
import { slotIdentityOf } from '../../src/engine-api/slot-restore.js';
import { leftSlots, slotDonor, SlotFilesBook } from '../../src/reconciler/slot-donor.js';
import { joinResults, slotVerdict, type RestoreOutcome } from '../../src/router/slot-warmup.js';
import type { WarmupResult } from '../../src/router/warmer.js';

const res = (prefixes: number, tokens: number, cached: number, code: string | null = null): WarmupResult => ({ prefixes, tokens, cached, skipped: 0, seconds: 0.1, outcome: code === null ? 'done' : 'timeout', code, message: code === null ? null : 'cut' });
const restored = (n: number): RestoreOutcome => ({ saved: n, restored: n, seconds: 0.01, code: null, message: null });
const failed: RestoreOutcome = { saved: 0, restored: 0, seconds: 0.01, code: 'SLOT_RESTORE_FAILED', message: 'restore of slot 0 (llmgw-slot-0.bin) at http://h:1 was answered 400: bad file' };

describe('slotVerdict', () => {
  const cases: { name: string; restore: RestoreOutcome | null; first: WarmupResult | null; all: WarmupResult | null; want: [string, string | null, boolean] }[] = [
    { name: 'no restore tried: replay', restore: null, first: res(1, 500, 0), all: res(3, 900, 0), want: ['replay', null, false] },
    { name: 'the first replay took its prompt from the cache: restore', restore: restored(700), first: res(1, 2, 698), all: res(3, 300, 1200), want: ['restore', null, false] },
    { name: 'exactly the gain share: restore', restore: restored(700), first: res(1, 75, 25), all: res(1, 75, 25), want: ['restore', null, false] },
    { name: 'a few template tokens from the cache: no gain', restore: restored(700), first: res(1, 490, 10), all: res(2, 900, 20), want: ['replay', 'SLOT_RESTORE_NO_GAIN', false] },
    { name: 'nothing from the cache: no gain', restore: restored(700), first: res(1, 500, 0), all: res(1, 500, 0), want: ['replay', 'SLOT_RESTORE_NO_GAIN', false] },
    { name: 'the engine refused: replay with SLOT_RESTORE_FAILED', restore: failed, first: res(1, 500, 0), all: res(1, 500, 0), want: ['replay', 'SLOT_RESTORE_FAILED', false] },
    { name: 'refused and the replay cut at its timeout: the timeout is the code', restore: failed, first: res(0, 0, 0, 'WARMUP_TIMED_OUT'), all: res(0, 0, 0, 'WARMUP_TIMED_OUT'), want: ['replay', 'WARMUP_TIMED_OUT', false] },
    { name: 'the donor\'s slots were empty: plain replay, no code', restore: restored(0), first: res(1, 500, 0), all: res(1, 500, 0), want: ['replay', null, false] },
    { name: 'no prefix to check with: the restore kept, unverified', restore: restored(700), first: null, all: null, want: ['restore', null, true] },
    { name: 'a gain, then the rest cut at the timeout: restore, with the timeout', restore: restored(700), first: res(1, 2, 698), all: res(2, 40, 900, 'WARMUP_TIMED_OUT'), want: ['restore', 'WARMUP_TIMED_OUT', false] },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const v = slotVerdict(c.restore, c.first, c.all);
      assert.deepEqual([v.via, v.code, v.unverified], c.want);
      if (v.code === 'SLOT_RESTORE_NO_GAIN') assert.match(v.message ?? '', /restored 700 tokens from slot files, but its first replay took \d+ of \d+ prompt tokens from the cache: warmed by replay$/);
      if (v.code === 'SLOT_RESTORE_FAILED') assert.match(v.message ?? '', /was answered 400: bad file: warmed by replay$/);
    });
  }

  test('joinResults adds the counts and keeps the second part\'s ending', () => {
    assert.deepEqual(joinResults(res(1, 2, 698), res(2, 40, 900, 'WARMUP_TIMED_OUT')), { prefixes: 3, tokens: 42, cached: 1598, skipped: 0, seconds: 0.2, outcome: 'timeout', code: 'WARMUP_TIMED_OUT', message: 'cut' });
    assert.deepEqual(joinResults(res(1, 2, 698), null), res(1, 2, 698));
  });
});

describe('slotDonor', () => {
  const engine = { engine: 'llama', version: 'b1', install: { method: 'path' as const, path: '/e' } };
  const ident = (ctx: number) => slotIdentityOf('n1', engine, { sha256: 'a'.repeat(64) }, { ctxSize: ctx, parallel: 2, extraArgs: [] });
  const byDigest: Record<string, number> = { d1: 4096, d2: 4096, d3: 8192 };
  const identityOf = (d: string) => (byDigest[d] === undefined ? null : ident(byDigest[d]!));
  const rep = (id: string, digest: string, startedAt: number, state: ReplicaObservation['state'] = 'ready', model = 'm'): ReplicaObservation => ({ id, model, digest, port: 1, pid: 1, startedAt, endpoint: `http://h:${startedAt}`, state });
  const t = { model: 'm', node: 'n1', replica: 'new', digest: 'd1' };

  test('a ready replica of the model, the same revision first, then the newest', () => {
    const s = slotDonor([rep('a', 'd2', 30), rep('b', 'd1', 10), rep('c', 'd1', 20), rep('new', 'd1', 40)], t, identityOf);
    assert.equal(s?.donor, 'c');
    assert.equal(s?.endpoint, 'http://h:20');
    assert.deepEqual(s?.decision, { restore: true });
  });
  test('none ready, another model, or itself only: no donor', () => {
    assert.equal(slotDonor([rep('a', 'd1', 1, 'starting'), rep('b', 'd1', 2, 'ready', 'other'), rep('new', 'd1', 3)], t, identityOf), undefined);
  });
  test('a donor whose flags differ is named with the decision that says why (replay)', () => {
    const s = slotDonor([rep('a', 'd3', 1)], t, identityOf);
    assert.equal(s?.decision.restore, false);
    assert.equal(s?.decision.restore === false ? s.decision.field : null, 'ctxSize');
  });
  test('a revision not known here is skipped; the new one\'s unknown: no donor', () => {
    assert.equal(slotDonor([rep('a', 'gone', 5), rep('b', 'd2', 1)], t, identityOf)?.donor, 'b');
    assert.equal(slotDonor([rep('b', 'd1', 1)], { ...t, digest: 'gone' }, identityOf), undefined);
  });
});

describe('slot files a replica stopped as idle left', () => {
  const engine = { engine: 'llama', version: 'b1', install: { method: 'path' as const, path: '/e' } };
  const ident = (ctx: number) => slotIdentityOf('n1', engine, { sha256: 'a'.repeat(64) }, { ctxSize: ctx, parallel: 2, extraArgs: [] });
  const saved = [{ slot: 0, file: 'llmgw-slot-0.bin', tokens: 700 }, { slot: 1, file: 'llmgw-slot-1.bin', tokens: 0 }];

  test('kept per node and model, the newest; forgotten on demand', () => {
    const book = new SlotFilesBook();
    book.put('n1', 'm', { replica: 'old', identity: ident(4096), saved });
    book.put('n1', 'm', { replica: 'older', identity: ident(4096), saved: [] });
    book.put('n1', 'm', { replica: 'newest', identity: ident(4096), saved });
    assert.equal(book.get('n1', 'm')?.replica, 'newest');
    assert.equal(book.get('n2', 'm'), undefined);
    assert.equal(book.get('n1', 'other'), undefined);
    book.forget('n1', 'm');
    assert.equal(book.get('n1', 'm'), undefined);
  });
  test('restored without a save where they fit; the decision says why not where they do not', () => {
    const fits = leftSlots({ replica: 'old', identity: ident(4096), saved }, ident(4096));
    assert.deepEqual(fits, { donor: 'old', endpoint: '', decision: { restore: true }, saved });
    const other = leftSlots({ replica: 'old', identity: ident(4096), saved }, ident(8192));
    assert.equal(other?.decision.restore === false ? other.decision.field : null, 'ctxSize');
  });
  test('none: no files, only empty slots, or the new replica\'s identity unknown', () => {
    assert.equal(leftSlots(undefined, ident(4096)), undefined);
    assert.equal(leftSlots({ replica: 'old', identity: ident(4096), saved: [{ slot: 0, file: 'llmgw-slot-0.bin', tokens: 0 }] }, ident(4096)), undefined);
    assert.equal(leftSlots({ replica: 'old', identity: ident(4096), saved }, null), undefined);
  });
});
