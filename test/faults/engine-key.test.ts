/**
 * Fault 1: the engine key fails open. A zero-length `engine-api-key` in the state dir (a crash
 * between create and write left one) used to be read as the key '', and replicas started without
 * LLAMA_API_KEY. Now an empty key file is regenerated (atomically) and a malformed one refused with
 * the file named; an operator's empty admin-token file is refused too. Against the real
 * `llmgw serve --local` child and its real llama-server replica.
 */
import { strict as assert } from 'node:assert';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { llamaServerDir } from '../harness/llama-server.js';
import { freePort } from '../harness/ports.js';
import { repoRoot } from '../harness/paths.js';
import { spawnCli } from '../harness/cli.js';
import { recordFault } from '../harness/fault-report.js';
import { SecretsScan } from '../harness/secrets-scan.js';
import { GiveUp, until } from '../harness/wait.js';

const homes: string[] = [];
const children: ChildProcess[] = [];

after(() => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  for (const h of homes) {
    spawnSync('pkill', ['-9', '-f', `${h}/node/`]);
    rmSync(h, { recursive: true, force: true });
  }
});

function home(): string {
  const h = mkdtempSync(join(tmpdir(), 'llmgw-fault-key-'));
  homes.push(h);
  mkdirSync(join(h, 'state'), { recursive: true, mode: 0o700 });
  return h;
}

