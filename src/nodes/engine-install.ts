/**
 * An engine version's install on a node (ShellNodeDriver.ensureEngine): the path method's check, or
 * an artifact fetched on the node or through the controller's cache, or a build, each one script
 * under ops/ that prints the installed binary.
 */
import { createHash, randomBytes } from 'node:crypto';
import { LlmgwError } from '../errors/catalogue.js';
import type { EngineVersionSpec } from '../fleet-spec/types.js';
import { fetchArtifact } from './artifact-cache.js';
import type { Fence } from './driver.js';
import { artifactInstallScript } from './ops/engine-artifact.js';
import { buildInstallScript } from './ops/engine-build.js';
import {
  engineCleanupScript, engineInstalledScript, engineStageDir, engineStageScript, parseInstalledBinary, pathEngineScript, type EnginePaths,
} from './ops/engine.js';
import type { ExecResult, Shell } from './shell.js';

/** What an install needs of its driver. */
export interface EngineInstallContext {
  readonly node: string;
  readonly dataDir: string;
  readonly timeouts: { readonly opMs: number; readonly downloadMs: number; readonly buildMs: number };
  readonly shell: Shell;
  /** Controller-side cache for `fetch: controller` artifacts. */
  readonly artifactCacheDir: string;
  /** Parallel jobs for engine builds; null: the node's nproc. */
  readonly buildJobs: number | null;
  fence(): Fence | null;
  exec(script: string, what: string, opts: { timeoutMs: number; stdin?: string; fence?: Fence | null }): Promise<ExecResult>;
}

const ENGINE_NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$/;
const SHA256_RE = /^[0-9a-f]{64}$/;

/** Written into the installed version's .complete: a different one means the version's definition changed. */
export function engineFingerprint(v: EngineVersionSpec): string {
  return createHash('sha256').update(JSON.stringify(v.install)).digest('hex').slice(0, 32);
}

export async function installEngine(c: EngineInstallContext, v: EngineVersionSpec): Promise<{ binary: string }> {
  if (!ENGINE_NAME_RE.test(v.engine) || !ENGINE_NAME_RE.test(v.version)) {
    throw new LlmgwError('SPEC_INVALID_VALUE', `bad engine name or version: ${JSON.stringify(v.engine)}@${JSON.stringify(v.version)}`, { node: c.node });
  }
  const what = `install engine ${v.engine}@${v.version}`;
  const fingerprint = engineFingerprint(v);
  const fence = c.fence();
  const paths: EnginePaths = { dataDir: c.dataDir, engine: v.engine, version: v.version, nonce: randomBytes(6).toString('hex'), fingerprint, fence };
  const inst = v.install;
  if (inst.method === 'path') {
    if (!inst.path.startsWith('/')) throw new LlmgwError('ENGINE_NOT_FOUND', `engine ${v.engine}@${v.version}: path must be absolute: ${inst.path}`, { node: c.node });
    const res = await c.exec(pathEngineScript({ ...paths, path: inst.path }), what, { timeoutMs: c.timeouts.opMs, fence });
    return { binary: parseInstalledBinary(res.stdout) ?? '' };
  }
  const installed = parseInstalledBinary((await c.exec(engineInstalledScript(paths), `${what}: check`, { timeoutMs: c.timeouts.opMs })).stdout);
  if (installed !== null) return { binary: installed };

  if (inst.method === 'artifact') {
    checkRelativePath(inst.binary, `engine ${v.engine}@${v.version} binary`);
    const sha256 = inst.sha256.toLowerCase();
    if (!SHA256_RE.test(sha256)) throw new LlmgwError('SPEC_INVALID_VALUE', `engine ${v.engine}@${v.version}: bad sha256 ${inst.sha256}`, { node: c.node });
    if (inst.fetch === 'node') {
      const res = await c.exec(artifactInstallScript({ ...paths, url: inst.url, sha256, binary: inst.binary }), what, { timeoutMs: c.timeouts.downloadMs, fence });
      return { binary: parseInstalledBinary(res.stdout) ?? '' };
    }
    const local = await fetchArtifact(inst.url, sha256, c.artifactCacheDir, c.timeouts.downloadMs);
    await c.exec(engineStageScript(paths), `${what}: stage`, { timeoutMs: c.timeouts.opMs, fence });
    try {
      await c.shell.upload(local, `${engineStageDir(paths)}/.artifact`, { timeoutMs: c.timeouts.downloadMs, mode: 0o644 });
    } catch (e) {
      await c.exec(engineCleanupScript(paths), `${what}: cleanup`, { timeoutMs: c.timeouts.opMs }).catch(() => {});
      throw e;
    }
    const res = await c.exec(artifactInstallScript({ ...paths, url: null, sha256, binary: inst.binary }), what, { timeoutMs: c.timeouts.downloadMs, fence });
    return { binary: parseInstalledBinary(res.stdout) ?? '' };
  }
  // build
  if (!/^[A-Za-z0-9._-]+$/.test(inst.target)) throw new LlmgwError('SPEC_INVALID_VALUE', `engine ${v.engine}@${v.version}: bad build target ${inst.target}`, { node: c.node });
  const res = await c.exec(
    buildInstallScript({ ...paths, git: inst.git, ref: inst.ref, cmakeFlags: inst.cmakeFlags, target: inst.target, jobs: c.buildJobs }),
    what,
    { timeoutMs: c.timeouts.buildMs, fence },
  );
  return { binary: parseInstalledBinary(res.stdout) ?? '' };
}

function checkRelativePath(p: string, what: string): void {
  if (p === '' || p.startsWith('/') || p.split('/').some((s) => s === '..' || s === '')) {
    throw new LlmgwError('SPEC_INVALID_VALUE', `${what} must be a relative path inside the archive, got ${JSON.stringify(p)}`, { path: p });
  }
}
