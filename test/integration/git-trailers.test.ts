/** parseTrailers agrees with `git interpret-trailers --parse` (git itself is the oracle). */
import assert from 'node:assert/strict';
import { tmpdir } from 'node:os';
import { describe, it } from 'node:test';
import { parseTrailers } from '../../src/git/trailers.js';
import { git } from '../harness/git.js';

const messages: readonly string[] = [
  'Bump qwen\n',
  'Llmgw-Retry: m1\n',
  'Retry m1\n\nLlmgw-Retry: m1\n',
  'Retry\n\nllmgw-retry: m1\nLLMGW-RETRY: m2\n',
  'Retry some\n\nBody text here.\n\nLlmgw-Retry: m1, m2\nReviewed-by: A <a@x>\nLlmgw-Retry: m3,m1\n',
  'Subject\n\nLlmgw-Retry: m1\n\nMore prose after it.\n',
  'Subject\n\nSome prose line\nLlmgw-Retry: m1\n',
  'Subject\n\nprose one\nprose two\nprose three\nSigned-off-by: Op <op@x>\nLlmgw-Retry: m1\n',
  'Subject\n\nprose one\nprose two\nprose three\nprose four\nSigned-off-by: Op <op@x>\n',
  'Subject\n\nLlmgw-Retry: m1,\n  m2\n',
  'Subject\n\nLlmgw-Retry : m1\n\n\n',
  'Subject\n\nLlmgw-Retry: m1\n# a comment\n',
  'Subject\n\nLlmgw Retry: m1\n',
  'Subject\n\nLlmgw-Retry:\nAcked-by: b\n',
  'Subject\nsecond title line\nLlmgw-Retry: m1\n',
  'Subject\n\n(cherry picked from commit 0123456789abcdef)\nLlmgw-Retry: m9\n',
  'Subject\n\n  indented: not a key\nLlmgw-Retry: m1\n',
  'Subject\n\nhttp://example.com: a url\n',
  'Subject\n\nKey-1: a\nKey_2: b\n',
  '',
  '\n\n',
  // Llmgw-Epoch as withTrailer adds it to status-branch messages (test/unit/git-trailers.test.ts).
  'llmgw status at abc\n\nLlmgw-Epoch: 3\n',
  'Title\n\nReviewed-by: A <a@x>\nLlmgw-Epoch: 3\n',
  '\nLlmgw-Epoch: 3\n',
  'S\n\nLlmgw-Epoch: 4\nLlmgw-Epoch: 9\nllmgw-epoch : x\n',
];

describe('trailers agree with git interpret-trailers --parse', () => {
  for (const [i, message] of messages.entries()) {
    it(`message ${i}: ${JSON.stringify(message).slice(0, 60)}`, async () => {
      const fromGit = (await git(tmpdir(), ['interpret-trailers', '--parse'], { input: message }))
        .split('\n')
        .map((l) => l.trim())
        .filter((l) => l !== '');
      const ours = parseTrailers(message).map((t) => `${t.key}: ${t.value}`.trim());
      assert.deepEqual(ours, fromGit);
    });
  }
});