describe('fault 1: an empty or malformed engine key file is never used', () => {
  it('an empty engine-api-key is regenerated atomically; the replica refuses a request without the key (401)', async () => {
    const h = home();
    const keyFile = join(h, 'state', 'engine-api-key');
    writeFileSync(keyFile, '', { mode: 0o600 }); // what a crash between create and write leaves
    const [routerPort, adminPort] = [await freePort(), await freePort()];
    const engineDir = await llamaServerDir();
    let out = '';
    let err = '';
    const child = spawn(process.execPath, [join(repoRoot, 'bin', 'llmgw.js'), 'serve', '--local'], {
      cwd: repoRoot,
      env: { ...process.env, LLMGW_LOCAL_HOME: h, LLMGW_ENGINE_DIR: engineDir, LLMGW_ROUTER_LISTEN: `127.0.0.1:${routerPort}`, LLMGW_ADMIN_LISTEN: `127.0.0.1:${adminPort}`, LLMGW_LOG_LEVEL: 'debug' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    children.push(child);
    child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    const logs = { diag: (): string => `${err}\n${out}`.slice(-4000) };
    await until('llmgw to serve', 120_000, () => {
      if (child.exitCode !== null) throw new GiveUp(`llmgw exited ${child.exitCode}`);
      return err.includes('llmgw is serving');
    }, logs);

    const key = readFileSync(keyFile, 'utf8').trim();
    assert.match(key, /^[A-Za-z0-9_-]{32}$/, 'a new key was written');
    assert.equal(statSync(keyFile).mode & 0o777, 0o600);
    assert.deepEqual(readdirSync(join(h, 'state')).filter((f) => f.includes('.tmp-')), [], 'no temp file left');
    assert.match(out, /engine API key file was empty/);

    // the demo replica, straight on its port (not through the router)
    const replicas = join(h, 'node', 'replicas');
    const port = await until('the demo replica to be healthy', 120_000, async () => {
      if (!existsSync(replicas)) return null;
      for (const id of readdirSync(replicas)) {
        const f = join(replicas, id, 'state.json');
        if (!existsSync(f) || !readFileSync(f, 'utf8').includes('"demo"')) continue;
        const p = Number(readFileSync(join(replicas, id, 'port'), 'utf8').trim());
        const ok = await fetch(`http://127.0.0.1:${p}/health`).then((r) => r.status === 200, () => false);
        if (ok) return p;
      }
      return null;
    }, logs);
    const completion = (headers: Record<string, string>): Promise<Response> =>
      fetch(`http://127.0.0.1:${port}/completion`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify({ prompt: 'hi', n_predict: 2 }) });
    const anon = await completion({});
    assert.equal(anon.status, 401, 'no key: refused');
    const wrong = await completion({ authorization: 'Bearer not-the-engine-key' });
    assert.equal(wrong.status, 401, 'wrong key: refused');
    const right = await completion({ authorization: `Bearer ${key}` });
    assert.equal(right.status, 200, 'the engine key: served');
    await right.text();

    // the secrets never show: logs, status, metrics
    const scan = new SecretsScan().secret('engine key', key);
    scan.collect('llmgw stdout', out);
    scan.collect('llmgw stderr', err);
    for (const path of ['/admin/v1/status', '/admin/v1/replicas', '/admin/v1/models', '/metrics']) {
      scan.collect(path, await (await fetch(`http://127.0.0.1:${adminPort}${path}`)).text());
    }
    scan.collect('replica log', readdirSync(replicas).map((id) => (existsSync(join(replicas, id, 'log')) ? readFileSync(join(replicas, id, 'log'), 'utf8') : '')).join('\n'));
    scan.assertClean();

    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
    recordFault({ fault: '1 engine key fails open', injected: 'empty engine-api-key in the state dir of a real `llmgw serve --local`', held: `key regenerated (32 chars, 0600, no temp left), the replica answers 401 without or with a wrong key and 200 with it; ${scan.summary}` });
  });

  it('a malformed engine-api-key is refused with the file named; the file is left as it was', async () => {
    const h = home();
    const keyFile = join(h, 'state', 'engine-api-key');
    writeFileSync(keyFile, 'half-a-k\n', { mode: 0o600 });
    const r = spawnCli(['serve', '--fleet', join(h, 'no-fleet'), '--state-dir', join(h, 'state'), '--no-admin-auth', '--router-listen', '127.0.0.1:0', '--admin-listen', '127.0.0.1:0']);
    assert.equal(r.code, 2, r.stderr);
    assert.ok(r.stderr.includes(keyFile), r.stderr);
    assert.match(r.stderr, /delete it and llmgw generates a new one/);
    assert.equal(readFileSync(keyFile, 'utf8'), 'half-a-k\n');
    recordFault({ fault: '1 engine key fails open', injected: 'a malformed (9-character) engine-api-key', held: 'serve exits 2 naming the file and the fix; the file is untouched' });
  });

  it('a 1-character admin token, webhook secret or $LLMGW_ADMIN_TOKEN is refused at start with SECRET_TOO_SHORT naming it', () => {
    for (const [flag, what] of [['--admin-token-file', 'admin token'], ['--webhook-secret-file', 'webhook secret'], ['env', 'admin token']] as const) {
      const h = home();
      const f = join(h, 'short-secret');
      writeFileSync(f, 'x\n', { mode: 0o600 });
      const args = ['serve', '--fleet', join(h, 'no-fleet'), '--state-dir', join(h, 'state'), '--router-listen', '127.0.0.1:0', '--admin-listen', '127.0.0.1:0'];
      if (flag !== 'env') args.push(flag, f);
      if (flag === '--webhook-secret-file') args.push('--no-admin-auth');
      const r = spawnCli(args, undefined, flag === 'env' ? { ...process.env, LLMGW_ADMIN_TOKEN: 'x' } : process.env);
      assert.equal(r.code, 2, r.stderr);
      assert.match(r.stderr, /SECRET_TOO_SHORT/);
      assert.ok(r.stderr.includes(`the ${what} in ${flag === 'env' ? '$LLMGW_ADMIN_TOKEN' : `the file ${f}`} is 1 characters`), r.stderr);
    }
    recordFault({ fault: '1 engine key fails open', injected: 'a 1-character admin token (file and env) and webhook secret', held: 'serve exits 2 with SECRET_TOO_SHORT naming the secret' });
  });

  it('an empty --admin-token-file or webhook secret file is refused with the file named', () => {
    for (const [flag, what] of [['--admin-token-file', 'admin token'], ['--webhook-secret-file', 'webhook secret']] as const) {
      const h = home();
      const f = join(h, 'empty-secret');
      writeFileSync(f, '\n', { mode: 0o600 });
      const args = ['serve', '--fleet', join(h, 'no-fleet'), '--state-dir', join(h, 'state'), flag, f, '--router-listen', '127.0.0.1:0', '--admin-listen', '127.0.0.1:0'];
      if (flag === '--webhook-secret-file') args.push('--no-admin-auth');
      const r = spawnCli(args);
      assert.equal(r.code, 2, r.stderr);
      assert.ok(r.stderr.includes(`the ${what} file ${f} is empty`), r.stderr);
    }
    recordFault({ fault: '1 engine key fails open', injected: 'an empty --admin-token-file and --webhook-secret-file', held: 'serve exits 2 naming the file' });
  });
});
