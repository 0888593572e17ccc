/**
 * The parts of undici the controller and router use (Agent, Pool, `request`), loaded without
 * undici's index: the index loads all of undici (fetch and its WebSocket, EventSource, cache
 * storage, cookies, mocks, the SQLite cache store), 4.7 MB of V8 heap against 1.7 MB for these
 * (a fresh node process, forced GC: bench/RESULTS.md, "The serve at 1,000 models as the service
 * starts it"). `fetch` loads undici's index at its first call (an artifact download over HTTP).
 *
 * undici has no `exports` map, so its files are reachable; the version is pinned exactly in
 * package.json because these paths are not its public interface (test/unit/serve-imports.test.ts
 * loads them and checks the serve loads no more).
 */
import { createRequire } from 'node:module';
import type * as Undici from 'undici';

const require = createRequire(import.meta.url);

const Dispatcher = require('undici/lib/dispatcher/dispatcher.js') as typeof Undici.Dispatcher;
// what undici's index does: request, stream, pipeline, connect and upgrade on every dispatcher
Object.assign(Dispatcher.prototype, require('undici/lib/api/index.js') as object);

export const Agent = require('undici/lib/dispatcher/agent.js') as typeof Undici.Agent;
export type Agent = Undici.Agent;
export const Pool = require('undici/lib/dispatcher/pool.js') as typeof Undici.Pool;
export type Pool = Undici.Pool;
const { getGlobalDispatcher } = require('undici/lib/global.js') as { getGlobalDispatcher: typeof Undici.getGlobalDispatcher };

type RequestOptions = { dispatcher?: Undici.Dispatcher } & Omit<Undici.Dispatcher.RequestOptions, 'origin' | 'path' | 'method'> & Partial<Pick<Undici.Dispatcher.RequestOptions, 'method'>>;

/** undici's `request(url, options)`: the same call on `options.dispatcher` (else the global one) for an absolute URL. */
export function request(url: string | URL, opts: RequestOptions = {}): Promise<Undici.Dispatcher.ResponseData> {
  const u = typeof url === 'string' ? new URL(url) : url;
  const { dispatcher = getGlobalDispatcher(), ...rest } = opts;
  return dispatcher.request({ ...rest, origin: u.origin, path: u.search ? `${u.pathname}${u.search}` : u.pathname, method: rest.method ?? (rest.body ? 'PUT' : 'GET') });
}

/** undici's fetch, its index loaded at the first call. */
export async function fetch(input: Parameters<typeof Undici.fetch>[0], init?: Parameters<typeof Undici.fetch>[1]): ReturnType<typeof Undici.fetch> {
  return (await import('undici')).fetch(input, init);
}
