/**
 * Fault 2, end to end: the state dir's engine key is lost (deleted between two runs of a real
 * `llmgw serve --local`). The new controller makes a new key; the running demo replica, started with
 * the old one, would refuse every proxied request (401 → 502 upstream_auth) forever. It is replaced
 * surge-first instead, the log says why, and the router answers 200 again.
 */
import { strict as assert } from 'node:assert';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { llamaServerDir } from '../harness/llama-server.js';
import { freePort } from '../harness/ports.js';
import { repoRoot } from '../harness/paths.js';
import { until } from '../harness/wait.js';
import { recordFault } from '../harness/fault-report.js';
import { SecretsScan } from '../harness/secrets-scan.js';

const home = mkdtempSync(join(tmpdir(), 'llmgw-fault-lost-key-'));
let child: ChildProcess | null = null;
let out = '';

after(() => {
  if (child && child.exitCode === null) child.kill('SIGKILL');
  spawnSync('pkill', ['-9', '-f', `${home}/node/`]);
  rmSync(home, { recursive: true, force: true });
});

async function serve(routerPort: number, adminPort: number): Promise<ChildProcess> {
  const c = spawn(process.execPath, [join(repoRoot, 'bin', 'llmgw.js'), 'serve', '--local'], {
    cwd: repoRoot,
    env: { ...process.env, LLMGW_LOCAL_HOME: home, LLMGW_ENGINE_DIR: await llamaServerDir(), LLMGW_ROUTER_LISTEN: `127.0.0.1:${routerPort}`, LLMGW_ADMIN_LISTEN: `127.0.0.1:${adminPort}`, LLMGW_LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  c.stdout!.on('data', (d: Buffer) => (out = (out + d.toString()).slice(-400_000)));
  c.stderr!.on('data', (d: Buffer) => (out = (out + d.toString()).slice(-400_000)));
  return c;
}

async function chat(routerPort: number): Promise<number> {
  const r = await fetch(`http://127.0.0.1:${routerPort}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'demo', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }),
  }).catch(() => null);
  await r?.arrayBuffer();
  return r?.status ?? 0;
}

const logTail = (): string => out.slice(-5000);

describe('fault 2: a lost engine key', () => {
  it('replicas started with the old key are replaced surge-first and the router answers 200 again', async () => {
    const [routerPort, adminPort] = [await freePort(), await freePort()];
    child = await serve(routerPort, adminPort);
    await until('the demo model served', 300_000, async () => (await chat(routerPort)) === 200, { diag: logTail });
    const exited = new Promise((r) => child!.once('exit', r));
    child.kill('SIGTERM'); // replicas keep running, as after any controller stop
    await exited;
    const oldKey = readFileSync(join(home, 'state', 'engine-api-key'), 'utf8').trim();
    rmSync(join(home, 'state', 'engine-api-key'));
    const first = out;
    out = '';

    child = await serve(routerPort, adminPort);
    const t0 = Date.now();
    await until('the router answering 200 with the new key', 120_000, async () => (await chat(routerPort)) === 200, { diag: logTail });
    const took = Date.now() - t0;
    // the router answers through the new replica once it is ready; the old one is stopped after its
    // drain (routing settles first), so its stop and the reason logged with it come a little later
    await until('the old-key replica stopped, with the reason', 60_000, async () => /"msg":"replica started with another engine key \(it refuses the router\): replaced"/.test(out) && /"reason":"replaced"/.test(out), { diag: logTail });
    const scan = new SecretsScan().secret('new engine key', readFileSync(join(home, 'state', 'engine-api-key'), 'utf8').trim()).secret('old engine key', oldKey);
    scan.collect('llmgw serve output (both runs)', `${first}\n${out}`);
    scan.assertClean();
    assert.match(out, /"msg":"replica started with another engine key \(it refuses the router\): replaced"/);
    assert.match(out, /"reason":"replaced"/);
    recordFault({
      fault: '2 a lost state dir gives a 502 forever',
      injected: 'the engine-api-key deleted between two runs of a real `llmgw serve --local` with its demo replica running',
      held: `the replica started with the old key was replaced surge-first (logged why) and the router answered 200 again ${Math.round(took / 1000)} s after the restart; ${scan.summary}`,
    });
  });
});
