/**
 * Real `llmgw serve` processes on a test fleet (startTestFleet: sshd nodes, a fleet repo over git
 * smart-HTTP), each with its own state dir and ports: one controller, or several sharing an etcd.
 * Output is kept (pino JSON lines) for assertions and for diagnosing a failing test.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { freePort } from './ports.js';
import { repoRoot } from './paths.js';
import type { TestFleet } from './controller.js';

export interface ServeProc {
  readonly name: string;
  readonly routerPort: number;
  readonly adminPort: number;
  readonly stateDir: string;
  child: ChildProcess;
  /** Everything it printed so far (the last 400 kB). */
  out(): string;
  alive(): boolean;
  /** GET (or `init`) an admin API path under /admin/v1; the parsed JSON body. */
  admin<T>(path: string, init?: RequestInit): Promise<T>;
  sigkill(): Promise<void>;
  /** SIGTERM and wait for the exit. */
  stop(): Promise<void>;
  /** Start it again (same state dir and ports) after it exited. */
  restart(): void;
}

/**
 * `routerAuth` / `adminAuth`: leave router / admin authentication on (the test passes the key or
 * token files in `args`). `onOutput` sees every chunk it prints, across restarts (say, for a
 * secrets scan of all of it; `out()` keeps only the tail).
 */
export async function spawnServe(o: { name: string; fleet: TestFleet; args?: readonly string[]; env?: Record<string, string>; routerAuth?: boolean; adminAuth?: boolean; onOutput?: (text: string) => void }): Promise<ServeProc> {
  const stateDir = join(o.fleet.stateDir, o.name);
  mkdirSync(stateDir, { recursive: true });
  const [routerPort, adminPort] = [await freePort(), await freePort()];
  let out = '';
  const run = (): ChildProcess => {
    const c = spawn(
      process.execPath,
      [
        join(repoRoot, 'bin', 'llmgw.js'),
        'serve',
        '--fleet', o.fleet.git.url('fleet.git'),
        '--git-token-file', join(o.fleet.secretsDir, 'git-token'),
        '--secrets-dir', o.fleet.secretsDir,
        '--state-dir', stateDir,
        '--router-listen', `127.0.0.1:${routerPort}`,
        '--admin-listen', `127.0.0.1:${adminPort}`,
        ...(o.routerAuth ? [] : ['--no-router-auth']),
        ...(o.adminAuth ? [] : ['--no-admin-auth']),
        '--log-format', 'json',
        ...(o.args ?? []),
      ],
      { cwd: repoRoot, env: { ...process.env, LLMGW_LOG_LEVEL: 'info', ...(o.env ?? {}) }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    const keep = (d: Buffer): void => {
      out = (out + d.toString()).slice(-400_000);
      o.onOutput?.(d.toString());
    };
    c.stdout!.on('data', keep);
    c.stderr!.on('data', keep);
    return c;
  };
  const exited = (c: ChildProcess): Promise<void> => (c.exitCode !== null || c.signalCode !== null ? Promise.resolve() : new Promise((r) => c.once('exit', () => r())));
  const p: ServeProc = {
    name: o.name,
    routerPort,
    adminPort,
    stateDir,
    child: run(),
    out: () => out,
    alive: () => p.child.exitCode === null && p.child.signalCode === null,
    async admin<T>(path: string, init?: RequestInit): Promise<T> {
      const r = await fetch(`http://127.0.0.1:${adminPort}/admin/v1${path}`, { ...init, signal: AbortSignal.timeout(30_000) });
      return (await r.json()) as T;
    },
    async sigkill() {
      if (p.alive()) p.child.kill('SIGKILL');
      await exited(p.child);
    },
    async stop() {
      if (p.alive()) p.child.kill('SIGTERM');
      await exited(p.child);
    },
    restart() {
      if (p.alive()) throw new Error(`${o.name} is still running`);
      p.child = run();
    },
  };
  return p;
}

/** For a failing wait: each process's name, whether it still runs (or how it exited) and the tail of its output. */
export function procsDiag(procs: readonly ServeProc[], tail = 2500): string {
  const how = (p: ServeProc): string => (p.alive() ? 'running' : `exited (code ${p.child.exitCode}, signal ${p.child.signalCode})`);
  return procs.map((p) => `--- ${p.name}: ${how(p)} ---\n${p.out().slice(-tail)}`).join('\n');
}

/** pino JSON lines of a process's output, parsed (lines that are not JSON are skipped). */
export function logLines(out: string): Record<string, unknown>[] {
  const lines: Record<string, unknown>[] = [];
  for (const l of out.split('\n')) {
    if (!l.startsWith('{')) continue;
    try {
      lines.push(JSON.parse(l) as Record<string, unknown>);
    } catch {
      // a line cut by the buffer's start
    }
  }
  return lines;
}

/** What the HA tests read of `/admin/v1/status`. */
export interface HaStatusJson {
  leader: boolean;
  control: { instance: { id: string }; leader: { id: string; epoch: number | null } | null; notActing: { code: string } | null };
  lastPass: { startedAt: string } | null;
}

/**
 * The one instance every live instance agrees leads (and that says so itself), or null; with
 * `after`, only at an epoch above `epochAbove` and with a pass begun after `passAfter`.
 */
export async function agreedLeader(live: readonly ServeProc[], after?: { epochAbove: number; passAfter: number }): Promise<{ proc: ServeProc; epoch: number } | null> {
  const statuses = await Promise.all(live.map((p) => p.admin<HaStatusJson>('/status')));
  const leading = statuses.map((s, i) => ({ s, p: live[i]! })).filter((x) => x.s.leader);
  if (leading.length !== 1) return null;
  const { s, p } = leading[0]!;
  if (!statuses.every((o) => o.control.leader?.id === s.control.instance.id)) return null;
  const epoch = s.control.leader!.epoch!;
  if (after && (epoch <= after.epochAbove || !s.lastPass || Date.parse(s.lastPass.startedAt) < after.passAfter)) return null;
  return { proc: p, epoch };
}
