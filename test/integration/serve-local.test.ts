/**
 * The front door: `npm start` (= `llmgw serve --local`) brings up the bundled local fleet; curl gets
 * a chat completion from the demo model; `llmgw ctl status` shows the parked and unplaceable models
 * with their reasons, and the openai client is refused for them at once; a foreign Host or Origin
 * gets 403 on every route (auth is off: this machine only, #36 N7). Runs the real binary (bin/llmgw.js on dist/) as a child process.
 */
import { strict as assert } from 'node:assert';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { request as httpRequest } from 'node:http';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { parseExposition, sampleValue } from '../../src/metrics/parse.js';
import { freePort } from '../harness/ports.js';
import { repoRoot } from '../harness/paths.js';
import { spawnCli } from '../harness/cli.js';
import { GiveUp, until } from '../harness/wait.js';

let home: string;
let child: ChildProcess;
let stderr = '';
let stdout = '';
let routerPort: number;
let adminPort: number;

/** A probe that gives up once llmgw exited; the waits poll every 500 ms (each look spawns curl or the CLI). */
const whileServing = <T>(probe: () => T | null | undefined | false) => (): T | null | undefined | false => {
  if (child.exitCode !== null) throw new GiveUp(`llmgw exited (${child.exitCode})`);
  return probe();
};
const tails = { everyMs: 500, diag: (): string => `--- llmgw stderr (tail) ---\n${stderr.slice(-3000)}\n--- llmgw log (tail) ---\n${stdout.slice(-6000)}` };

