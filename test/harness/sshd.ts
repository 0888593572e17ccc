/**
 * Test harness: a real OpenSSH sshd on loopback, one per "node", with a throwaway host key and a
 * throwaway user key. Several instances may run at once (two sshd = two nodes).
 *
 *   const a = await startSshd();
 *   const node = sshdNodeSpec(a, { name: 'node-a' });
 *   const shell = openShell(node, { secretsDir: a.secretsDir });
 *   …
 *   await a.stop();
 *
 * The login user is the current user (root in CI). Everything lives in one temp dir that stop() removes.
 */
import { spawn, execFile, type ChildProcess } from 'node:child_process';
import { mkdtemp, mkdir, readFile, rm, writeFile, copyFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { NodeSpec } from '../../src/fleet-spec/types.js';
import { freePort, replicaPortRange } from './ports.js';
import { GiveUp, until } from './wait.js';

const execFileP = promisify(execFile);

export const SSHD_BIN = '/usr/sbin/sshd';

export interface SshdInstance {
  readonly port: number;
  /** The instance's host key as pinned in a NodeSpec: "ssh-ed25519 AAAA…". */
  readonly hostKey: string;
  readonly user: string;
  /** File name of the authorized private key inside secretsDir. */
  readonly identityName: string;
  /** Temp dir holding the private key (mode 0600); pass it as openShell's secretsDir. */
  readonly secretsDir: string;
  /** The instance's temp dir (config, keys, logs, dataDir); removed by stop(). */
  readonly dir: string;
  /** A data dir for a node backed by this instance (inside dir). */
  readonly dataDir: string;
  /** sshd's stderr (-e, LogLevel VERBOSE) so far, for diagnosing test failures. */
  log(): string;
  /** Kill sshd and every connection it serves (and their session processes); remove the temp dir. Idempotent. */
  stop(): Promise<void>;
  /** Kill sshd and every connection it serves, then start it again on the same port with the same keys. */
  restart(): Promise<void>;
}

/** Generate an ed25519 key pair at `dir/name` (private, 0600) and `dir/name.pub`; returns the public line "ssh-ed25519 AAAA…". */
export async function makeKeyPair(dir: string, name: string): Promise<string> {
  const file = join(dir, name);
  await execFileP('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-C', `llmgw-test-${name}`, '-f', file]);
  const pub = (await readFile(`${file}.pub`, 'utf8')).trim().split(/\s+/);
  return `${pub[0]} ${pub[1]}`;
}

function canConnect(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host: '127.0.0.1', port });
    s.once('connect', () => { s.destroy(); resolve(true); });
    s.once('error', () => { s.destroy(); resolve(false); });
  });
}


/** All descendants of `pid` (children first in the returned order is not guaranteed). */
async function descendants(pid: number): Promise<number[]> {
  const { stdout } = await execFileP('ps', ['-e', '-o', 'pid=,ppid=']);
  const children = new Map<number, number[]>();
  for (const line of stdout.split('\n')) {
    const [p, pp] = line.trim().split(/\s+/).map(Number);
    if (p === undefined || pp === undefined || Number.isNaN(p) || Number.isNaN(pp)) continue;
    const list = children.get(pp) ?? [];
    list.push(p);
    children.set(pp, list);
  }
  const out: number[] = [];
  const todo = [pid];
  while (todo.length > 0) {
    const p = todo.pop()!;
    for (const c of children.get(p) ?? []) { out.push(c); todo.push(c); }
  }
  return out;
}

function killQuiet(pid: number, sig: NodeJS.Signals): void {
  try { process.kill(pid, sig); } catch { /* already gone */ }
}

export interface SshdOptions {
  /**
   * Shell code the login shell runs before every command (via BASH_ENV; the login shell must be
   * bash, as root's is in CI): simulates a node whose rc files print things or are slow.
   */
  readonly loginRc?: string;
}

