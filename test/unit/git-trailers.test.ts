import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { CommitInfo } from '../../src/git/commits.js';
import { EPOCH_TRAILER, commitContent, epochOf, extractRetries, parseTrailers, retryId, retryModels, trailerValues, withTrailer } from '../../src/git/trailers.js';

interface Case {
  readonly name: string;
  readonly message: string;
  readonly trailers: ReadonlyArray<[string, string]>;
  readonly retries: readonly string[];
}

// Expected values agree with `git interpret-trailers --parse` (test/integration/git-trailers.test.ts checks that).
const cases: readonly Case[] = [
  { name: 'subject only', message: 'Bump qwen\n', trailers: [], retries: [] },
  { name: 'a trailer as the only line is the title, not a trailer', message: 'Llmgw-Retry: m1\n', trailers: [], retries: [] },
  {
    name: 'one retry trailer after a blank line',
    message: 'Retry m1\n\nLlmgw-Retry: m1\n',
    trailers: [['Llmgw-Retry', 'm1']],
    retries: ['m1'],
  },
  {
    name: 'key matched case-insensitively',
    message: 'Retry\n\nllmgw-retry: m1\nLLMGW-RETRY: m2\n',
    trailers: [
      ['llmgw-retry', 'm1'],
      ['LLMGW-RETRY', 'm2'],
    ],
    retries: ['m1', 'm2'],
  },
  {
    name: 'several trailers and comma-separated values, deduplicated',
    message: 'Retry some\n\nBody text here.\n\nLlmgw-Retry: m1, m2\nReviewed-by: A <a@x>\nLlmgw-Retry: m3,m1\n',
    trailers: [
      ['Llmgw-Retry', 'm1, m2'],
      ['Reviewed-by', 'A <a@x>'],
      ['Llmgw-Retry', 'm3,m1'],
    ],
    retries: ['m1', 'm2', 'm3'],
  },
  {
    name: 'trailers only count in the last paragraph',
    message: 'Subject\n\nLlmgw-Retry: m1\n\nMore prose after it.\n',
    trailers: [],
    retries: [],
  },
  {
    name: 'a paragraph mixing prose and trailers is not a trailer block',
    message: 'Subject\n\nSome prose line\nLlmgw-Retry: m1\n',
    trailers: [],
    retries: [],
  },
  {
    name: 'with a git-generated trailer, 25% trailers is enough',
    message: 'Subject\n\nprose one\nprose two\nprose three\nSigned-off-by: Op <op@x>\nLlmgw-Retry: m1\n',
    trailers: [
      ['Signed-off-by', 'Op <op@x>'],
      ['Llmgw-Retry', 'm1'],
    ],
    retries: ['m1'],
  },
  {
    name: 'continuation lines fold into the value',
    message: 'Subject\n\nLlmgw-Retry: m1,\n  m2\n',
    trailers: [['Llmgw-Retry', 'm1, m2']],
    retries: ['m1', 'm2'],
  },
  {
    name: 'whitespace before the colon, trailing blank lines',
    message: 'Subject\n\nLlmgw-Retry : m1\n\n\n',
    trailers: [['Llmgw-Retry', 'm1']],
    retries: ['m1'],
  },
  {
    name: 'comment lines are ignored',
    message: 'Subject\n\nLlmgw-Retry: m1\n# a comment\n',
    trailers: [['Llmgw-Retry', 'm1']],
    retries: ['m1'],
  },
  {
    name: 'a key with a space inside is not a trailer',
    message: 'Subject\n\nLlmgw Retry: m1\n',
    trailers: [],
    retries: [],
  },
  {
    name: 'empty value',
    message: 'Subject\n\nLlmgw-Retry:\nAcked-by: b\n',
    trailers: [
      ['Llmgw-Retry', ''],
      ['Acked-by', 'b'],
    ],
    retries: [],
  },
  {
    name: 'CRLF line ends',
    message: 'Subject\r\n\r\nLlmgw-Retry: m1\r\n',
    trailers: [['Llmgw-Retry', 'm1']],
    retries: ['m1'],
  },
];

