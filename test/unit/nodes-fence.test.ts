/**
 * The owner record's decision table, run by the real `sh` on records written into a temp dir (the
 * decision lives in the node script, fence.ts's fenceShell), and the driver-side parsing and errors.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import type { Fence } from '../../src/nodes/driver.js';
import { checkFence, fenceError, fenceShell, parseFenceLine, parseFenceSection, refusalOf } from '../../src/nodes/fence.js';

const dir = mkdtempSync(join(tmpdir(), 'llmgw-fence-unit-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const b64 = (s: string): string => Buffer.from(s).toString('base64');
const now = (): number => Math.floor(Date.now() / 1000);
const recordLine = (owner: string, epoch: number, agoSeconds: number, ttl: number, label: string, seq: number): string =>
  `1 ${b64(owner)} ${epoch} ${now() - agoSeconds} ${ttl} ${b64(label)} ${seq}\n`;

let n = 0;
/** Runs one fence check (mode act or look) on a data dir whose record is `rec` (null: none). */
function check(rec: string | null, f: Fence, mode: 'act' | 'look' = 'look', blockWrite = false): { line: string; took: string; record: string | null; code: number | null; stderr: string } {
  const data = join(dir, `d${n++}`);
  mkdirSync(join(data, '.locks'), { recursive: true });
  // the record's temp file as a directory: its write fails (as on a full disk, but as root too)
  if (blockWrite) mkdirSync(join(data, '.locks', 'owner.tmp'));
  if (rec !== null) writeFileSync(join(data, '.locks', 'owner'), rec);
  const script = `set -u
llmgw_fail() { printf 'llmgw-error: %s %s\\n' "$1" "$2" >&2; exit 3; }
${fenceShell(data, f)}
${mode === 'act' ? 'llmgw_fence_act' : 'llmgw_fence_lock; llmgw_fence_check look; llmgw_fence_unlock'}
printf 'line=%s\\ntook=%s\\n' "$fence_line" "$fence_took"
`;
  const r = spawnSync('sh', ['-c', script], { encoding: 'utf8' });
  let record: string | null = null;
  try {
    record = readFileSync(join(data, '.locks', 'owner'), 'utf8');
  } catch {
    /* none */
  }
  return {
    line: /^line=(.*)$/m.exec(r.stdout)?.[1] ?? '', took: /^took=(.*)$/m.exec(r.stdout)?.[1] ?? '',
    record, code: r.status, stderr: r.stderr,
  };
}

const A: Fence = { owner: 'ctl-a', label: 'llmgw on a', epoch: 5, ttlSeconds: 30 };

