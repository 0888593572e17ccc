/**
 * The rollout's check runner (src/rollout/check.ts) against a real llama-server on a tiny generated
 * GGUF, which requires an engine key like the replicas llmgw starts. Random weights answer garbage,
 * but deterministically at temperature 0 with a fixed seed, so:
 * - a check expecting status 200 passes, with its TTFT measured at the first content;
 * - `matches: "^this will never match$"` fails, naming the check, with what it expected and the text it got;
 * - the same check twice yields the same text; a `contains` of that text passes;
 * - json_schema on garbage fails saying it is not JSON; /v1/completions is read from choices[0].text;
 * - a bad path gives the 404 body, a prompt beyond the context the 400 body, a wrong engine key the
 *   401 body, a closed port "no answer";
 * - a tiny timeout against a long max_tokens fails with "no answer within …";
 * - runChecks stops at the first failure; the caller's abort rejects instead of judging.
 */
import { strict as assert } from 'node:assert';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { runCheck, runChecks } from '../../src/rollout/check.js';
import type { CheckExpect, CheckResult, RolloutCheck } from '../../src/rollout/types.js';
import { writeTinyModel } from '../fixtures/gguf.js';
import { llamaServerDir, startLlamaServer, type LlamaServer } from '../harness/llama-server.js';

const BUILD_TIMEOUT = 40 * 60_000;
const ENGINE_KEY = 'engine-key-0123456789abcdef';
const EXPECT: CheckExpect = { status: 200, matches: null, contains: null, notMatches: null, jsonSchema: null, maxTtftMs: null };

function check(name: string, over: Partial<Omit<RolloutCheck, 'expect'>> & { expect?: Partial<CheckExpect> } = {}): RolloutCheck {
  return {
    name,
    file: 'checks/test.yaml',
    path: '/v1/chat/completions',
    request: { messages: [{ role: 'user', content: 'What is 2+2? Answer with one number.' }], max_tokens: 12 },
    timeoutMs: 60_000,
    ...over,
    expect: { ...EXPECT, ...over.expect },
  };
}

function failed(r: CheckResult): Extract<CheckResult, { ok: false }> {
  assert.equal(r.ok, false, `expected a failure, got ${JSON.stringify(r)}`);
  return r as Extract<CheckResult, { ok: false }>;
}

/** A port nothing listens on (bound, then closed). */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