before(async () => {
  home = mkdtempSync(join(tmpdir(), 'llmgw-local-'));
  [routerPort, adminPort] = [await freePort(), await freePort()];
  child = spawn(process.execPath, [join(repoRoot, 'bin', 'llmgw.js'), 'serve', '--local'], {
    cwd: repoRoot,
    env: { ...process.env, LLMGW_LOCAL_HOME: home, LLMGW_ROUTER_LISTEN: `127.0.0.1:${routerPort}`, LLMGW_ADMIN_LISTEN: `127.0.0.1:${adminPort}`, LLMGW_LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  child.stdout!.on('data', (d: Buffer) => (stdout = (stdout + d.toString()).slice(-20_000)));
  await until('llmgw to serve', 15 * 60_000, whileServing(() => stderr.includes('llmgw is serving the local fleet')), tails);
});

after(async () => {
  if (child && child.exitCode === null) {
    child.kill('SIGKILL');
  }
  spawnSync('pkill', ['-9', '-f', `${home}/node/`]);
  rmSync(home, { recursive: true, force: true });
});

describe('npm start: the bundled local fleet', () => {
  it('prints where the router and admin API are and how to try them', () => {
    assert.match(stderr, new RegExp(`router \\(OpenAI API\\): http://127\\.0\\.0\\.1:${routerPort}/v1`));
    assert.match(stderr, /curl .*\/v1\/chat\/completions/);
  });

  it('curl to the router gets a chat completion from the demo model', async () => {
    const body = JSON.stringify({ model: 'demo', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 });
    const reply = await until('a chat completion', 120_000, whileServing(() => {
      const r = spawnSync('curl', ['-sS', '-m', '60', '-w', '\n%{http_code}', `http://127.0.0.1:${routerPort}/v1/chat/completions`, '-H', 'content-type: application/json', '-d', body], { encoding: 'utf8' });
      const [text = '', code = ''] = [r.stdout.slice(0, r.stdout.lastIndexOf('\n')), r.stdout.slice(r.stdout.lastIndexOf('\n') + 1)];
      return code === '200' ? (JSON.parse(text) as { choices: { message: { content: string } }[]; usage: { completion_tokens: number } }) : null;
    }), tails);
    assert.equal(reply.usage.completion_tokens, 8);
    assert.ok(reply.choices[0]!.message.content.length > 0);
  });

  it('`llmgw ctl status` shows the parked and the unplaceable model with their reasons', async () => {
    const out = await until('kev-demo parked and huge-demo unplaceable', 180_000, whileServing(() => {
      const r = spawnCli(['ctl', 'status', '--server', `http://127.0.0.1:${adminPort}`]);
      return /parked/i.test(r.stdout) && r.stdout.includes('kev-demo') && /unknown model architecture/.test(r.stdout) && /needs 4 TiB/.test(r.stdout) ? r.stdout : null;
    }), tails);
    assert.match(out, /huge-demo/);
    assert.match(out, /demo\s+.*1\/1/);
  });

  it('the openai client (default retries) is refused at once for the parked and the unplaceable model; the router saw one request each', async () => {
    // the real stack: the reconciler parked kev-demo and found huge-demo unplaceable (previous test)
    const client = new OpenAI({ baseURL: `http://127.0.0.1:${routerPort}/v1`, apiKey: 'unused-auth-is-off-locally' });
    const answered = async (model: string, code: number, reason: string): Promise<number> => {
      const r = await fetch(`http://127.0.0.1:${adminPort}/metrics`);
      return sampleValue(parseExposition(await r.text()), 'llmgw_router_requests_total', { model, code: String(code), reason }) ?? 0;
    };
    for (const [model, code, reason, catalogueCode] of [
      ['kev-demo', 'model_parked', /unknown model architecture.*llmgw ctl retry kev-demo|llmgw ctl retry kev-demo.*unknown model architecture/s, 'MODEL_PARKED'],
      ['huge-demo', 'model_unplaceable', /needs 4 TiB/, 'MODEL_UNPLACEABLE'],
    ] as const) {
      const before = await answered(model, 503, catalogueCode);
      const t = performance.now();
      const err = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }).then(
        () => assert.fail(`${model} was served`),
        (e: unknown) => e,
      );
      const ms = performance.now() - t;
      assert.ok(err instanceof OpenAI.APIError, String(err));
      assert.equal(err.status, 503);
      assert.equal(err.code, code);
      assert.match(err.message, reason);
      assert.equal((await answered(model, 503, catalogueCode)) - before, 1, `${model}: the SDK retried (or the refusal was not counted with its reason)`);
      assert.ok(ms < 5000, `${model}: ${ms} ms`);
    }
  });

  it('#36 N7: auth off means this machine only: a foreign Host or Origin gets 403 with its reason on admin and router routes (a no-body POST …/retry included); loopback is served', async () => {
    const send = (port: number, method: string, path: string, headers: Record<string, string>, body?: string): Promise<{ status: number; reason: string; code: string }> =>
      new Promise((resolve, reject) => {
        const req = httpRequest({ host: '127.0.0.1', port, method, path, headers: { ...headers, ...(body !== undefined ? { 'content-length': String(Buffer.byteLength(body)) } : {}) }, agent: false }, (res) => {
          let text = '';
          res.on('data', (c: Buffer) => (text += c.toString()));
          res.on('end', () => {
            let code = '';
            try {
              code = String((JSON.parse(text) as { error?: { code?: string } }).error?.code ?? '');
            } catch {
              code = '';
            }
            resolve({ status: res.statusCode ?? 0, reason: String(res.headers['x-llmgw-reason'] ?? ''), code });
          });
        });
        req.on('error', reject);
        req.end(body);
      });
    const evilPage = { host: `127.0.0.1:${adminPort}`, origin: 'http://evil.example' };
    // CSRF: a page's no-body POST needs no preflight
    assert.deepEqual(await send(adminPort, 'POST', '/admin/v1/models/kev-demo/retry', evilPage), { status: 403, reason: '', code: 'FOREIGN_ORIGIN' });
    // DNS rebinding: evil.example resolving to 127.0.0.1
    for (const path of ['/admin/v1/status', '/admin/v1/replicas', '/metrics', '/ui/', '/healthz']) {
      assert.deepEqual(await send(adminPort, 'GET', path, { host: `evil.example:${adminPort}` }), { status: 403, reason: '', code: 'FOREIGN_HOST' }, path);
    }
    assert.deepEqual(await send(adminPort, 'POST', '/admin/v1/restart', { host: `evil.example:${adminPort}`, 'content-type': 'application/json' }, '{"all":true}'), { status: 403, reason: '', code: 'FOREIGN_HOST' });
    const chat = JSON.stringify({ model: 'demo', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
    assert.deepEqual(await send(routerPort, 'POST', '/v1/chat/completions', { host: `evil.example:${routerPort}`, 'content-type': 'application/json' }, chat), { status: 403, reason: 'FOREIGN_HOST', code: 'foreign_host' });
    assert.deepEqual(await send(routerPort, 'POST', '/v1/chat/completions', { host: `127.0.0.1:${routerPort}`, origin: 'http://evil.example', 'content-type': 'application/json' }, chat), { status: 403, reason: 'FOREIGN_ORIGIN', code: 'foreign_origin' });
    assert.deepEqual(await send(routerPort, 'GET', '/v1/models', { host: `evil.example:${routerPort}` }), { status: 403, reason: 'FOREIGN_HOST', code: 'foreign_host' });
    // a page's text/plain body (no preflight) is not read as JSON
    assert.deepEqual(await send(routerPort, 'POST', '/v1/chat/completions', { host: `127.0.0.1:${routerPort}`, 'content-type': 'text/plain;charset=UTF-8' }, chat), { status: 415, reason: 'UNSUPPORTED_MEDIA_TYPE', code: 'unsupported_media_type' });
    // this machine: served (ctl and the page are the tests above and ui-browser)
    assert.equal((await send(adminPort, 'GET', '/admin/v1/status', { host: `localhost:${adminPort}` })).status, 200);
    assert.equal((await send(adminPort, 'GET', '/admin/v1/status', { host: `127.0.0.1:${adminPort}`, origin: `http://127.0.0.1:${adminPort}` })).status, 200);
    assert.equal((await send(routerPort, 'POST', '/v1/chat/completions', { host: `127.0.0.1:${routerPort}`, 'content-type': 'application/json' }, chat)).status, 200);
  });

  it('SIGTERM shuts it down gracefully; the demo replica keeps running for the next start to adopt', async () => {
    child.kill('SIGTERM');
    const code = await new Promise<number | null>((r) => child.once('exit', r));
    assert.equal(code, 0, stderr.slice(-2000));
    const ps = spawnSync('pgrep', ['-f', `${home}/node/`], { encoding: 'utf8' });
    assert.ok(ps.stdout.trim().length > 0, 'the replica is still running');
  });
});
