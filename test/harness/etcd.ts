/**
 * Test harness: a real etcd (Debian's etcd-server, /usr/bin/etcd) on loopback, with a
 * throwaway data dir and free ports for its client and peer URLs. Several may run at once.
 *
 *   const etcd = await startEtcd();
 *   const client = new Etcd3({ hosts: etcd.endpoint });
 *   …
 *   await etcd.stop();
 *
 * startEtcd() resolves once a get through etcd3 answers. stop() ends etcd (SIGTERM, then SIGKILL)
 * and removes the data dir; kill() SIGKILLs it and keeps the dir (stop() still removes it).
 * startEtcd({ tls }) serves https (optionally requiring client certificates); startEtcdCluster(3)
 * starts a cluster of three members whose members can be killed one by one. startRestorableEtcd()
 * adds a backup and restore with `etcdctl snapshot save` / `snapshot restore` (Debian's etcd-client).
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { promisify } from 'node:util';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { noop } from 'cockatiel';
import { Etcd3 } from 'etcd3';
import { freePort } from './ports.js';
import { GiveUp, until } from './wait.js';

export const ETCD_BIN = process.env.LLMGW_ETCD_BIN ?? '/usr/bin/etcd';
export const ETCDCTL_BIN = process.env.LLMGW_ETCDCTL_BIN ?? '/usr/bin/etcdctl';

export interface EtcdInstance {
  /** http://127.0.0.1:PORT (https:// with tls) */
  readonly endpoint: string;
  readonly clientPort: number;
  /** etcd's output so far (for diagnosing a failing test). */
  log(): string;
  /** End etcd and remove its data dir. Idempotent. */
  stop(): Promise<void>;
  /** SIGKILL etcd at once (the data dir stays until stop()). */
  kill(): void;
}

const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const p of running) p.kill('SIGKILL');
});

function exited(p: ChildProcess): Promise<void> {
  return p.exitCode !== null || p.signalCode !== null ? Promise.resolve() : new Promise((r) => p.once('exit', () => r()));
}

/** Files for an etcd serving TLS (PEM paths); with clientCa, clients must present a certificate it signed. */
export interface EtcdTls {
  readonly cert: string;
  readonly key: string;
  readonly clientCa?: string;
  /** What the harness itself connects with to see that etcd answers. */
  readonly probe: { readonly ca: string; readonly cert?: string; readonly key?: string };
}

async function answers(endpoint: string, deadlineMs: number, tls: EtcdTls | null): Promise<boolean> {
  const credentials = tls
    ? {
        rootCertificate: readFileSync(tls.probe.ca),
        ...(tls.probe.cert ? { certChain: readFileSync(tls.probe.cert) } : {}),
        ...(tls.probe.key ? { privateKey: readFileSync(tls.probe.key) } : {}),
      }
    : undefined;
  const c = new Etcd3({ hosts: endpoint, dialTimeout: 1_000, faultHandling: { global: noop, host: () => noop }, ...(credentials ? { credentials } : {}) });
  try {
    await c.get('llmgw-harness-probe').options({ deadline: Date.now() + deadlineMs }).string();
    return true;
  } catch {
    return false;
  } finally {
    c.close();
  }
}

interface Member {
  readonly name: string;
  readonly dir: string;
  readonly clientPort: number;
  readonly client: string;
  readonly peer: string;
}

async function member(name: string, dir: string, tls: EtcdTls | null): Promise<Member> {
  const clientPort = await freePort();
  let peerPort = await freePort();
  while (peerPort === clientPort) peerPort = await freePort();
  return { name, dir, clientPort, client: `${tls ? 'https' : 'http'}://127.0.0.1:${clientPort}`, peer: `http://127.0.0.1:${peerPort}` };
}

/** Spawns etcd for `m` in a cluster of `all`; resolves once it answers a get (the cluster has a leader). */
async function spawnMember(m: Member, all: readonly Member[], token: string, tls: EtcdTls | null): Promise<EtcdInstance | 'port-taken'> {
  const child = spawn(
    ETCD_BIN,
    [
      '--name', m.name,
      '--data-dir', join(m.dir, 'data'),
      '--listen-client-urls', m.client,
      '--advertise-client-urls', m.client,
      '--listen-peer-urls', m.peer,
      '--initial-advertise-peer-urls', m.peer,
      '--initial-cluster', all.map((x) => `${x.name}=${x.peer}`).join(','),
      '--initial-cluster-state', 'new',
      '--initial-cluster-token', token,
      '--logger', 'zap',
      '--log-level', 'warn',
      ...(tls ? ['--cert-file', tls.cert, '--key-file', tls.key] : []),
      ...(tls?.clientCa ? ['--client-cert-auth', '--trusted-ca-file', tls.clientCa] : []),
    ],
    { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ETCD_UNSUPPORTED_ARCH: process.arch === 'x64' ? '' : process.arch } },
  );
  running.add(child);
  child.once('exit', () => running.delete(child));
  let out = '';
  const keep = (d: Buffer): void => {
    out = (out + d.toString('utf8')).slice(-64 * 1024);
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  const gone = (): boolean => child.exitCode !== null || child.signalCode !== null;
  try {
    await until(`etcd ${m.name} answering on ${m.client}`, 30_000, async () => {
      if (await answers(m.client, 1_000, tls)) return true;
      if (gone()) throw new GiveUp(`etcd ${m.name} exited (${child.exitCode ?? child.signalCode}) before answering`);
      return false;
    }, { diag: () => out, everyMs: 50 });
  } catch (e) {
    if (gone() && /address already in use/.test(out)) return 'port-taken';
    if (!gone()) child.kill('SIGKILL');
    throw e;
  }
  let stopped: Promise<void> | null = null;
  return {
    endpoint: m.client,
    clientPort: m.clientPort,
    log: () => out,
    kill() {
      child.kill('SIGKILL');
    },
    stop() {
      stopped ??= (async () => {
        if (child.exitCode === null && child.signalCode === null) {
          child.kill('SIGTERM');
          const t = setTimeout(() => child.kill('SIGKILL'), 5_000);
          await exited(child);
          clearTimeout(t);
        }
        await rm(m.dir, { recursive: true, force: true });
      })();
      return stopped;
    },
  };
}

