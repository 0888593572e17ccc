/**
 * A real `llmgw serve` child for the fault tests: a fleet repo made with the git CLI on disk (a path,
 * not a remote), a `local` node (this machine, no SSH) and whatever files the test gives. Collects
 * the child's output; logs are pino JSON lines on stdout.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { freePort } from './ports.js';
import { repoRoot } from './paths.js';
import { GiveUp, until } from './wait.js';

export interface ServeChild {
  readonly home: string;
  readonly routerPort: number;
  readonly adminPort: number;
  readonly pid: number;
  readonly child: ChildProcess;
  out: string;
  err: string;
  /** Resident set size of the child, bytes (from /proc). */
  rss(): number;
  stop(): Promise<void>;
}

export function gitCommit(dir: string, files: Record<string, string>, message: string): void {
  for (const [p, c] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, p)), { recursive: true });
    writeFileSync(join(dir, p), c);
  }
  const run = (args: string[]): void => {
    const r = spawnSync('git', args, { cwd: dir, encoding: 'utf8', env: { ...process.env, GIT_AUTHOR_NAME: 'op', GIT_AUTHOR_EMAIL: 'op@example.invalid', GIT_COMMITTER_NAME: 'op', GIT_COMMITTER_EMAIL: 'op@example.invalid' } });
    if (r.status !== 0) throw new Error(`git ${args.join(' ')}: ${r.stderr}`);
  };
  run(['add', '-A']);
  run(['commit', '-q', '-m', message]);
}

export async function startServeChild(o: { files: (home: string) => Record<string, string>; args?: string[]; env?: Record<string, string> }): Promise<ServeChild> {
  const home = mkdtempSync(join(tmpdir(), 'llmgw-fault-serve-'));
  const fleet = join(home, 'fleet');
  mkdirSync(fleet);
  mkdirSync(join(home, 'secrets'), { mode: 0o700 });
  mkdirSync(join(home, 'node'));
  spawnSync('git', ['init', '-q', '-b', 'main', fleet]);
  gitCommit(fleet, o.files(home), 'the fleet');
  const [routerPort, adminPort] = [await freePort(), await freePort()];
  const child = spawn(
    process.execPath,
    [join(repoRoot, 'bin', 'llmgw.js'), 'serve', '--fleet', fleet, '--state-dir', join(home, 'state'), '--secrets-dir', join(home, 'secrets'), '--router-listen', `127.0.0.1:${routerPort}`, '--admin-listen', `127.0.0.1:${adminPort}`, ...(o.args ?? [])],
    { cwd: home, env: { ...process.env, LLMGW_LOG_LEVEL: 'info', ...(o.env ?? {}) }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const sc: ServeChild = {
    home,
    routerPort,
    adminPort,
    pid: child.pid!,
    child,
    out: '',
    err: '',
    rss() {
      const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'));
      return Number(m![1]) * 1024;
    },
    async stop() {
      if (child.exitCode === null) {
        child.kill('SIGKILL');
        await new Promise((r) => child.once('exit', r));
      }
      spawnSync('pkill', ['-9', '-f', `${home}/node/`]);
      rmSync(home, { recursive: true, force: true });
    },
  };
  child.stdout!.on('data', (d: Buffer) => (sc.out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (sc.err += d.toString()));
  await until('llmgw serve to come up', 60_000, () => {
    if (child.exitCode !== null) throw new GiveUp(`llmgw serve exited ${child.exitCode}`);
    return sc.out.includes('"llmgw serving"');
  }, { diag: () => `${sc.err}\n${sc.out.slice(-3000)}` });
  return sc;
}
