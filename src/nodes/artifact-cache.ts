/**
 * The controller-side cache of engine artifacts (`fetch: controller`): each downloaded once, named by
 * its sha256, verified while it streams, then uploaded to the nodes by the driver.
 */
import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, rename, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { fetch } from '../util/undici-lean.js';
import { LlmgwError } from '../errors/catalogue.js';

/** In-flight controller-side artifact downloads, shared by every driver in the process. */
const artifactDownloads = new Map<string, Promise<string>>();

/**
 * Download an artifact once into the controller's cache (named by sha256), verifying it while it
 * streams; concurrent calls for the same artifact share one download.
 */
export function fetchArtifact(url: string, sha256: string, cacheDir: string, timeoutMs: number): Promise<string> {
  const dest = join(cacheDir, `${sha256}.artifact`);
  const inflight = artifactDownloads.get(dest);
  if (inflight) return inflight;
  const p = (async () => {
    try {
      if ((await stat(dest)).isFile()) return dest;
    } catch {
      /* not cached */
    }
    await mkdir(cacheDir, { recursive: true });
    const tmp = `${dest}.part-${randomBytes(6).toString('hex')}`;
    const hash = createHash('sha256');
    try {
      let res;
      try {
        res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
      } catch (e) {
        throw new LlmgwError('ENGINE_DOWNLOAD_FAILED', `controller: download of ${url} failed: ${(e as Error).message}`, { url }, { cause: e });
      }
      if (!res.ok || res.body === null) {
        throw new LlmgwError('ENGINE_DOWNLOAD_FAILED', `controller: download of ${url} failed: HTTP ${res.status}`, { url, status: res.status });
      }
      const hasher = new Transform({
        transform(chunk: Buffer, _enc, cb) {
          hash.update(chunk);
          cb(null, chunk);
        },
      });
      try {
        await pipeline(Readable.fromWeb(res.body as import('node:stream/web').ReadableStream<Uint8Array>), hasher, createWriteStream(tmp, { mode: 0o644 }));
      } catch (e) {
        const nospc = (e as NodeJS.ErrnoException).code === 'ENOSPC';
        throw new LlmgwError(nospc ? 'NODE_DISK_FULL' : 'ENGINE_DOWNLOAD_FAILED', `controller: download of ${url} failed: ${(e as Error).message}`, { url }, { cause: e });
      }
      const got = hash.digest('hex');
      if (got !== sha256) {
        throw new LlmgwError('ENGINE_CHECKSUM_MISMATCH', `controller: artifact ${url} has sha256 ${got}, engines/ says ${sha256}`, { url, expected: sha256, got });
      }
      await rename(tmp, dest);
      return dest;
    } finally {
      await unlink(tmp).catch(() => {});
    }
  })().finally(() => artifactDownloads.delete(dest));
  artifactDownloads.set(dest, p);
  return p;
}
