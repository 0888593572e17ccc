/**
 * The fleet repo: a remote (http/https, token auth) kept as a bare mirror in cacheDir, or a
 * local repo read in place (its objects and refs only, never its working tree).
 */
import * as fs from 'node:fs';
import { join, resolve as resolvePath } from 'node:path';
import git, { type HttpClient } from 'isomorphic-git';
import nodeHttp from 'isomorphic-git/http/node';
import { LlmgwError } from '../errors/catalogue.js';
import type { FleetFiles } from '../fleet-spec/files.js';
import { displayUrl, readToken, tokenAuth, urlSecrets, type TokenSource } from './auth.js';
import { CommitGraph, type CommitInfo } from './commits.js';
import { toGitError } from './errors.js';
import { gitFiles } from './files.js';
import { ObjectSizer } from './objects.js';

export type { CommitInfo } from './commits.js';

export interface FleetRepoConfig {
  /** http(s) URL of a remote fleet repo. Exactly one of url and path. */
  readonly url?: string;
  /** A local repo: a bare repo dir or a dir with .git. */
  readonly path?: string;
  /** The branch holding the desired state (default "main"). */
  readonly branch?: string;
  readonly token?: TokenSource;
  /** Where the bare mirror of a remote lives (required with url). */
  readonly cacheDir?: string;
  /** Socket idle timeout for git HTTP requests (default 30 s). */
  readonly timeoutMs?: number;
}

const FULL_OID = /^[0-9a-f]{40}$/;
const SHORT_OID = /^[0-9a-f]{4,39}$/;
export const REMOTE_NAME = 'origin';

/** Where a local repo keeps its objects: <path>/.git (a dir, or a "gitdir:" file) or <path> itself (bare). */
function localGitdir(path: string): string {
  const dotgit = join(path, '.git');
  try {
    const st = fs.statSync(dotgit);
    if (st.isDirectory()) return dotgit;
    const m = /^gitdir:\s*(.+?)\s*$/m.exec(fs.readFileSync(dotgit, 'utf8'));
    if (m?.[1]) return resolvePath(path, m[1]);
  } catch {
    /* no .git: a bare repo, or not a repo (found out on first use) */
  }
  return path;
}

export class FleetRepo {
  readonly kind: 'remote' | 'local';
  readonly branch: string;
  /** The gitdir read from: the mirror (remote) or the local repo's gitdir. */
  readonly gitdir: string;
  /** Remote URL as configured (may carry credentials: never log it; use `label`). */
  readonly url: string | null;
  /** The repo for messages: URL without credentials, or the local path. */
  readonly label: string;
  /**
   * isomorphic-git's object cache. It holds the raw bytes of every packfile read, so it is
   * renewed whenever sync sees a new head: packs no longer read are then freed.
   */
  private objectCache: object = {};
  private lastHead: string | null = null;
  private readonly config: FleetRepoConfig;
  private readonly graph: CommitGraph;
  private readonly sizer: ObjectSizer;
  readonly http: HttpClient;
  private ready: Promise<void> | null = null;