export async function startSshd(opts: SshdOptions = {}): Promise<SshdInstance> {
  const dir = await mkdtemp(join(tmpdir(), 'llmgw-sshd-'));
  const secretsDir = join(dir, 'secrets');
  const dataDir = join(dir, 'data');
  await mkdir(secretsDir, { mode: 0o700 });
  await mkdir(dataDir);
  await mkdir('/run/sshd', { recursive: true, mode: 0o755 }); // privilege separation dir

  const hostKeyFile = join(dir, 'ssh_host_ed25519_key');
  const hostKey = await makeKeyPair(dir, 'ssh_host_ed25519_key');
  const identityName = 'id_node';
  await makeKeyPair(secretsDir, identityName);
  const authorizedKeys = join(dir, 'authorized_keys');
  await copyFile(join(secretsDir, `${identityName}.pub`), authorizedKeys);

  const user = userInfo().username;
  let loginRc: string | null = null;
  if (opts.loginRc !== undefined) {
    loginRc = join(dir, 'login-rc.sh');
    await writeFile(loginRc, `${opts.loginRc}\n`);
  }
  const config = join(dir, 'sshd_config');
  let port = 0;
  let child: ChildProcess | null = null;
  let stderr = '';
  let stopped = false;

  const writeConfig = () => writeFile(config, [
    'ListenAddress 127.0.0.1',
    `Port ${port}`,
    `HostKey ${hostKeyFile}`,
    `AuthorizedKeysFile ${authorizedKeys}`,
    'PasswordAuthentication no',
    'KbdInteractiveAuthentication no',
    'PubkeyAuthentication yes',
    'PermitRootLogin prohibit-password',
    'StrictModes no',
    'UsePAM no',
    `PidFile ${join(dir, 'sshd.pid')}`,
    'Subsystem sftp internal-sftp',
    'LogLevel VERBOSE',
    // bash sources ~/.bashrc for ssh commands only as a top-level shell; SHLVL=1 makes it a nested one,
    // so the test machine's own ~/.bashrc (slow pyenv init on our CI image) stays out of every run.
    `SetEnv SHLVL=1${loginRc ? ` BASH_ENV=${loginRc}` : ''}`,
    '',
  ].join('\n'));

  const launch = async (): Promise<void> => {
    const proc = spawn(SSHD_BIN, ['-D', '-e', '-f', config], { stdio: ['ignore', 'ignore', 'pipe'] });
    child = proc;
    let exited = false;
    proc.stderr!.setEncoding('utf8');
    proc.stderr!.on('data', (d: string) => { stderr = (stderr + d).slice(-200_000); });
    proc.once('exit', () => { exited = true; });
    try {
      await until(`sshd accepting connections on port ${port}`, 10_000, async () => {
        if (exited) throw new GiveUp(`sshd exited at start (port ${port})`);
        return canConnect(port);
      }, { diag: () => stderr, everyMs: 25 });
    } catch (e) {
      if (!exited) killQuiet(proc.pid!, 'SIGKILL');
      throw e;
    }
  };

  const kill = async (): Promise<void> => {
    const proc = child;
    child = null;
    if (proc === null || proc.pid === undefined || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise<void>((r) => proc.once('exit', () => r()));
    // Connection processes run in their own sessions, so kill the whole tree by id, then the listener.
    for (const pid of await descendants(proc.pid)) killQuiet(pid, 'SIGKILL');
    killQuiet(proc.pid, 'SIGKILL');
    await exited;
  };

  // The free port may be taken between probing and sshd binding it: retry with another.
  for (let attempt = 0; ; attempt++) {
    port = await freePort();
    await writeConfig();
    try {
      await launch();
      break;
    } catch (e) {
      await kill();
      if (attempt >= 2) { await rm(dir, { recursive: true, force: true }); throw e; }
    }
  }

  return {
    port, hostKey, user, identityName, secretsDir, dir, dataDir,
    log: () => stderr,
    async stop() {
      if (stopped) return;
      stopped = true;
      await kill();
      await rm(dir, { recursive: true, force: true });
    },
    async restart() {
      if (stopped) throw new Error('sshd instance was stopped');
      await kill();
      await launch();
    },
  };
}


/**
 * A NodeSpec for a node served by this sshd instance: transport ssh, pinned host key, the
 * instance's identity, dataDir inside the instance's temp dir and a replica port range of 20
 * ports (distinct per instance and, likely, per test process).
 */
export function sshdNodeSpec(inst: SshdInstance, overrides: Partial<NodeSpec> = {}): NodeSpec {
  const name = overrides.name ?? `node-${inst.port}`;
  return Object.freeze({
    name,
    file: `nodes/${name}.yaml`,
    transport: 'ssh',
    host: '127.0.0.1',
    port: inst.port,
    user: inst.user,
    hostKey: inst.hostKey,
    identity: inst.identityName,
    labels: {},
    capacity: { memoryBytes: null, cpus: null },
    dataDir: inst.dataDir,
    ports: replicaPortRange(),
    ...overrides,
  });
}

/** A NodeSpec for the local transport (this machine), with the given data dir. */
export function localNodeSpec(dataDir: string, overrides: Partial<NodeSpec> = {}): NodeSpec {
  const name = overrides.name ?? 'local';
  return Object.freeze({
    name,
    file: `nodes/${name}.yaml`,
    transport: 'local',
    host: '127.0.0.1',
    port: 22,
    user: userInfo().username,
    hostKey: null,
    identity: null,
    labels: {},
    capacity: { memoryBytes: null, cpus: null },
    dataDir,
    ports: replicaPortRange(),
    ...overrides,
  });
}