describe('owner record decisions (sh)', () => {
  const cases: { name: string; rec: string | null; fence: Fence; state: string; epoch: number; writes: boolean; took?: string }[] = [
    { name: 'no record: claimed', rec: null, fence: A, state: 'mine', epoch: 5, writes: true },
    { name: 'unreadable record: claimed', rec: 'junk\n', fence: A, state: 'mine', epoch: 5, writes: true },
    { name: 'same owner, lower epoch on record: renewed at the higher', rec: recordLine('ctl-a', 3, 5, 30, 'x', 4), fence: A, state: 'mine', epoch: 5, writes: true },
    { name: 'same owner, same epoch: renewed', rec: recordLine('ctl-a', 5, 5, 30, 'x', 4), fence: A, state: 'mine', epoch: 5, writes: true },
    { name: 'same owner, higher epoch on record: newer-epoch', rec: recordLine('ctl-a', 7, 5, 30, 'x', 4), fence: A, state: 'newer-epoch', epoch: 7, writes: false },
    { name: 'same owner, higher epoch, expired: still newer-epoch (epochs never go back)', rec: recordLine('ctl-a', 7, 500, 30, 'x', 4), fence: A, state: 'newer-epoch', epoch: 7, writes: false },
    { name: 'other owner within its ttl: other', rec: recordLine('ctl-b', 0, 20, 30, 'llmgw on b', 9), fence: A, state: 'other', epoch: 0, writes: false },
    { name: 'other owner with a higher epoch within its ttl: other', rec: recordLine('ctl-b', 99, 0, 30, 'b', 9), fence: A, state: 'other', epoch: 99, writes: false },
    { name: 'other owner past its ttl: taken over', rec: recordLine('ctl-b', 2, 40, 30, 'llmgw on b', 9), fence: A, state: 'mine', epoch: 5, writes: true, took: 'ctl-b' },
    { name: "the record's own ttl decides, not the fence's", rec: recordLine('ctl-b', 2, 40, 3600, 'b', 9), fence: { ...A, ttlSeconds: 1 }, state: 'other', epoch: 2, writes: false },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const r = check(c.rec, c.fence);
      assert.equal(r.code, 0, r.stderr);
      const p = parseFenceLine(r.line);
      assert.ok(p, r.line);
      assert.equal(p.state, c.state);
      assert.equal(p.epoch, c.epoch);
      if (c.writes) {
        const seq = c.rec !== null && c.rec.startsWith('1 ') ? Number(c.rec.trim().split(' ')[6]) + 1 : 1;
        assert.match(r.record ?? '', new RegExp(`^1 ${b64(c.fence.owner)} ${c.fence.epoch} \\d+ ${c.fence.ttlSeconds} ${b64(c.fence.label).replace(/[+/=]/g, '\\$&')} ${seq}\\n$`));
        assert.equal(p.seq, seq);
        assert.equal(p.renewedAgoSeconds, 0);
      } else {
        assert.equal(r.record, c.rec, 'unchanged');
      }
      assert.equal(r.took === '' ? '' : Buffer.from(r.took.split(' ')[0]!, 'base64').toString(), c.took ?? '');
    });
  }

  test('supersede: a record of ours above the fence\'s epoch is taken over only while its epoch and seq are the ones named', () => {
    const forged = recordLine('ctl-a', 999999999999, 5, 30, 'x', 12);
    const S = (epoch: number, seq: number): Fence => ({ ...A, supersede: { epoch, seq } });
    for (const mode of ['look', 'act'] as const) {
      const took = check(forged, S(999999999999, 12), mode);
      assert.equal(took.code, 0, took.stderr);
      const p = parseFenceLine(took.line);
      assert.deepEqual(p && [p.state, p.epoch, p.seq], ['mine', 5, 13]);
      assert.match(took.record ?? '', new RegExp(`^1 ${b64('ctl-a')} 5 \\d+ 30 ${b64(A.label).replace(/[+/=]/g, '\\$&')} 13\n$`));
      assert.deepEqual(parseFenceSection([took.line, `took ${took.took}`])?.tookOverFrom, { owner: 'ctl-a', label: 'x', epoch: 999999999999, renewedAgoSeconds: 5 });
    }
    // written since it was judged (another seq), another epoch, or another owner's: left alone
    for (const [rec, f] of [[forged, S(999999999999, 11)], [forged, S(999999999998, 12)], [recordLine('ctl-b', 999999999999, 5, 30, 'x', 12), S(999999999999, 12)]] as const) {
      const r = check(rec, f, 'act');
      assert.equal(r.code, 77, r.stderr);
      assert.equal(r.record, rec, 'unchanged');
      assert.equal(r.took, '');
    }
  });

  test('checkFence: a supersede must name a record above the fence\'s epoch', () => {
    for (const bad of [{ epoch: 5, seq: 1 }, { epoch: 4, seq: 1 }, { epoch: 9, seq: -1 }, { epoch: 9.5, seq: 1 }]) assert.throws(() => checkFence({ ...A, supersede: bad }), /supersede/);
    assert.doesNotThrow(() => checkFence({ ...A, supersede: { epoch: 6, seq: 0 } }));
  });

  test('an action refused: exit 77 and the llmgw-fence line, the record untouched', () => {
    const rec = recordLine('ctl-b', 0, 1, 30, 'llmgw on b', 3);
    const r = check(rec, A, 'act');
    assert.equal(r.code, 77);
    const why = refusalOf(r.stderr);
    assert.deepEqual(why && { state: why.state, owner: why.owner, label: why.label, epoch: why.epoch, ttl: why.ttlSeconds, seq: why.seq }, {
      state: 'other', owner: 'ctl-b', label: 'llmgw on b', epoch: 0, ttl: 30, seq: 3,
    });
    assert.equal(r.record, rec);
  });

  test('a record that cannot be written: a look goes on; an action goes on when it only renews, fails when it claims or raises the epoch', () => {
    const ours = recordLine('ctl-a', 5, 3, 30, 'x', 4);
    const look = check(null, A, 'look', true);
    assert.equal(look.code, 0, look.stderr);
    assert.equal(parseFenceLine(look.line)?.state, 'mine');
    assert.equal(look.record, null);
    const renew = check(ours, A, 'act', true);
    assert.equal(renew.code, 0, renew.stderr);
    assert.equal(renew.record, ours);
    for (const rec of [null, recordLine('ctl-a', 3, 3, 30, 'x', 4), recordLine('ctl-b', 3, 99, 30, 'x', 4)]) {
      const r = check(rec, A, 'act', true);
      assert.equal(r.code, 3, `${rec}: ${r.stderr}`);
      assert.match(r.stderr, /llmgw-error: NODE_COMMAND_FAILED could not write the node's owner record/);
      assert.equal(r.record, rec);
    }
  });

  test('free-text owner and label round-trip as data', () => {
    const f: Fence = { owner: "o'$(id)`x`", label: "l \"q\" $(touch /nonexistent/x)\n'; exit 9 #", epoch: 1, ttlSeconds: 5 };
    const r = check(null, f, 'act');
    assert.equal(r.code, 0, r.stderr);
    const p = parseFenceLine(r.line);
    assert.equal(p?.owner, f.owner);
    assert.equal(p?.label, f.label);
  });
});