  constructor(config: FleetRepoConfig) {
    if ((config.url === undefined) === (config.path === undefined)) {
      throw new LlmgwError('USAGE', 'fleet repo: set exactly one of url and path');
    }
    this.config = config;
    this.branch = config.branch ?? 'main';
    if (config.url !== undefined) {
      if (!/^https?:\/\//i.test(config.url)) throw new LlmgwError('USAGE', `fleet repo url must be http(s)://…, got ${displayUrl(config.url)}`);
      if (!config.cacheDir) throw new LlmgwError('USAGE', 'fleet repo: a remote url needs a cacheDir for its mirror');
      this.kind = 'remote';
      this.url = config.url;
      this.label = displayUrl(config.url);
      this.gitdir = resolvePath(config.cacheDir);
    } else {
      this.kind = 'local';
      this.url = null;
      this.label = resolvePath(config.path as string);
      this.gitdir = localGitdir(this.label);
    }
    this.graph = new CommitGraph(this.gitdir, () => this.objectCache);
    this.sizer = new ObjectSizer(this.gitdir);
    const timeout = config.timeoutMs ?? 30_000;
    // simple-get's socket idle timeout, so a server that stops answering fails the sync.
    this.http = { request: (req) => nodeHttp.request({ ...req, fetchOptions: { ...req.fetchOptions, timeout } }) };
  }

  get cache(): object {
    return this.objectCache;
  }

  private noteHead(head: string): { head: string } {
    if (head !== this.lastHead) {
      this.lastHead = head;
      this.objectCache = {};
    }
    return { head };
  }

  /** The ref a branch name resolves to here: the remote-tracking ref in a mirror, refs/heads/* locally. */
  branchRef(name: string = this.branch): string {
    return this.kind === 'remote' ? `refs/remotes/${REMOTE_NAME}/${name}` : `refs/heads/${name}`;
  }

  /** Secrets to scrub from messages: the token (read now, if configured) and URL passwords. */
  secrets(token: string | null = null): string[] {
    let t = token;
    if (t === null) {
      try {
        t = readToken(this.config.token);
      } catch {
        t = null;
      }
    }
    return [...(t ? [t] : []), ...urlSecrets(this.url)];
  }

  /** The token for this sync (re-read each time) and its onAuth callback. */
  auth(): { token: string | null; onAuth: ReturnType<typeof tokenAuth> } {
    const token = readToken(this.config.token);
    return { token, onAuth: tokenAuth(token) };
  }

  /** Translate an error thrown while doing `op`. */
  fail(err: unknown, op: string, token: string | null = null): LlmgwError {
    return toGitError(err, { op: `${op} (${this.label})`, secrets: this.secrets(token) });
  }

  /** Check the local repo / create the mirror (idempotent; the other methods call it). */
  open(): Promise<void> {
    this.ready ??= (async () => {
      if (this.kind === 'remote') {
        if (!fs.existsSync(join(this.gitdir, 'HEAD'))) {
          fs.mkdirSync(this.gitdir, { recursive: true });
          await git.init({ fs, gitdir: this.gitdir, bare: true, defaultBranch: this.branch });
        }
        // fetch needs a refspec for the remote; the URL itself is always passed per call.
        await git.setConfig({ fs, gitdir: this.gitdir, path: `remote.${REMOTE_NAME}.url`, value: this.label });
        await git.setConfig({ fs, gitdir: this.gitdir, path: `remote.${REMOTE_NAME}.fetch`, value: `+refs/heads/*:refs/remotes/${REMOTE_NAME}/*` });
      } else if (!fs.existsSync(join(this.gitdir, 'HEAD')) || !fs.existsSync(join(this.gitdir, 'objects'))) {
        throw new LlmgwError('GIT_UNREACHABLE', `fleet repo ${this.label} is not a git repository`, { path: this.label });
      }
    })().catch((e: unknown) => {
      this.ready = null;
      throw this.fail(e, 'open fleet repo');
    });
    return this.ready;
  }

  /** Fetch the branch (remote) and return its head commit. */
  async sync(): Promise<{ head: string }> {
    await this.open();
    if (this.kind === 'local') return this.noteHead(await this.resolveRef(this.branchRef()));
    let token: string | null = null;
    try {
      const a = this.auth();
      token = a.token;
      const head = await this.fetchBranch(this.branch, a.onAuth);
      if (!head) {
        throw new LlmgwError('GIT_REF_NOT_FOUND', `branch ${this.branch} does not exist in ${this.label} (the repo is empty)`, { branch: this.branch });
      }
      await git.writeRef({ fs, gitdir: this.gitdir, ref: this.branchRef(), value: head, force: true });
      return this.noteHead(head);
    } catch (e) {
      throw this.fail(e, `fetch ${this.branch}`, token);
    }
  }

  /**
   * Fetches one branch of the remote into its tracking ref's objects; the remote tip, or null when
   * the branch does not exist there. `ref` is what isomorphic-git offers as "have": the tracking
   * ref, so only new objects come. `depth`: fetch only that many commits of the branch (a shallow
   * mirror; later fetches add what is new on top; a larger depth deepens it, 0x7fffffff to all of it).
   */
  async fetchBranch(branch: string, onAuth: ReturnType<FleetRepo['auth']>['onAuth'], depth?: number): Promise<string | null> {
    try {
      const res = await git.fetch({
        fs,
        http: this.http,
        gitdir: this.gitdir,
        url: this.url as string,
        remote: REMOTE_NAME,
        ref: this.branchRef(branch),
        remoteRef: `refs/heads/${branch}`,
        singleBranch: true,
        tags: false,
        cache: this.cache,
        ...(depth !== undefined ? { depth } : {}),
        ...(onAuth ? { onAuth } : {}),
      });
      return res.fetchHead ?? null;
    } catch (e) {
      if ((e as { code?: string }).code === 'NotFoundError') return null;
      throw e;
    }
  }

  /** The best common ancestor of two commits, or null when they share none. */
  async mergeBase(a: string, b: string): Promise<string | null> {
    try {
      const bases = (await git.findMergeBase({ fs, gitdir: this.gitdir, oids: [a, b], cache: this.cache })) as string[];
      return bases[0] ?? null;
    } catch (e) {
      throw this.fail(e, `merge-base ${a.slice(0, 12)} ${b.slice(0, 12)}`);
    }
  }

  private async resolveRef(ref: string): Promise<string> {
    try {
      return await this.peel(await git.resolveRef({ fs, gitdir: this.gitdir, ref }));
    } catch (e) {
      throw this.fail(e, `resolve ${ref}`);
    }
  }

  /** Follow annotated tags to the commit. */
  private async peel(oid: string): Promise<string> {
    let cur = oid;
    for (let i = 0; i < 10; i++) {
      const o = await git.readObject({ fs, gitdir: this.gitdir, oid: cur, cache: this.cache, format: 'parsed' });
      if (o.type === 'commit') return cur;
      if (o.type !== 'tag') throw new LlmgwError('GIT_REF_NOT_FOUND', `${oid} is a ${o.type}, not a commit`, { oid });
      cur = (o.object as { object: string }).object;
    }
    throw new LlmgwError('GIT_REF_NOT_FOUND', `${oid}: tag chain too long`, { oid });
  }

  /** A commit oid for a branch, tag, full or short oid, full ref name, or HEAD. */
  async resolve(rev: string): Promise<string> {
    // REV~N and REV^N (as in `git rev-parse`): walk first / Nth parents from the base revision.
    const m = /^(.+?)((?:[~^]\d*)+)$/.exec(rev.trim());
    if (m) {
      let oid = await this.resolve(m[1]!);
      for (const [, op, digits] of m[2]!.matchAll(/([~^])(\d*)/g)) {
        const n = digits === '' ? 1 : Number(digits);
        for (let i = 0; i < (op === '~' ? n : 1); i++) {
          const parents = (await this.readCommit(oid)).parents;
          const next = op === '~' ? parents[0] : n === 0 ? oid : parents[n - 1];
          if (!next) throw new LlmgwError('GIT_REF_NOT_FOUND', `revision ${rev} not found in ${this.label}: ${oid.slice(0, 12)} has no such parent`, { rev });
          oid = next;
        }
      }
      return oid;
    }
    await this.open();
    const r = rev.trim();
    const candidates: string[] = [];
    if (r === 'HEAD') candidates.push(this.kind === 'remote' ? this.branchRef() : 'HEAD');
    else if (r.startsWith('refs/')) candidates.push(r);
    // as git rev-parse: a branch, a tag, then (locally) a remote-tracking branch such as origin/main
    else if (!FULL_OID.test(r)) candidates.push(this.branchRef(r), `refs/tags/${r}`, ...(this.kind === 'remote' ? [`refs/heads/${r}`] : [`refs/remotes/${r}`]));
    if (FULL_OID.test(r)) {
      try {
        return await this.peel(r);
      } catch (e) {
        throw this.fail(e, `resolve ${r}`);
      }
    }
    for (const ref of candidates) {
      let oid: string;
      try {
        oid = await git.resolveRef({ fs, gitdir: this.gitdir, ref });
      } catch {
        continue;
      }
      return this.resolveRefValue(oid, rev);
    }
    if (SHORT_OID.test(r)) {
      try {
        return await this.peel(await git.expandOid({ fs, gitdir: this.gitdir, oid: r, cache: this.cache }));
      } catch (e) {
        throw this.fail(e, `resolve ${r}`);
      }
    }
    throw new LlmgwError('GIT_REF_NOT_FOUND', `revision ${rev} not found in ${this.label}`, { rev });
  }

  private async resolveRefValue(oid: string, rev: string): Promise<string> {
    try {
      return await this.peel(oid);
    } catch (e) {
      throw this.fail(e, `resolve ${rev}`);
    }
  }

  /** The fleet files at a commit, read from git objects. */
  files(oid: string): FleetFiles {
    return gitFiles({ gitdir: this.gitdir, oid, cache: this.cache, sizer: this.sizer });
  }

  async readCommit(oid: string): Promise<CommitInfo> {
    await this.open();
    try {
      return await this.graph.read(oid);
    } catch (e) {
      throw this.fail(e, `read commit ${oid}`);
    }
  }

  /**
   * Every commit reachable from head and not from base (merged branches included), oldest
   * first. base null → only the head commit: a first sync does not replay history.
   */
  async commitsBetween(base: string | null, head: string): Promise<CommitInfo[]> {
    await this.open();
    try {
      return await this.graph.between(base, head);
    } catch (e) {
      throw this.fail(e, `list commits ${base ?? '(none)'}..${head}`);
    }
  }
}
