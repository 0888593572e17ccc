/** Token reading, scrubbing, and the isomorphic-git → catalogue error boundary. */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inspect } from 'node:util';
import { after, describe, it } from 'node:test';
import { displayUrl, readToken, scrub, urlSecrets } from '../../src/git/auth.js';
import { toGitError } from '../../src/git/errors.js';
import { isLlmgwError } from '../../src/errors/catalogue.js';

const TOKEN = 'tok-SECRET-0123456789';

describe('git token', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-tok-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('reads the env var, then the file; none configured → null', () => {
    assert.equal(readToken(undefined), null);
    assert.equal(readToken({}), null);
    assert.equal(readToken({ env: 'T' }, { T: ` ${TOKEN}\n` }), TOKEN);
    const f = join(dir, 'token');
    writeFileSync(f, `${TOKEN}\n`);
    assert.equal(readToken({ file: f }), TOKEN);
    assert.equal(readToken({ env: 'UNSET', file: f }, {}), TOKEN);
  });

  it('a configured but missing token is GIT_AUTH_FAILED naming the source', () => {
    assert.throws(
      () => readToken({ env: 'LLMGW_NOPE' }, {}),
      (e: unknown) => isLlmgwError(e, 'GIT_AUTH_FAILED') && e.message.includes('LLMGW_NOPE'),
    );
    assert.throws(
      () => readToken({ file: join(dir, 'missing') }),
      (e: unknown) => isLlmgwError(e, 'GIT_AUTH_FAILED') && e.message.includes('missing'),
    );
  });

  it('scrubs tokens, their basic-auth encoding and URL credentials', () => {
    const b64 = Buffer.from(`llmgw:${TOKEN}`).toString('base64');
    const text = `GET https://bob:hunter22@git.example/x.git failed; header Basic ${b64}; token ${TOKEN}`;
    const out = scrub(text, [TOKEN]);
    assert.ok(!out.includes(TOKEN) && !out.includes(b64) && !out.includes('hunter22'), out);
    assert.equal(displayUrl('https://bob:hunter22@git.example/x.git'), 'https://git.example/x.git');
    assert.deepEqual(urlSecrets('https://bob:hunter22@git.example/x.git'), ['hunter22']);
  });
});

describe('toGitError', () => {
  const ctx = { op: 'fetch main', secrets: [TOKEN] };
  const http = (statusCode: number): unknown => Object.assign(new Error(`HTTP Error: ${statusCode} ${TOKEN}`), { code: 'HttpError', data: { statusCode } });

  const cases: Array<[string, unknown, string]> = [
    ['401', http(401), 'GIT_AUTH_FAILED'],
    ['403', http(403), 'GIT_AUTH_FAILED'],
    ['404', http(404), 'GIT_UNREACHABLE'],
    ['503', http(503), 'GIT_UNREACHABLE'],
    ['400', http(400), 'GIT_FAILED'],
    ['ECONNREFUSED', Object.assign(new Error('connect ECONNREFUSED'), { code: 'ECONNREFUSED' }), 'GIT_UNREACHABLE'],
    ['ENOTFOUND', Object.assign(new Error('getaddrinfo ENOTFOUND git.example'), { code: 'ENOTFOUND' }), 'GIT_UNREACHABLE'],
    ['AggregateError of ECONNREFUSED', Object.assign(new AggregateError([Object.assign(new Error('x'), { code: 'ECONNREFUSED' })], 'all failed'), {}), 'GIT_UNREACHABLE'],
    ['simple-get timeout', new Error('Request timed out'), 'GIT_UNREACHABLE'],
    ['NotFoundError', Object.assign(new Error('Could not find refs/heads/x.'), { code: 'NotFoundError', data: { what: 'refs/heads/x' } }), 'GIT_REF_NOT_FOUND'],
    ['PushRejectedError', Object.assign(new Error('Push rejected'), { code: 'PushRejectedError' }), 'GIT_PUSH_REJECTED'],
    ['anything else', new Error(`boom ${TOKEN}`), 'GIT_FAILED'],
  ];
  for (const [name, err, code] of cases) {
    it(`${name} → ${code}, token scrubbed`, () => {
      const e = toGitError(err, ctx);
      assert.equal(e.code, code);
      assert.equal(e.cause, undefined);
      for (const s of [e.message, inspect(e), JSON.stringify(e)]) assert.ok(!s.includes(TOKEN), s);
    });
  }
});
