/**
 * A model origin shaped like Hugging Face's: the "hub" redirects to a second origin, the "CDN", with a
 * signed URL. Gated (with a token), the hub answers 401 without `Bearer <token>`. Both record each
 * request's Authorization header and whether the token was in any process's argv (`ps`) while it was
 * being answered.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createReadStream, statSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export const GATED_PATH = '/org/gated-GGUF/resolve/main/tiny.gguf';

export interface Seen {
  readonly method: string;
  readonly auth: string | null;
  readonly tokenInArgv: boolean;
}

export interface GatedOrigin {
  /** The gated URL of the file. */
  readonly url: string;
  readonly hubSeen: Seen[];
  readonly cdnSeen: Seen[];
  close(): Promise<void>;
}

/** Serves `file` with HEAD, whole GETs and byte ranges (`a-b` and `a-`). */
function serveFile(req: IncomingMessage, res: ServerResponse, file: string): void {
  const size = statSync(file).size;
  const m = /^bytes=(\d+)-(\d*)$/.exec(String(req.headers.range ?? ''));
  if (!m) {
    res.writeHead(200, { 'content-length': size, 'accept-ranges': 'bytes' });
    if (req.method === 'HEAD') res.end();
    else createReadStream(file).pipe(res);
    return;
  }
  const start = Number(m[1]);
  const end = m[2] ? Math.min(Number(m[2]), size - 1) : size - 1;
  if (start >= size) {
    res.writeHead(416, { 'content-range': `bytes */${size}` }).end();
    return;
  }
  res.writeHead(206, { 'content-length': end - start + 1, 'content-range': `bytes ${start}-${end}/${size}`, 'accept-ranges': 'bytes' });
  if (req.method === 'HEAD') res.end();
  else createReadStream(file, { start, end }).pipe(res);
}

async function listen(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<{ url: string; server: Server }> {
  const server = createServer(handler);
  server.keepAliveTimeout = 500;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

/** The origin of `file`, gated by `token` (null: open to all). */
export async function startGatedOrigin(file: string, token: string | null): Promise<GatedOrigin> {
  const hubSeen: Seen[] = [];
  const cdnSeen: Seen[] = [];
  const seen = (req: IncomingMessage): Seen => ({
    method: req.method ?? '',
    auth: typeof req.headers.authorization === 'string' ? req.headers.authorization : null,
    tokenInArgv: token !== null && execFileSync('ps', ['-eo', 'args'], { encoding: 'utf8' }).includes(token),
  });
  const cdn = await listen((req, res) => {
    cdnSeen.push(seen(req));
    if ((req.url ?? '').startsWith('/blobs/model.gguf?sig=')) serveFile(req, res, file);
    else res.writeHead(404).end();
  });
  const hub = await listen((req, res) => {
    hubSeen.push(seen(req));
    if (req.url !== GATED_PATH) res.writeHead(404).end('not found\n');
    else if (token !== null && req.headers.authorization !== `Bearer ${token}`) res.writeHead(401, { 'content-type': 'text/plain' }).end('Access to model org/gated-GGUF is restricted.\n');
    else res.writeHead(302, { location: `${cdn.url}/blobs/model.gguf?sig=${randomBytes(4).toString('hex')}` }).end();
  });
  return {
    url: `${hub.url}${GATED_PATH}`,
    hubSeen,
    cdnSeen,
    async close() {
      for (const x of [hub, cdn]) x.server.closeAllConnections();
      for (const x of [hub, cdn]) await new Promise<void>((resolve) => x.server.close(() => resolve()));
    },
  };
}