/** Starts a cluster of `size` members (ports and dirs fresh); retries when a port was taken meanwhile. */
async function startMembers(size: number, tls: EtcdTls | null): Promise<EtcdInstance[]> {
  for (let attempt = 0; ; attempt++) {
    const members: Member[] = [];
    for (let i = 0; i < size; i++) members.push(await member(`llmgw-test-${i}`, await mkdtemp(join(tmpdir(), 'llmgw-etcd-')), tls));
    const token = `llmgw-${members[0]!.clientPort}`;
    const started = await Promise.allSettled(members.map((m) => spawnMember(m, members, token, tls)));
    const ok = started.flatMap((r) => (r.status === 'fulfilled' && r.value !== 'port-taken' ? [r.value] : []));
    if (ok.length === size) return ok;
    await Promise.all(ok.map((m) => m.stop()));
    await Promise.all(members.map((m) => rm(m.dir, { recursive: true, force: true })));
    const failed = started.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed) throw failed.reason;
    if (attempt >= 4) throw new Error('etcd: five attempts found its ports taken');
  }
}

export async function startEtcd(opts: { tls?: EtcdTls } = {}): Promise<EtcdInstance> {
  const [one] = await startMembers(1, opts.tls ?? null);
  return one!;
}

/**
 * A cluster of `size` members on loopback (the production shape: clients get every endpoint). Each
 * member can be killed on its own; stop() of the cluster stops them all.
 */
export async function startEtcdCluster(size = 3): Promise<{ readonly members: readonly EtcdInstance[]; readonly endpoints: readonly string[]; stop(): Promise<void> }> {
  const members = await startMembers(size, null);
  return {
    members,
    endpoints: members.map((m) => m.endpoint),
    async stop() {
      await Promise.all(members.map((m) => m.stop()));
    },
  };
}

/** One etcd that can be backed up and restored from the backup on the same URLs (as an operator does). */
export interface RestorableEtcd extends EtcdInstance {
  /** `etcdctl snapshot save FILE` against the running etcd. */
  snapshotSave(file: string): Promise<void>;
  /**
   * Stops etcd (SIGTERM), `etcdctl snapshot restore FILE` into a new data dir, and starts etcd on
   * the same client and peer URLs from it: revisions go back to the snapshot's.
   */
  restoreFrom(file: string): Promise<void>;
}

const execFileP = promisify(execFile);

async function etcdctl(args: readonly string[]): Promise<void> {
  try {
    await execFileP(ETCDCTL_BIN, args, { env: { ...process.env, ETCDCTL_API: '3' }, timeout: 60_000 });
  } catch (e) {
    const x = e as { code?: string; stderr?: string; message: string };
    if (x.code === 'ENOENT') throw new Error(`${ETCDCTL_BIN} is not installed (Debian package etcd-client; or set LLMGW_ETCDCTL_BIN)`);
    throw new Error(`etcdctl ${args.join(' ')}: ${x.stderr ?? x.message}`);
  }
}

export async function startRestorableEtcd(): Promise<RestorableEtcd> {
  let m: Member | null = null;
  let cur: EtcdInstance | null = null;
  for (let attempt = 0; cur === null; attempt++) {
    m = await member('llmgw-test-0', await mkdtemp(join(tmpdir(), 'llmgw-etcd-')), null);
    const started = await spawnMember(m, [m], `llmgw-${m.clientPort}`, null);
    if (started !== 'port-taken') cur = started;
    else if (attempt >= 4) throw new Error('etcd: five attempts found its ports taken');
  }
  const token = `llmgw-${m!.clientPort}`;
  return {
    endpoint: m!.client,
    clientPort: m!.clientPort,
    log: () => cur!.log(),
    kill: () => cur!.kill(),
    stop: () => cur!.stop(),
    snapshotSave: (file) => etcdctl(['--endpoints', m!.client, 'snapshot', 'save', file]),
    async restoreFrom(file) {
      await cur!.stop();
      const dir = await mkdtemp(join(tmpdir(), 'llmgw-etcd-'));
      await etcdctl(['snapshot', 'restore', file, '--name', m!.name, '--data-dir', join(dir, 'data'), '--initial-cluster', `${m!.name}=${m!.peer}`, '--initial-advertise-peer-urls', m!.peer, '--initial-cluster-token', token]);
      m = { ...m!, dir };
      const started = await spawnMember(m, [m], token, null);
      if (started === 'port-taken') throw new Error(`etcd: its ports (${m.client}, ${m.peer}) were taken while it was down for the restore`);
      cur = started;
    },
  };
}