describe('rollout checks against a real llama-server', { timeout: BUILD_TIMEOUT + 10 * 60_000 }, () => {
  let tmp = '';
  let srv: LlamaServer;

  before(async () => {
    const dir = await llamaServerDir();
    tmp = await mkdtemp(join(tmpdir(), 'llmgw-rollout-check-'));
    const model = (await writeTinyModel(join(tmp, 'tiny.gguf'), { seed: 34, contextLength: 4096 })).path;
    srv = await startLlamaServer({ dir, model, env: { LLAMA_API_KEY: ENGINE_KEY }, args: ['--ctx-size', '4096', '--parallel', '2'] });
  });

  after(async () => {
    await srv?.stop();
    if (tmp) await rm(tmp, { recursive: true, force: true });
  });

  test('a check expecting status 200 passes, with the TTFT at the first content', async () => {
    const r = await runCheck(srv.url, ENGINE_KEY, check('answers'));
    assert.equal(r.ok, true, JSON.stringify(r));
    assert.ok(r.ok);
    assert.equal(r.name, 'answers');
    assert.ok(r.ttftMs !== null && r.ttftMs > 0, `ttft ${r.ttftMs}`);
    assert.ok(r.durationMs >= r.ttftMs);
  });

  let garbage = '';
  test('a pattern that never matches fails with the check\'s name, what it expected and the text that came', async () => {
    const f = failed(await runCheck(srv.url, ENGINE_KEY, check('never', { expect: { matches: '^this will never match$' } })));
    assert.equal(f.name, 'never');
    assert.equal(f.expected, 'text matching /^this will never match$/');
    assert.ok(f.got.length > 0 && f.got.length <= 512);
    assert.equal(f.reason.code, 'ROLLOUT_CHECK_FAILED');
    assert.equal(f.reason.message, `check "never" (checks/test.yaml) failed: expected text matching /^this will never match$/, got ${f.got}`);
    garbage = f.got;
  });

  test('determinism: the same check twice gives the same text; a contains of it passes', async () => {
    const again = failed(await runCheck(srv.url, ENGINE_KEY, check('never', { expect: { matches: '^this will never match$' } })));
    assert.equal(again.got, garbage);
    assert.notEqual(garbage, '(empty answer)', 'the tiny model answered nothing; pick another seed');
    const r = await runCheck(srv.url, ENGINE_KEY, check('contains', { expect: { contains: garbage.slice(0, 4), notMatches: '^this will never match$', maxTtftMs: 60_000 } }));
    assert.equal(r.ok, true, JSON.stringify(r));
  });

  test('json_schema on a garbage answer fails saying it is not JSON', async () => {
    const f = failed(await runCheck(srv.url, ENGINE_KEY, check('json', { expect: { jsonSchema: { type: 'object', required: ['answer'] } } })));
    assert.equal(f.expected, "text that is JSON satisfying the check's json_schema");
    assert.match(f.got, /^not JSON \(.+\): /);
    assert.ok(f.got.endsWith(garbage) || f.got.includes('more)'), f.got);
  });

  test('/v1/completions: the text comes from choices[0].text, the same for the same prompt', async () => {
    const c = check('completion', { path: '/v1/completions', request: { prompt: 'Once upon a time', max_tokens: 12 }, expect: { matches: '^this will never match$' } });
    const a = failed(await runCheck(srv.url, ENGINE_KEY, c));
    const b = failed(await runCheck(srv.url, ENGINE_KEY, c));
    assert.notEqual(a.got, '(empty answer)');
    assert.equal(a.got, b.got);
    assert.equal((await runCheck(srv.url, ENGINE_KEY, { ...c, expect: EXPECT })).ok, true);
  });

  test('a bad path gives the 404 body as got', async () => {
    const f = failed(await runCheck(srv.url, ENGINE_KEY, check('bad-path', { path: '/v1/nope' })));
    assert.equal(f.expected, 'status 200');
    assert.match(f.got, /^status 404: \S/);
  });

  test('a path that would leave the replica is refused before any request (the engine key stays home)', async () => {
    const f = failed(await runCheck(srv.url, ENGINE_KEY, check('elsewhere', { path: '@127.0.0.1:9/v1/chat/completions' })));
    assert.equal(f.expected, 'a path on the replica (starting with /)');
    assert.equal(f.got, 'the path "@127.0.0.1:9/v1/chat/completions"');
  });

  test('a prompt beyond the replica\'s context: the 400 body, before any user request would have met it', async () => {
    const f = failed(await runCheck(srv.url, ENGINE_KEY, check('long-prompt', { request: { messages: [{ role: 'user', content: 'word '.repeat(6000) }], max_tokens: 8 } })));
    assert.equal(f.expected, 'status 200');
    assert.match(f.got, /^status 400: .*exceeds the available context size/);
  });

  test('a wrong engine key gives llama-server\'s 401 body', async () => {
    const f = failed(await runCheck(srv.url, 'not-the-engine-key', check('wrong-key')));
    assert.match(f.got, /^status 401: .*Invalid API Key/);
  });

  test('a replica not listening: no answer, saying why', async () => {
    const f = failed(await runCheck(`http://127.0.0.1:${await closedPort()}`, ENGINE_KEY, check('refused')));
    assert.equal(f.expected, 'an answer within 60 s');
    assert.match(f.got, /^no answer: .*ECONNREFUSED/);
  });

  test('runChecks runs in order and stops at the first failure', async () => {
    const results = await runChecks(srv.url, ENGINE_KEY, [check('one'), check('two', { expect: { status: 418 } }), check('three')]);
    assert.deepEqual(results.map((r) => [r.name, r.ok]), [['one', true], ['two', false]]);
    assert.match(failed(results[1]!).got, /^status 200: /);
  });

  test('the caller\'s abort rejects: no verdict', async () => {
    const ac = new AbortController();
    ac.abort(new Error('leadership lost'));
    await assert.rejects(runCheck(srv.url, ENGINE_KEY, check('aborted'), { signal: ac.signal }), /leadership lost/);
  });

  test('a tiny timeout against a long max_tokens fails with "no answer within"; the replica answers the next check', async () => {
    const long = check('slow', { timeoutMs: 5, request: { messages: [{ role: 'user', content: 'Tell a long story.' }], max_tokens: 3000 } });
    const f = failed(await runCheck(srv.url, ENGINE_KEY, long));
    assert.equal(f.expected, 'an answer within 5 ms');
    // the headers may come within the 5 ms on a quiet machine (llama-server sends them before the first token)
    assert.match(f.got, /^no answer within 5 ms$|^no complete answer within 5 ms \(status 200, \d+ characters so far/);
    assert.equal((await runCheck(srv.url, ENGINE_KEY, check('after'))).ok, true);
  });
});