describe('git trailers', () => {
  for (const c of cases) {
    it(c.name, () => {
      assert.deepEqual(
        parseTrailers(c.message).map((t) => [t.key, t.value]),
        c.trailers.map(([k, v]) => [k, v]),
      );
      assert.deepEqual(retryModels(c.message), c.retries);
    });
  }

  it('trailerValues filters by key', () => {
    assert.deepEqual(trailerValues('S\n\nA: 1\nB: 2\na: 3\n', 'A'), ['1', '3']);
  });

  it('extractRetries: one request per (commit, model), in commit order', () => {
    const commit = (oid: string, message: string, ts: number): CommitInfo => ({
      oid,
      parents: [],
      message,
      author: { name: 'Op', email: 'op@x', timestamp: ts },
    });
    const out = extractRetries([
      commit('a'.repeat(40), 'retry\n\nLlmgw-Retry: m1, m1\nLlmgw-Retry: m2\n', 100),
      commit('b'.repeat(40), 'nothing\n', 200),
      commit('c'.repeat(40), 'again\n\nLlmgw-Retry: m1\n', 300),
    ]);
    const [ca, cc] = [commitContent(commit('a'.repeat(40), 'retry\n\nLlmgw-Retry: m1, m1\nLlmgw-Retry: m2\n', 100)), commitContent(commit('c'.repeat(40), 'again\n\nLlmgw-Retry: m1\n', 300))];
    assert.deepEqual(out, [
      { model: 'm1', commit: 'a'.repeat(40), content: ca, author: 'Op <op@x>', timestamp: 100 },
      { model: 'm2', commit: 'a'.repeat(40), content: ca, author: 'Op <op@x>', timestamp: 100 },
      { model: 'm1', commit: 'c'.repeat(40), content: cc, author: 'Op <op@x>', timestamp: 300 },
    ]);
    assert.equal(new Set(out.map(retryId)).size, 3);
  });

  it('a retry keeps its id when a rebase gives its commit a new id; another message or author time is another retry', () => {
    const c = (oid: string, message: string, ts: number): CommitInfo => ({ oid, parents: [], message, author: { name: 'Op', email: 'op@x', timestamp: ts } });
    const [orig] = extractRetries([c('a'.repeat(40), 'retry\n\nLlmgw-Retry: m1\n', 100)]);
    const [rebased] = extractRetries([c('d'.repeat(40), 'retry\n\nLlmgw-Retry: m1\n', 100)]);
    const [later] = extractRetries([c('e'.repeat(40), 'retry\n\nLlmgw-Retry: m1\n', 101)]);
    const [reworded] = extractRetries([c('f'.repeat(40), 'retry again\n\nLlmgw-Retry: m1\n', 100)]);
    assert.equal(retryId(rebased!), retryId(orig!));
    assert.notEqual(retryId(later!), retryId(orig!));
    assert.notEqual(retryId(reworded!), retryId(orig!));
  });
});

const epochCases: ReadonlyArray<{ readonly name: string; readonly message: string; readonly epoch: number | null }> = [
  { name: 'no trailer', message: 'llmgw status at abc\n', epoch: null },
  { name: 'one trailer', message: 'llmgw status at abc\n\nLlmgw-Epoch: 7\n', epoch: 7 },
  { name: 'key case-insensitive, space before the colon', message: 'S\n\nllmgw-epoch : 12\n', epoch: 12 },
  { name: 'in the title it is not a trailer', message: 'Llmgw-Epoch: 7\n', epoch: null },
  { name: 'not in the last paragraph', message: 'S\n\nLlmgw-Epoch: 7\n\nprose\n', epoch: null },
  { name: 'not a number', message: 'S\n\nLlmgw-Epoch: seven\n', epoch: null },
  { name: 'negative, fractional, signed and inexact values are not epochs', message: 'S\n\nLlmgw-Epoch: -1\nLlmgw-Epoch: 1.5\nLlmgw-Epoch: +2\nLlmgw-Epoch: 9007199254740993\nLlmgw-Epoch: 12345678901234567\n', epoch: null },
  { name: 'the largest safe integer', message: 'S\n\nLlmgw-Epoch: 9007199254740991\n', epoch: Number.MAX_SAFE_INTEGER },
  { name: 'zero', message: 'S\n\nLlmgw-Epoch: 0\n', epoch: 0 },
  { name: 'several: the highest counts', message: 'S\n\nLlmgw-Epoch: 4\nLlmgw-Epoch: 9\nLlmgw-Epoch: 2\n', epoch: 9 },
  { name: 'a malformed one beside a good one', message: 'S\n\nLlmgw-Epoch: x\nLlmgw-Epoch: 3\n', epoch: 3 },
  { name: 'next to other trailers', message: 'S\n\nLlmgw-Retry: m1\nLlmgw-Epoch: 5\n', epoch: 5 },
];

describe('Llmgw-Epoch trailer', () => {
  for (const c of epochCases) it(`epochOf: ${c.name}`, () => assert.equal(epochOf(c.message), c.epoch));

  const adds: ReadonlyArray<{ readonly message: string; readonly out: string }> = [
    { message: 'llmgw status at abc', out: 'llmgw status at abc\n\nLlmgw-Epoch: 3\n' },
    { message: 'llmgw status at abc\n', out: 'llmgw status at abc\n\nLlmgw-Epoch: 3\n' },
    { message: 'Title\n\nBody.\n\n\n', out: 'Title\n\nBody.\n\nLlmgw-Epoch: 3\n' },
    { message: 'Title\n\nReviewed-by: A <a@x>\n', out: 'Title\n\nReviewed-by: A <a@x>\nLlmgw-Epoch: 3\n' },
    { message: 'Title\r\n\r\nBody\r\n', out: 'Title\n\nBody\n\nLlmgw-Epoch: 3\n' },
    { message: '', out: '\nLlmgw-Epoch: 3\n' },
  ];
  for (const a of adds) {
    it(`withTrailer(${JSON.stringify(a.message)}) ends with the trailer, which epochOf reads back`, () => {
      const out = withTrailer(a.message, EPOCH_TRAILER, '3');
      assert.equal(out, a.out);
      assert.equal(epochOf(out), 3);
      // Trailers already in the message are kept.
      assert.deepEqual(parseTrailers(out).slice(0, -1), parseTrailers(a.message));
    });
  }
});