describe('driver side', () => {
  test('checkFence refuses values unfit to send', () => {
    for (const bad of [{ ...A, owner: '' }, { ...A, owner: 'x'.repeat(257) }, { ...A, label: 'x'.repeat(513) }, { ...A, epoch: -1 }, { ...A, epoch: 1.5 }, { ...A, ttlSeconds: 0 }, { ...A, ttlSeconds: 2.5 }]) {
      assert.throws(() => checkFence(bad), Error, JSON.stringify(bad).slice(0, 80));
    }
    assert.equal(checkFence(A), A);
  });

  test('parseFenceSection: the view, with the take-over when there was one', () => {
    const line = `mine ${b64('ctl-a')} 5 0 30 ${b64('llmgw on a')} 2`;
    assert.deepEqual(parseFenceSection([line]), { state: 'mine', owner: 'ctl-a', label: 'llmgw on a', epoch: 5, renewedAgoSeconds: 0, ttlSeconds: 30, seq: 2 });
    assert.deepEqual(parseFenceSection([line, `took ${b64('ctl-b')} 3 41 ${b64('llmgw on b')}`])?.tookOverFrom, { owner: 'ctl-b', label: 'llmgw on b', epoch: 3, renewedAgoSeconds: 41 });
    assert.equal(parseFenceSection(['mine x']), null);
    assert.equal(parseFenceLine(`mine ${b64('a')} 5 0 30 ${b64('b')}`), null, 'no seq: not a fence line');
  });

  test('fenceError: NODE_OWNED names the node, the other owner, its epoch and last renewal; NODE_FENCED the superseding epoch', () => {
    const owned = fenceError('node-a', 'start replica r1', A, { state: 'other', owner: 'ctl-b', label: 'llmgw on host-b (state dir /s)', epoch: 0, renewedAgoSeconds: 4, ttlSeconds: 60, seq: 3 });
    assert.equal(owned.code, 'NODE_OWNED');
    assert.equal(owned.message, 'node node-a: start replica r1 refused: the node is owned by llmgw on host-b (state dir /s) (epoch 0), which renewed its ownership 4 s ago; its ownership expires 60 s after its last renewal (in 56 s without one)');
    assert.deepEqual(owned.detail, { node: 'node-a', what: 'start replica r1', owner: 'ctl-b', label: 'llmgw on host-b (state dir /s)', epoch: 0, renewedAgoSeconds: 4, ttlSeconds: 60, myOwner: 'ctl-a', myEpoch: 5 });
    const fenced = fenceError('node-a', 'stop replica r1', A, { state: 'newer-epoch', owner: 'ctl-a', label: 'etcd cluster /p', epoch: 7, renewedAgoSeconds: 90, ttlSeconds: 60, seq: 3 });
    assert.equal(fenced.code, 'NODE_FENCED');
    assert.match(fenced.message, /^node node-a: stop replica r1 refused: epoch 5 is superseded, etcd cluster \/p acted on the node at epoch 7 and renewed its ownership 90 s ago; .*\(in 0 s without one\)$/);
    assert.match(fenceError('n', 'w', A, { state: 'other', owner: 'ctl-b', label: '', epoch: 0, renewedAgoSeconds: 0, ttlSeconds: 1, seq: 1 }).message, /owned by owner "ctl-b"/);
  });
});
