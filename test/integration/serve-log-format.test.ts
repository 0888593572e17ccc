/**
 * `llmgw serve` logs JSON lines under a pipe (unchanged, for log shippers) and compact readable
 * lines on a terminal — a real pseudo-terminal from util-linux `script` — and so does `npm start`.
 * Runs the real binary (bin/llmgw.js on dist/) as a child process. Its start line says how it sized
 * its V8 heap (by itself, or node's flags).
 */
import { strict as assert } from 'node:assert';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { repoRoot } from '../harness/paths.js';
import { cleanupTempDirs, WorkRepo } from '../harness/git.js';

let root: string;
let fleetDir: string;
const ANSI = /\x1b\[[0-9;]*m/g;
/** "[HH:MM:ss.mmm] LEVEL: message {fields}" as pino-pretty writes it here. */
const READABLE = /^\[\d\d:\d\d:\d\d\.\d{3}\] (TRACE|DEBUG|INFO|WARN|ERROR|FATAL): \S/;

before(async () => {
  root = mkdtempSync(join(tmpdir(), 'llmgw-logfmt-'));
  const repo = await WorkRepo.init();
  await repo.write({ 'fleet.yaml': 'poll_interval: 1h\n' });
  await repo.commit('an empty fleet');
  fleetDir = repo.dir;
});

after(async () => {
  rmSync(root, { recursive: true, force: true });
  await cleanupTempDirs();
});

/** Runs until stdout has `until` (or the child exits), then SIGTERMs its process group; the output. */
function runUntil(cmd: string, args: readonly string[], env: NodeJS.ProcessEnv, until: RegExp, timeoutMs: number): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child: ChildProcess = spawn(cmd, args, { cwd: repoRoot, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let stdout = '';
    let stderr = '';
    let done = false;
    const finish = (): void => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      try {
        process.kill(-child.pid!, 'SIGTERM');
      } catch {
        // already gone
      }
    };
    const timer = setTimeout(() => {
      finish();
      reject(new Error(`timed out waiting for ${until} from ${cmd} ${args.join(' ')}\n--- stdout ---\n${stdout.slice(-3000)}\n--- stderr ---\n${stderr.slice(-3000)}`));
    }, timeoutMs);
    child.stdout!.on('data', (d: Buffer) => {
      stdout += d.toString();
      if (until.test(stdout.replace(ANSI, ''))) finish();
    });
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('exit', () => {
      clearTimeout(timer);
      if (!done) {
        done = true;
        if (!until.test(stdout.replace(ANSI, ''))) return reject(new Error(`${cmd} exited before ${until}\n${stdout.slice(-3000)}\n${stderr.slice(-3000)}`));
      }
      resolve({ stdout, stderr });
    });
  });
}

const serveArgs = (name: string): string[] => [
  join(repoRoot, 'bin', 'llmgw.js'),
  'serve',
  '--fleet', fleetDir,
  '--state-dir', join(root, name, 'state'),
  '--secrets-dir', join(root, name, 'secrets'),
  '--router-listen', '127.0.0.1:0',
  '--admin-listen', '127.0.0.1:0',
];
const shellQuote = (a: string): string => `'${a.replace(/'/g, `'\\''`)}'`;
const lines = (s: string): string[] => s.replace(ANSI, '').split(/\r?\n/).map((l) => l.replace(/\r/g, '')).filter((l) => l.trim() !== '');

describe('log format', () => {
  it('under a pipe, llmgw serve writes one JSON object per line', async () => {
    const { stdout } = await runUntil(process.execPath, serveArgs('pipe'), { ...process.env, LLMGW_LOG_FORMAT: '' }, /"msg":"llmgw serving"/, 30_000);
    const ls = lines(stdout);
    assert.ok(ls.length >= 3, stdout);
    for (const l of ls) {
      const o = JSON.parse(l) as { level: number; time: number; msg: string; service: string };
      assert.equal(typeof o.level, 'number');
      assert.equal(typeof o.time, 'number');
      assert.equal(o.service, 'llmgw');
    }
    const serving = ls.map((l) => JSON.parse(l) as { msg: string; heap?: unknown }).find((o) => o.msg === 'llmgw serving');
    // started as the service starts it (no node flags), the serve sized its own heap (src/serve/heap-sizing.ts)
    assert.deepEqual(serving?.heap, { youngCapBytes: 4 * 2 ** 20, growingPercent: 20 });
  });

  it("a heap flag given to node is node's: the serve's start log says it left the young generation alone", async () => {
    const { stdout } = await runUntil(process.execPath, serveArgs('node-options'), { ...process.env, LLMGW_LOG_FORMAT: '', NODE_OPTIONS: '--max-semi-space-size=8' }, /"msg":"llmgw serving"/, 30_000);
    const serving = lines(stdout).map((l) => JSON.parse(l) as { msg: string; heap?: unknown }).find((o) => o.msg === 'llmgw serving');
    assert.deepEqual(serving?.heap, { youngCapBytes: null, growingPercent: 20 });
  });

  it('on a terminal, llmgw serve writes readable lines: time, level, message, fields', async () => {
    const cmd = [process.execPath, ...serveArgs('tty')].map(shellQuote).join(' ');
    const { stdout } = await runUntil('script', ['-qfec', cmd, '/dev/null'], { ...process.env, LLMGW_LOG_FORMAT: '' }, /INFO: llmgw serving/, 30_000);
    const logLines = lines(stdout).filter((l) => !l.startsWith('llmgw: ')); // the CLI's own notes (admin token file)
    assert.ok(logLines.length >= 3, stdout);
    for (const l of logLines) assert.match(l, READABLE);
    const serving = logLines.find((l) => l.includes('INFO: llmgw serving'))!;
    assert.match(serving, /"fleet":"[^"]+","routerAuth":true/, 'the fields follow on the same line');
    assert.ok(!logLines.some((l) => l.startsWith('{')), 'no JSON lines');
    assert.match(stdout, /\x1b\[32mINFO/, 'colored on a terminal');
  });

  it('--log-format json keeps JSON on a terminal', async () => {
    const cmd = [process.execPath, ...serveArgs('tty-json'), '--log-format', 'json'].map(shellQuote).join(' ');
    const { stdout } = await runUntil('script', ['-qfec', cmd, '/dev/null'], process.env, /"msg":"llmgw serving"/, 30_000);
    for (const l of lines(stdout).filter((x) => !x.startsWith('llmgw: '))) assert.doesNotThrow(() => JSON.parse(l), l);
  });

  it('npm start in a terminal prints readable log lines', async () => {
    const home = join(root, 'npm-start');
    try {
      const { stdout } = await runUntil('script', ['-qfec', 'npm start', '/dev/null'], { ...process.env, LLMGW_LOCAL_HOME: home, LLMGW_ROUTER_LISTEN: '127.0.0.1:0', LLMGW_ADMIN_LISTEN: '127.0.0.1:0', LLMGW_LOG_FORMAT: '' }, /INFO: llmgw serving/, 10 * 60_000);
      const logLines = lines(stdout).filter((l) => /^\[\d\d:\d\d:\d\d/.test(l));
      assert.ok(logLines.length >= 3, stdout);
      for (const l of logLines) assert.match(l, READABLE);
      assert.ok(!lines(stdout).some((l) => l.startsWith('{"level"')), 'no JSON log lines');
    } finally {
      // the demo's replicas are detached from llmgw: stop the ones of this home
      spawnSync('pkill', ['-9', '-f', `${home}/`]);
    }
  });
});
