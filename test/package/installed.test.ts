/**
 * llmgw as a user installs it: `npm pack` of this checkout, the tarball installed into an empty
 * folder with the README's install line (`npm install --ignore-scripts`), then the installed
 * `llmgw` binary — through npm's bin link, on the Node that runs this test — runs `--version`,
 * `validate` on the packaged example fleet, `plan` on a git copy of it, and `serve --local`, whose
 * router answers a chat from the real llama-server (the engine found by the packaged
 * scripts/build-llama-server.sh in its cache) and whose admin port serves the built status page.
 */
import { strict as assert } from 'node:assert';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { freePort } from '../harness/ports.js';
import { repoRoot } from '../harness/paths.js';
import { GiveUp, until } from '../harness/wait.js';

const version = (JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')) as { version: string }).version;
/** npm and the installed `llmgw` (#!/usr/bin/env node) run on the Node that runs this test. */
const env = { ...process.env, PATH: `${dirname(process.execPath)}${delimiter}${process.env.PATH ?? ''}`, NO_COLOR: '1' };

let work: string;
let installDir: string;
let installed: string;
let npmInstall: { code: number | null; stderr: string; stdout: string };

function sh(cmd: string, args: readonly string[], cwd: string, extra: NodeJS.ProcessEnv = {}): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(cmd, args, { cwd, env: { ...env, ...extra }, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  if (r.error) throw r.error;
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}
const llmgw = (args: readonly string[], cwd = installDir) => sh(join(installDir, 'node_modules', '.bin', 'llmgw'), args, cwd);

before(() => {
  work = mkdtempSync(join(tmpdir(), 'llmgw-package-'));
  // dist/ is what the package ships: built by `npm test` (tsc) before the tests run, so the pack
  // skips `prepare` rather than compile it twice.
  const pack = sh('npm', ['pack', '--ignore-scripts', '--pack-destination', work, '--json'], repoRoot);
  assert.equal(pack.code, 0, pack.stderr);
  const [{ filename }] = JSON.parse(pack.stdout) as [{ filename: string }];
  installDir = join(work, 'install');
  mkdirSync(installDir);
  npmInstall = sh('npm', ['install', '--ignore-scripts', '--no-audit', '--no-fund', join(work, filename)], installDir);
  assert.equal(npmInstall.code, 0, npmInstall.stderr);
  installed = join(installDir, 'node_modules', 'llmgw');
});

after(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

describe('the packed tarball installed into an empty folder', () => {
  it('installs without a warning a user would have to interpret (no EBADENGINE, no install-scripts list)', () => {
    const warnings = `${npmInstall.stderr}\n${npmInstall.stdout}`.split('\n').filter((l) => /\bwarn\b/i.test(l));
    assert.deepEqual(warnings, [], `npm install printed:\n${npmInstall.stderr}`);
  });

  it('ships what the installed commands read: dist/, the status page script, schemas, the example fleet, the engine build script', () => {
    for (const f of ['bin/llmgw.js', 'dist/src/cli/main.js', 'dist/src/ui/web/app.js', 'schemas', 'example-fleet-repo/fleet.yaml', 'scripts/build-llama-server.sh', 'alerts/llmgw.rules.yaml']) {
      assert.ok(existsSync(join(installed, f)), `${f} is not in the installed package`);
    }
    assert.ok(!existsSync(join(installed, 'test')) && !existsSync(join(installed, 'dist', 'test')), 'the tests are not shipped');
  });

  it('`llmgw --version` prints the package version', () => {
    const r = llmgw(['--version']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout.trim(), new RegExp(`^(llmgw )?${version.replace(/\./g, '\\.')}$`));
  });

  it('`llmgw validate` passes the packaged example fleet', () => {
    const r = llmgw(['validate', join(installed, 'example-fleet-repo')]);
    assert.equal(r.code, 0, r.stderr + r.stdout);
    assert.match(r.stdout, /valid — 3 nodes, 1 engine \(2 versions\), 3 profiles, 4 models, 3 keys/);
  });

  it('`llmgw plan` says what a branch adding a model would do to the example fleet', () => {
    const repo = join(work, 'fleet');
    cpSync(join(installed, 'example-fleet-repo'), repo, { recursive: true });
    const git = (...args: string[]) => {
      const r = sh('git', ['-c', 'user.name=t', '-c', 'user.email=t@example.com', ...args], repo);
      assert.equal(r.code, 0, r.stderr);
    };
    git('init', '-q', '-b', 'main');
    git('add', '-A');
    git('commit', '-qm', 'the example fleet');
    git('checkout', '-qb', 'add-model');
    const [model] = sh('git', ['ls-files', 'models'], repo).stdout.trim().split('\n');
    // the same model under another name: without its aliases (one namespace) and with its memory
    // need given (the planner reads no GGUF header from the network)
    const copy = readFileSync(join(repo, model!), 'utf8').replace(/^aliases:.*\n/m, '').replace(/^memory:.*\n/m, '');
    writeFileSync(join(repo, 'models', 'copied-model.yaml'), `${copy}memory: 6GiB\n`);
    git('add', '-A');
    git('commit', '-qm', 'add copied-model');
    const r = llmgw(['plan', repo]);
    assert.equal(r.code, 1, `exit 1: changes\n${r.stderr}${r.stdout}`);
    assert.match(r.stdout, /\+ copied-model\s+added/);
    assert.match(r.stdout, /1 model changes/);
  });
});

describe('`llmgw serve --local` from the installed package', () => {
  let child: ChildProcess;
  let home: string;
  let stderr = '';
  let stdout = '';
  let routerPort: number;
  let adminPort: number;
  const whileServing = <T>(probe: () => T | Promise<T>) => (): T | Promise<T> => {
    if (child.exitCode !== null) throw new GiveUp(`llmgw exited (${child.exitCode})`);
    return probe();
  };
  const tails = { diag: (): string => `--- llmgw stderr (tail) ---\n${stderr.slice(-3000)}\n--- llmgw log (tail) ---\n${stdout.slice(-6000)}` };

  before(async () => {
    home = join(work, 'local');
    [routerPort, adminPort] = [await freePort(), await freePort()];
    child = spawn(join(installDir, 'node_modules', '.bin', 'llmgw'), ['serve', '--local'], {
      cwd: installDir,
      env: { ...env, LLMGW_LOCAL_HOME: home, LLMGW_ROUTER_LISTEN: `127.0.0.1:${routerPort}`, LLMGW_ADMIN_LISTEN: `127.0.0.1:${adminPort}`, LLMGW_LOG_FORMAT: 'json' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    child.stdout!.on('data', (d: Buffer) => (stdout = (stdout + d.toString()).slice(-20_000)));
    // The engine comes from the cache that scripts/build-llama-server.sh fills (built once, ~10 min on 2 cores).
    await until('llmgw to serve', 15 * 60_000, whileServing(() => stderr.includes('llmgw is serving the local fleet')), { ...tails, everyMs: 200 });
  });

  after(async () => {
    if (child && child.exitCode === null) {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
    }
    // The replicas outlive llmgw by design (the next start adopts them): stop this test's.
    if (home) spawnSync('pkill', ['-9', '-f', `${home}/node/`]);
  });

  it('the router answers a chat from the demo model (the official openai client)', async () => {
    const client = new OpenAI({ baseURL: `http://127.0.0.1:${routerPort}/v1`, apiKey: 'unused-auth-is-off-locally', maxRetries: 0 });
    const reply = await until('a chat completion from the demo model', 180_000, whileServing(() =>
      client.chat.completions.create({ model: 'demo', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 }),
    ), tails);
    assert.equal(reply.usage?.completion_tokens, 8);
    assert.ok((reply.choices[0]?.message.content ?? '').length > 0);
  });

  it('the admin port serves the status page with its built script', async () => {
    const r = await fetch(`http://127.0.0.1:${adminPort}/ui/app.js`);
    assert.equal(r.status, 200);
    const js = await r.text();
    assert.doesNotMatch(js, /was not built/);
    assert.ok(js.length > 1000, `app.js is ${js.length} bytes`);
  });

  it('SIGTERM stops it with exit 0', async () => {
    child.kill('SIGTERM');
    const code = await new Promise<number | null>((r) => child.once('exit', r));
    assert.equal(code, 0, stderr.slice(-2000));
  });
});
