/**
 * git's own smart-HTTP server for tests: a loopback Node http server that runs
 * `git http-backend` as a CGI per request. Every request needs `Authorization: Basic` with the
 * configured token as password; authenticated users may push (receive-pack).
 */
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface GitHttpServer {
  /** Directory served as GIT_PROJECT_ROOT (bare repos live here, e.g. <root>/fleet.git). */
  readonly root: string;
  readonly port: number;
  readonly token: string;
  /** http://127.0.0.1:PORT/<repo> without credentials. */
  url(repo: string): string;
  /** The same URL with `llmgw:<token>@` in it, for the git CLI. */
  authUrl(repo: string): string;
  /** Requests served so far (method + path + status), for assertions. */
  readonly requests: ReadonlyArray<{ method: string; path: string; status: number }>;
  close(): Promise<void>;
}

export interface GitHttpServerOptions {
  root: string;
  /** Defaults to a random hex token. */
  token?: string;
}

/** Environment for git child processes that ignores the user's and the system's git config. */
export function isolatedGitEnv(extra: Record<string, string> = {}): Record<string, string> {
  return {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: process.env.HOME ?? '/tmp',
    LANG: 'C',
    GIT_CONFIG_NOSYSTEM: '1',
    GIT_CONFIG_GLOBAL: '/dev/null',
    GIT_TERMINAL_PROMPT: '0',
    ...extra,
  };
}

function checkAuth(req: IncomingMessage, token: string): string | null {
  const h = req.headers.authorization;
  if (!h || !h.startsWith('Basic ')) return null;
  const decoded = Buffer.from(h.slice(6), 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  if (colon < 0) return null;
  const user = decoded.slice(0, colon);
  const pass = decoded.slice(colon + 1);
  return pass === token ? user || 'git' : null;
}

function findHeaderEnd(buf: Buffer): { end: number; sep: number } | null {
  const crlf = buf.indexOf('\r\n\r\n');
  const lf = buf.indexOf('\n\n');
  if (crlf >= 0 && (lf < 0 || crlf < lf)) return { end: crlf, sep: 4 };
  if (lf >= 0) return { end: lf, sep: 2 };
  return null;
}

export async function startGitHttpServer(opts: GitHttpServerOptions): Promise<GitHttpServer> {
  const token = opts.token ?? randomBytes(16).toString('hex');
  const requests: { method: string; path: string; status: number }[] = [];

  const handle = (req: IncomingMessage, res: ServerResponse): void => {
    const u = new URL(req.url ?? '/', 'http://127.0.0.1');
    const record = (status: number): void => {
      requests.push({ method: req.method ?? 'GET', path: u.pathname, status });
    };
    const user = checkAuth(req, token);
    if (user === null) {
      req.resume();
      record(401);
      res.writeHead(401, { 'WWW-Authenticate': 'Basic realm="git"', 'Content-Type': 'text/plain' });
      res.end('authentication required\n');
      return;
    }
    const env = isolatedGitEnv({
      GIT_PROJECT_ROOT: opts.root,
      GIT_HTTP_EXPORT_ALL: '1',
      PATH_INFO: decodeURIComponent(u.pathname),
      REQUEST_METHOD: req.method ?? 'GET',
      QUERY_STRING: u.search.startsWith('?') ? u.search.slice(1) : u.search,
      CONTENT_TYPE: req.headers['content-type'] ?? '',
      REMOTE_USER: user,
      REMOTE_ADDR: req.socket.remoteAddress ?? '127.0.0.1',
      SERVER_PROTOCOL: 'HTTP/1.1',
      GATEWAY_INTERFACE: 'CGI/1.1',
    });
    if (req.headers['content-length'] !== undefined) env.CONTENT_LENGTH = String(req.headers['content-length']);
    if (req.headers['content-encoding'] !== undefined) env.HTTP_CONTENT_ENCODING = String(req.headers['content-encoding']);
    if (req.headers['git-protocol'] !== undefined) env.GIT_PROTOCOL = String(req.headers['git-protocol']);

    const child = spawn('git', ['http-backend'], { env, stdio: ['pipe', 'pipe', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString('utf8');
    });
    child.on('error', (err) => {
      if (!res.headersSent) {
        record(500);
        res.writeHead(500, { 'Content-Type': 'text/plain' });
      }
      res.end(`git http-backend failed: ${err.message}\n`);
    });
    child.stdin.on('error', () => {
      /* backend may exit before reading everything */
    });
    req.pipe(child.stdin);

    let head: Buffer = Buffer.alloc(0);
    let headersDone = false;
    child.stdout.on('data', (chunk: Buffer) => {
      if (headersDone) {
        res.write(chunk);
        return;
      }
      head = Buffer.concat([head, chunk]);
      const found = findHeaderEnd(head);
      if (!found) return;
      headersDone = true;
      const headerText = head.subarray(0, found.end).toString('latin1');
      const rest = head.subarray(found.end + found.sep);
      let status = 200;
      let statusText = 'OK';
      const headers: Record<string, string> = {};
      for (const line of headerText.split(/\r?\n/)) {
        const i = line.indexOf(':');
        if (i <= 0) continue;
        const k = line.slice(0, i).trim();
        const v = line.slice(i + 1).trim();
        if (k.toLowerCase() === 'status') {
          const m = /^(\d{3})\s*(.*)$/.exec(v);
          if (m) {
            status = Number(m[1]);
            statusText = m[2] || statusText;
          }
        } else {
          headers[k] = v;
        }
      }
      record(status);
      res.writeHead(status, statusText, headers);
      if (rest.length > 0) res.write(rest);
    });
    child.stdout.on('end', () => {
      if (!headersDone) {
        record(502);
        res.writeHead(502, { 'Content-Type': 'text/plain' });
        res.end(`git http-backend produced no CGI headers: ${stderr}\n`);
        return;
      }
      res.end();
    });
  };

  const server = createServer(handle);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  let closed = false;
  return {
    root: opts.root,
    port,
    token,
    requests,
    url: (repo) => `http://127.0.0.1:${port}/${repo}`,
    authUrl: (repo) => `http://llmgw:${token}@127.0.0.1:${port}/${repo}`,
    close: async () => {
      if (closed) return;
      closed = true;
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}
