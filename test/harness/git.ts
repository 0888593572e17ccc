/**
 * Make repos and commits with the `git` CLI the way an operator does. Every call is async:
 * the smart-HTTP test server runs in the same process, so a blocking git call that talks to
 * it would deadlock.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, mkdir, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { FleetRepo } from '../../src/git/repo.js';
import { isolatedGitEnv, startGitHttpServer, type GitHttpServer } from './git-http.js';

const tempDirs: string[] = [];

/** A fresh temp dir, removed by cleanupTempDirs(). */
export async function makeTempDir(prefix = 'llmgw-git-'): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  tempDirs.push(dir);
  return dir;
}

/** Remove every dir made by makeTempDir (call from `after`). */
export async function cleanupTempDirs(): Promise<void> {
  const dirs = tempDirs.splice(0);
  await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
}

export interface GitRunOptions {
  env?: Record<string, string>;
  input?: string;
}

/** Run `git ARGS` in cwd with an isolated config; resolves stdout (trimmed at the end), rejects with stderr. */
export function git(cwd: string, args: readonly string[], opts: GitRunOptions = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      'git',
      [...args],
      { cwd, env: isolatedGitEnv(opts.env), maxBuffer: 64 * 1024 * 1024, encoding: 'utf8' },
      (err, stdout, stderr) => {
        if (err) reject(new Error(`git ${args.join(' ')} failed in ${cwd}: ${stderr || err.message}`));
        else resolve(stdout.replace(/\s+$/, ''));
      },
    );
    if (opts.input !== undefined) child.stdin?.end(opts.input);
  });
}

/** An operator's clone: a working tree with main checked out. */
export class WorkRepo {
  private constructor(readonly dir: string) {}

  /** `git init -b main` in a new temp dir with a local user identity. */
  static async init(): Promise<WorkRepo> {
    const dir = await makeTempDir('llmgw-work-');
    await git(dir, ['init', '-q', '-b', 'main']);
    const r = new WorkRepo(dir);
    await r.configIdentity();
    return r;
  }

  /** `git clone URL` into a new temp dir. */
  static async clone(url: string): Promise<WorkRepo> {
    const parent = await makeTempDir('llmgw-clone-');
    const dir = join(parent, 'work');
    await git(parent, ['clone', '-q', url, dir]);
    const r = new WorkRepo(dir);
    await r.configIdentity();
    return r;
  }

  private async configIdentity(): Promise<void> {
    await git(this.dir, ['config', 'user.name', 'Op Erator']);
    await git(this.dir, ['config', 'user.email', 'op@example.test']);
    await git(this.dir, ['config', 'commit.gpgsign', 'false']);
  }

  git(args: readonly string[], opts?: GitRunOptions): Promise<string> {
    return git(this.dir, args, opts);
  }

  /** Write files (path → content) into the working tree, creating folders. */
  async write(files: Record<string, string | Uint8Array>): Promise<void> {
    for (const [p, content] of Object.entries(files)) {
      const abs = join(this.dir, p);
      await mkdir(dirname(abs), { recursive: true });
      await writeFile(abs, content);
    }
  }

  async symlink(path: string, target: string): Promise<void> {
    const abs = join(this.dir, path);
    await mkdir(dirname(abs), { recursive: true });
    await symlink(target, abs);
  }

  async remove(path: string): Promise<void> {
    await this.git(['rm', '-q', '-r', '--', path]);
  }

  /** `git add -A` and commit (empty commits allowed); returns the new HEAD oid. */
  async commit(message: string, opts: { date?: string } = {}): Promise<string> {
    await this.git(['add', '-A']);
    const env: Record<string, string> = opts.date ? { GIT_AUTHOR_DATE: opts.date, GIT_COMMITTER_DATE: opts.date } : {};
    await this.git(['commit', '-q', '--allow-empty', '-F', '-'], { input: message, env });
    return this.head();
  }

  async head(): Promise<string> {
    return this.git(['rev-parse', 'HEAD']);
  }

  async branch(name: string, from = 'HEAD'): Promise<void> {
    await this.git(['branch', name, from]);
  }

  async checkout(name: string): Promise<void> {
    await this.git(['checkout', '-q', name]);
  }

  /** `git merge --no-ff NAME -m MESSAGE`; returns the merge commit's oid. */
  async merge(name: string, message = `Merge ${name}`): Promise<string> {
    await this.git(['merge', '-q', '--no-ff', '-m', message, name]);
    return this.head();
  }

  /** Push refspecs to a URL (e.g. server.authUrl('fleet.git')). */
  async push(url: string, ...refspecs: string[]): Promise<void> {
    await this.git(['-c', 'credential.helper=', 'push', '-q', url, ...refspecs]);
  }

  /** Fetch and hard-reset the current branch to the remote's (for a clone). */
  async pull(url: string, branch = 'main'): Promise<void> {
    await this.git(['-c', 'credential.helper=', 'fetch', '-q', url, branch]);
    await this.git(['reset', '-q', '--hard', 'FETCH_HEAD']);
  }

  /** A bare copy of this repo at <root>/<name> (e.g. under the HTTP server's root). */
  async bareCopy(root: string, name: string): Promise<string> {
    const dest = join(root, name);
    await git(root, ['clone', '-q', '--bare', this.dir, dest]);
    await git(dest, ['config', 'http.receivepack', 'true']);
    return dest;
  }
}

/** A bare repo's ref value, or null when it does not exist. */
export async function revParse(gitdir: string, rev: string): Promise<string | null> {
  try {
    return await git(gitdir, ['rev-parse', '--verify', '-q', `${rev}^{commit}`]);
  } catch {
    return null;
  }
}

/** A fleet repo served by the smart-HTTP server, its token in an env var, and the operator's clone. */
export interface ServedFleetRepo {
  readonly server: GitHttpServer;
  readonly work: WorkRepo;
  /** The repo URL with credentials, for the git CLI. */
  readonly url: string;
  /** The bare repo the server serves. */
  readonly bare: string;
  /** A FleetRepo (llmgw's side) over the served URL, with its own mirror. */
  remote(): Promise<FleetRepo>;
  close(): Promise<void>;
}

/** Commits `commits` (files + message, in order) in a fresh repo and serves it as fleet.git. */
export async function servedFleetRepo(tokenEnv: string, commits: readonly { files?: Record<string, string>; message: string }[]): Promise<ServedFleetRepo> {
  const root = await makeTempDir('llmgw-srv-');
  const server = await startGitHttpServer({ root });
  process.env[tokenEnv] = server.token;
  const work = await WorkRepo.init();
  for (const c of commits) {
    if (c.files) await work.write(c.files);
    await work.commit(c.message);
  }
  const bare = await work.bareCopy(root, 'fleet.git');
  return {
    server,
    work,
    url: server.authUrl('fleet.git'),
    bare,
    remote: async () => new FleetRepo({ url: server.url('fleet.git'), cacheDir: join(await makeTempDir('llmgw-cache-'), 'm'), token: { env: tokenEnv } }),
    async close() {
      delete process.env[tokenEnv];
      await server.close();
      await cleanupTempDirs();
    },
  };
}
