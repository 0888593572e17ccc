/**
 * Standby answers that fit (#37 item 6, N10): a replica log bigger than etcd takes in one request,
 * asked for through a standby, comes back within 5 s, capped at 1 MiB and saying it was truncated
 * (before, the leader's answer txn was refused by etcd and swallowed, and the caller waited out its
 * timeout). Real etcd, the leader serving requests (channel.ts Requests), a 3 MB log of 10,000
 * lines; and the pure cut (answerText) by table.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { answerText, MAX_ANSWER_BYTES, Requests, truncatedTail, type RequestMsg } from '../../src/ha/channel.js';
import { startEtcd } from '../harness/etcd.js';
import { realTime } from '../harness/real-time.js';
import { elected, freshPrefix, sharedEtcd } from '../harness/elections.js';

/** 10,000 lines of 300 bytes: a 3 MB replica log, the newest last. */
const BIG_LOG = Array.from({ length: 10_000 }, (_, i) => `${String(i).padStart(5, '0')} srv  log_server_r: request: POST /v1/chat/completions 127.0.0.1 200 ${'x'.repeat(222)}`).join('\n');

describe('answerText: an answer fits in one etcd request', () => {
  it('a small answer as it is; a large text keeps its end from a line\'s start, after a line saying it was truncated', () => {
    assert.equal(answerText('logs', { ok: 'a\nb' }), '{"ok":"a\\nb"}');
    const out = answerText('logs', { ok: BIG_LOG });
    assert.ok(Buffer.byteLength(out) <= MAX_ANSWER_BYTES, `${Buffer.byteLength(out)} bytes`);
    const text = (JSON.parse(out) as { ok: string }).ok;
    const [note, first] = text.split('\n');
    assert.match(note!, /^\[llmgw: truncated: the first \d+ of \d+ bytes are left out/);
    assert.match(first!, /^\d{5} srv {2}log_server_r/, 'the kept part starts at a line');
    assert.ok(text.endsWith(BIG_LOG.slice(-400)), 'the newest lines kept');
  });

  it('a log of escapes (6 bytes each in JSON) is cut until its JSON fits; any other answer too large is an error naming its size', () => {
    const escapes = '\x1b[0m'.repeat(400_000);
    assert.ok(Buffer.byteLength(answerText('logs', { ok: escapes })) <= MAX_ANSWER_BYTES);
    const big = answerText('demand', { ok: { list: [BIG_LOG] } });
    assert.match(big, /^\{"error":\{"code":"INTERNAL","message":"the leader's answer to demand is \d+ bytes, above the 1048576/);
    assert.equal(truncatedTail('short', 10), 'short');
    assert.equal(truncatedTail('ééé', 3).split('\n')[1], 'é', 'never inside a character');
  });
});

describe('a 3 MB replica log through a standby on a real etcd', { timeout: 60_000 }, () => {
  const { make } = sharedEtcd(startEtcd);

  it('`logs` with 10,000 lines answers within 5 s, at most 1 MiB, saying it was truncated', async () => {
    const prefix = freshPrefix();
    const leader = make(prefix, 'leader');
    leader.election.start();
    await elected(leader.election);
    const asked: RequestMsg[] = [];
    const stopServing = await new Requests(leader.client, prefix, 'leader', realTime).serve(leader.election, async (m) => {
      asked.push(m);
      return BIG_LOG;
    });
    try {
      const standby = make(prefix, 'standby');
      const t0 = performance.now();
      const answer = await new Requests(standby.client, prefix, 'standby', realTime).send('logs', { replica: 'good-0123abcd', lines: 10_000 }, 5_000);
      const ms = performance.now() - t0;
      assert.ok(ms < 5_000, `${Math.round(ms)} ms`);
      assert.equal(typeof answer, 'string');
      const text = answer as string;
      assert.ok(Buffer.byteLength(text) <= MAX_ANSWER_BYTES, `${Buffer.byteLength(text)} bytes`);
      assert.match(text, /^\[llmgw: truncated: /);
      assert.ok(text.endsWith(BIG_LOG.slice(-1000)));
      assert.deepEqual(asked.map((m) => [m.kind, m.body]), [['logs', { replica: 'good-0123abcd', lines: 10_000 }]]);
    } finally {
      await stopServing();
    }
  });
});
