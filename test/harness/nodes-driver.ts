/**
 * Helpers for the node-driver integration tests: a loopback HTTP file server with Range support and a
 * request log, temp dirs, and a profile fit for a tiny model on a 2-core machine.
 */
import { createReadStream, readFileSync, statSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { ProfileSpec } from '../../src/fleet-spec/types.js';

export interface ServedRequest {
  readonly path: string;
  readonly range: string | null;
}

export interface FileServer {
  readonly url: string;
  readonly requests: ServedRequest[];
  /** Serve a local file at `path` (e.g. "/llama.tar.gz"). */
  serve(path: string, file: string): void;
  count(path: string): number;
  close(): Promise<void>;
}

/** HTTP/1.1 file server on 127.0.0.1 that honours `Range: bytes=N-` (206) like a CDN. */
export async function startFileServer(): Promise<FileServer> {
  const files = new Map<string, string>();
  const requests: ServedRequest[] = [];
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    const range = typeof req.headers.range === 'string' ? req.headers.range : null;
    requests.push({ path, range });
    const file = files.get(path);
    if (file === undefined) {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
      return;
    }
    const size = statSync(file).size;
    const m = range === null ? null : /^bytes=(\d+)-$/.exec(range);
    if (m) {
      const start = Number(m[1]);
      if (start >= size) {
        res.writeHead(416, { 'content-range': `bytes */${size}` }).end();
        return;
      }
      res.writeHead(206, { 'content-length': size - start, 'content-range': `bytes ${start}-${size - 1}/${size}`, 'accept-ranges': 'bytes' });
      createReadStream(file, { start }).pipe(res);
      return;
    }
    res.writeHead(200, { 'content-length': size, 'accept-ranges': 'bytes' });
    createReadStream(file).pipe(res);
  });
  server.keepAliveTimeout = 500;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    serve: (path, file) => void files.set(path, file),
    count: (path) => requests.filter((r) => r.path === path).length,
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}

/** Small and quiet: a tiny model on a shared 2-core machine. */
export function tinyProfile(extraArgs: readonly string[] = []): ProfileSpec {
  return {
    name: 'tiny', file: 'profiles/tiny.yaml', engine: 'llama', engineVersion: 'cached',
    ctxSize: 256, threads: 1, parallel: 1, batchSize: null, embeddings: false,
    extraArgs: ['--threads-batch', '1', '--no-webui', ...extraArgs], memoryOverheadBytes: 0, cacheRamBytes: 0, startTimeoutMs: 60_000,
  };
}

/** True while the process exists and is not a zombie (nobody reaps orphans in some containers). */
export function pidAlive(pid: number): boolean {
  try {
    const s = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // "(comm)" may contain spaces: the state letter follows the last ')'
    const state = s.slice(s.lastIndexOf(')') + 2, s.lastIndexOf(')') + 3);
    return state !== 'Z' && state !== 'X';
  } catch {
    return false;
  }
}

/**
 * Cleanup of a replica a test started: SIGKILL its process group (replicas lead their own session),
 * but only while /proc/<pid>/cmdline still names one of `markers` (a temp dir of the test), so a pid
 * reused by someone else's process is never touched.
 */
export function killReplica(pid: number, markers: readonly string[]): void {
  let cmdline: string;
  try {
    cmdline = readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return; // gone
  }
  if (!markers.some((m) => m !== '' && cmdline.includes(m))) return;
  for (const target of [-pid, pid]) {
    try {
      process.kill(target, 'SIGKILL');
    } catch {
      /* gone */
    }
  }
}
