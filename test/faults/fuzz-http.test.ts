/**
 * Fault 11 (fuzzing), the HTTP surfaces: random methods, paths, headers and bodies, sent as raw
 * bytes over real sockets. Router: built over a fake fleet view whose one ready replica is a stub
 * upstream recording every path it gets. Admin API: the real `llmgw serve` child (real reconciler
 * behind it). Must hold: never a 5xx with INTERNAL; never a request reaching a replica with a path
 * outside /v1/<plain segments>[?query] or the router's allow-list (router/api-paths.ts); every JSON error has a catalogue code; a request without a
 * valid grant (no key, a wrong one, one not granted the model) gets no 2xx and reaches no replica,
 * and a well-formed one gets 401/403.
 */
import { strict as assert } from 'node:assert';
import { writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import fc from 'fast-check';
import { Reasons } from '../../src/errors/catalogue.js';
import { buildRouter } from '../../src/router/app.js';
import { forwardsPath } from '../../src/router/api-paths.js';
import { FakeFleetView, fakeSpec, replica } from '../harness/fake-fleet-view.js';
import { startStubUpstream, type StubUpstream } from '../harness/stub-upstream.js';
import { replicaPortRange } from '../harness/ports.js';
import { recordFault } from '../harness/fault-report.js';
import { SecretsScan } from '../harness/secrets-scan.js';
import { startServeChild, type ServeChild } from '../harness/serve-child.js';

/** The replica ports of this file's node (its own range: files run side by side). */
const PORTS = replicaPortRange();

const RUNS = Number(process.env.LLMGW_FUZZ_RUNS ?? 150);
const ROUTER_KEY = 'fuzz-router-key-77c1d0e4';
const ADMIN_TOKEN = 'fuzz-admin-token-0b9e13aa';
/** Plain segments under /v1/; and of those only the router's allow-list (router/api-paths.ts) is forwarded. */
const ALLOWED_UPSTREAM_PATH = /^\/v1(?:\/[A-Za-z0-9_-][A-Za-z0-9._-]*)+(?:\?.*)?$/;

interface RawResponse {
  readonly status: number;
  readonly head: string;
  readonly body: string;
}

/** One request as raw bytes on its own connection; the whole response (or what came before a close). */
function raw(port: number, bytes: Buffer): Promise<RawResponse> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    const done = (): void => {
      const text = Buffer.concat(chunks).toString('latin1');
      const i = text.indexOf('\r\n\r\n');
      const head = i < 0 ? text : text.slice(0, i);
      const m = /^HTTP\/1\.1 (\d{3})/.exec(head);
      resolve({ status: m ? Number(m[1]) : 0, head, body: i < 0 ? '' : text.slice(i + 4) });
    };
    // not end(): node's HTTP server aborts a request whose client half-closes
    s.on('connect', () => s.write(bytes));
    s.on('data', (d: Buffer) => chunks.push(d));
    s.on('error', () => undefined);
    s.on('close', done);
    s.setTimeout(10_000, () => s.destroy());
  });
}

const tchar = fc.constantFrom(...'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.~!$&\'()*+,;=:@%'.split(''));
const segment = fc.oneof(
  fc.constantFrom('chat', 'completions', 'embeddings', 'models', 'alpha', 'beta', '..', '.', '', '%2e%2e', '%2E.', '.hidden', 'props', 'slots', 'metrics', 'health', '%00', '%2f', 'a%2fb', '\u00e9', 'x'.repeat(300)),
  fc.string({ unit: tchar, maxLength: 12 }),
);
const path = (prefixes: readonly string[]) =>
  fc.tuple(fc.constantFrom(...prefixes), fc.array(segment, { maxLength: 5 }), fc.option(fc.string({ unit: fc.constantFrom(...'a=&/.%?#x1'.split('')), maxLength: 12 }), { nil: undefined })).map(([p, segs, q]) => `${p}${segs.join('/')}${q === undefined ? '' : `?${q}`}`);
const method = fc.oneof(fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD', 'POST', 'POST'), fc.stringMatching(/^[A-Z]{1,10}$/));
const headerValue = fc.oneof(fc.string({ unit: fc.constantFrom(...'abcXYZ019 =;,/:+-_"\''.split('')), maxLength: 40 }), fc.constantFrom('application/json', 'text/plain', 'chunked', 'gzip', ''));
const json = fc.oneof(
  fc.record({ model: fc.oneof(fc.constantFrom('alpha', 'beta', 'alias-a', 'nope', ''), fc.string({ maxLength: 10 }), fc.integer(), fc.constant(null)), messages: fc.option(fc.array(fc.record({ role: fc.constantFrom('user', 'system'), content: fc.string({ maxLength: 20 }) }), { maxLength: 2 })), stream: fc.option(fc.boolean()) }, { requiredKeys: [] }).map((o) => JSON.stringify(o)),
  fc.jsonValue({ maxDepth: 4 }).map((v) => JSON.stringify(v)),
  fc.string({ unit: 'binary', maxLength: 200 }),
  fc.constant(''),
);

/** Well-formed requests to the known routes (so the fuzz also reaches the proxy and the handlers). */
let KNOWN: readonly string[] = [];

/**
 * One fuzz request: its bytes, what it is, the credential it carries (`auth`, undefined = none), and
 * for a well-formed request with a credential that grants nothing for it, the answers it may get.
 */
interface FuzzRequest {
  readonly desc: string;
  readonly bytes: Buffer;
  readonly auth: string | undefined;
  readonly mustRefuse?: readonly number[];
}

/**
 * `auth[0]` is the good credential; `refused`: well-formed requests to `refusedPaths` with one of
 * these credentials must be answered 401 or 403 (the auth oracle).
 */
function request(auth: readonly string[], prefixes: readonly string[], known: readonly string[], refused: readonly string[] = [], refusedPaths: readonly string[] = []): fc.Arbitrary<FuzzRequest> {
  KNOWN = known;
  // well-formed requests to the known routes with the good credential and a body naming a model
  const wellFormed = fc
    .record({
      path: fc.constantFrom(...known),
      method: fc.constantFrom('POST', 'POST', 'GET'),
      body: fc.record({ model: fc.constantFrom('alpha', 'alias-a', 'beta', 'x'), extra: fc.jsonValue({ maxDepth: 3 }), stream: fc.boolean() }).map((b) => JSON.stringify(b)),
    })
    .map(({ path: p, method: m, body }) => ({
      desc: `${m} ${p} (well-formed)`,
      auth: auth[0],
      bytes: Buffer.from(`${m} ${p} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\nauthorization: ${auth[0]}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`),
    }));
  const arbitraries: { weight: number; arbitrary: fc.Arbitrary<FuzzRequest> }[] = [{ weight: 3, arbitrary: randomRequest(auth, prefixes, known) }, { weight: 1, arbitrary: wellFormed }];
  if (refused.length > 0 && refusedPaths.length > 0) {
    // the same well-formed requests with no credential, a wrong one, or one not granted the model
    const wellFormedRefused = fc
      .record({
        path: fc.constantFrom(...refusedPaths),
        auth: fc.option(fc.constantFrom(...refused), { nil: undefined }),
        body: fc.record({ model: fc.constantFrom('alpha', 'alias-a'), messages: fc.constant([{ role: 'user', content: 'hi' }]), stream: fc.boolean() }).map((b) => JSON.stringify(b)),
      })
      .map(({ path: p, auth: a, body }) => ({
        desc: `POST ${p} with ${a === undefined ? 'no credential' : JSON.stringify(a)} (well-formed, not granted)`,
        auth: a,
        mustRefuse: [401, 403],
        bytes: Buffer.from(`POST ${p} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n${a === undefined ? '' : `authorization: ${a}\r\n`}content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`),
      }));
    arbitraries.push({ weight: 1, arbitrary: wellFormedRefused });
  }
  return fc.oneof(...arbitraries);
}

function randomRequest(auth: readonly string[], prefixes: readonly string[], known: readonly string[]): fc.Arbitrary<FuzzRequest> {
  return fc
    .record({
      method: fc.oneof({ weight: 1, arbitrary: method }, { weight: 1, arbitrary: fc.constant(known.length ? 'POST' : 'GET') }),
      path: fc.oneof(path(prefixes), fc.constantFrom(...KNOWN), fc.string({ unit: tchar, maxLength: 30 }).map((s) => `/${s}`), fc.constant('*')),
      auth: fc.option(fc.constantFrom(...auth), { nil: undefined }),
      extra: fc.array(fc.tuple(fc.stringMatching(/^[A-Za-z][A-Za-z0-9-]{0,15}$/), headerValue), { maxLength: 4 }),
      body: json,
      lengthMode: fc.constantFrom('exact', 'exact', 'exact', 'chunked', 'none', 'short'),
    })
    .map((r) => {
      const body = Buffer.from(r.body, 'latin1');
      const lines = [`${r.method} ${r.path} HTTP/1.1`, 'host: 127.0.0.1', 'connection: close'];
      if (r.auth !== undefined) lines.push(`authorization: ${r.auth}`);
      for (const [k, v] of r.extra) if (!/^(host|connection|content-length|transfer-encoding)$/i.test(k)) lines.push(`${k}: ${v}`);
      let payload = body;
      if (r.lengthMode === 'exact') lines.push(`content-length: ${body.length}`);
      else if (r.lengthMode === 'short') lines.push(`content-length: ${Math.max(0, body.length - 1)}`);
      else if (r.lengthMode === 'chunked') {
        lines.push('transfer-encoding: chunked');
        payload = Buffer.concat([Buffer.from(body.length ? `${body.length.toString(16)}\r\n` : ''), body, Buffer.from(body.length ? '\r\n0\r\n\r\n' : '0\r\n\r\n')]);
      } else payload = Buffer.alloc(0);
      return { desc: `${r.method} ${r.path} (${r.lengthMode}, ${r.extra.length} extra headers)`, auth: r.auth, bytes: Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), payload]) };
    });
}

function checkAnswer(r: RawResponse, desc: string, envelope: 'openai' | 'admin'): string {
  assert.ok(r.status > 0, `no HTTP answer to ${desc}`);
  let code = '';
  if (r.body.startsWith('{')) {
    let parsed: { error?: { code?: string } } | null = null;
    try {
      parsed = JSON.parse(r.body) as { error?: { code?: string } };
    } catch {
      /* a proxied stub answer may be cut by HEAD */
    }
    code = parsed?.error?.code ?? '';
    if (envelope === 'admin' && parsed?.error) assert.ok(code in Reasons, `admin error code ${code} is not in the catalogue (${desc})`);
  }
  const reason = /x-llmgw-reason: ([A-Z_]+)/i.exec(r.head)?.[1] ?? '';
  assert.notEqual(reason, 'INTERNAL', `INTERNAL for ${desc}: ${r.body.slice(0, 200)}`);
  assert.notEqual(code, 'INTERNAL', `INTERNAL for ${desc}: ${r.body.slice(0, 200)}`);
  assert.notEqual(code, 'internal_error', `internal_error for ${desc}: ${r.body.slice(0, 200)}`);
  if (r.status >= 500) assert.ok(reason !== '' || code !== '', `a ${r.status} without a catalogue reason for ${desc}: ${r.head}`);
  return `${r.status}`;
}

describe('fault 11: fuzzing the router over real sockets', () => {
  let stub: StubUpstream;
  let app: ReturnType<typeof buildRouter>;
  let port: number;
  const fleet = new FakeFleetView(
    fakeSpec({ models: { alpha: { aliases: ['alias-a'] }, beta: {} }, keys: [{ name: 'all', key: ROUTER_KEY, models: ['*'] }, { name: 'betaonly', key: 'fuzz-beta-only-key-1234', models: ['beta'] }] }),
    'fuzz-engine-key-5d2a9c41',
  );
  before(async () => {
    stub = await startStubUpstream();
    fleet.setReady('alpha', [replica('alpha', stub.url)]);
    fleet.setParked('beta', { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: 'unknown model architecture' });
    app = buildRouter({ fleet, auth: { required: true }, limits: { bodyBytes: 4096, requestTimeoutMs: 1000, headersTimeoutMs: 1000 } });
    await app.listen({ port: 0, host: '127.0.0.1' });
    port = (app.server.address() as AddressInfo).port;
  });
  after(async () => {
    await app.close();
    await stub.close();
  });

  it(`${RUNS} random requests: no INTERNAL, nothing outside /v1/<segments> reaches the replica, nothing without a grant reaches it at all`, async () => {
    const statuses = new Map<string, number>();
    const upstreamCalls = (): number => stub.requests.filter((r) => r.url !== '/slots').length;
    let refusedChecked = 0;
    await fc.assert(
      fc.asyncProperty(
        request(
          [`Bearer ${ROUTER_KEY}`, `Bearer ${ROUTER_KEY}`, 'Bearer fuzz-beta-only-key-1234', 'Bearer wrong', 'Basic abc', ''],
          ['/v1/', '/v1/', '/v1//', '/', '/v1/../', '/admin/v1/'],
          ['/v1/chat/completions', '/v1/completions', '/v1/embeddings', '/v1/rerank', '/v1/models', '/v1/models/alpha'],
          ['Bearer fuzz-beta-only-key-1234', 'Bearer wrong', `Bearer ${ROUTER_KEY}x`, `bearer  ${ROUTER_KEY.slice(0, -1)}`, `Basic ${Buffer.from(`x:${ROUTER_KEY}`).toString('base64')}`, ROUTER_KEY, ''],
          ['/v1/chat/completions', '/v1/completions', '/v1/embeddings'],
        ),
        async (req) => {
          // the auth oracle: requests run one at a time, so what reached the replica during this one is its doing
          const before = upstreamCalls();
          const res = await raw(port, req.bytes);
          const s = checkAnswer(res, req.desc, 'openai');
          statuses.set(s, (statuses.get(s) ?? 0) + 1);
          const granted = req.auth === `Bearer ${ROUTER_KEY}`;
          if (!granted) {
            assert.equal(upstreamCalls(), before, `${req.desc}: reached the replica without a grant for alpha`);
            if (req.auth !== 'Bearer fuzz-beta-only-key-1234') assert.ok(res.status < 200 || res.status >= 300, `${req.desc}: ${res.status} without a valid key`);
            else refusedChecked++;
          }
          if (req.mustRefuse) {
            assert.ok(req.mustRefuse.includes(res.status), `${req.desc}: answered ${res.status}, not 401/403`);
            refusedChecked++;
          }
        },
      ),
      { numRuns: RUNS },
    );
    // The router's own background look at the replica's slots (router/slots.ts) is GET /slots, every
    // second: not a client request; under load the fuzz run outlasts a second and meets it.
    for (const r of stub.requests) if (r.url !== '/slots') assert.ok(ALLOWED_UPSTREAM_PATH.test(r.url) && forwardsPath(r.url), `the replica got ${r.url}`);
    for (const r of stub.requests) assert.equal(r.headers.authorization, 'Bearer fuzz-engine-key-5d2a9c41', 'the replica gets the engine key, not the client key');
    assert.ok(stub.requests.length > 0, 'some requests were proxied (the fuzz reaches the proxy)');
    assert.ok(refusedChecked > RUNS / 20, `the auth oracle checked only ${refusedChecked} requests`);
    const scan = new SecretsScan().secret('router key', ROUTER_KEY);
    scan.collect('upstream requests', JSON.stringify(stub.requests.map((r) => ({ ...r, headers: { ...r.headers, authorization: undefined } }))));
    scan.assertClean();
    recordFault({ fault: '11 fuzzing: router HTTP', injected: `${RUNS} raw requests (random methods, paths with ../%2e/empty/unicode segments, headers, JSON and binary bodies, exact/short/chunked/no length)`, held: `no INTERNAL; none without a grant reached the replica (${refusedChecked} checked 401/403 or not proxied); ${stub.requests.length} proxied, all to /v1/<plain segments> on the allow-list, all with the engine key and not the client's; statuses ${JSON.stringify(Object.fromEntries(statuses))}` });
  });
});

describe('fault 11: fuzzing the admin API of a real llmgw serve over real sockets', () => {
  let serve: ServeChild;
  before(async () => {
    serve = await startServeChild({
      args: ['--admin-token-file', 'admin-token', '--webhook-secret-file', 'webhook-secret', '--client-timeout', '1s', '--header-timeout', '1s'],
      files: (home) => {
        writeFileSync(`${home}/admin-token`, `${ADMIN_TOKEN}\n`, { mode: 0o600 });
        writeFileSync(`${home}/webhook-secret`, 'fuzz-webhook-secret-91ab\n', { mode: 0o600 });
        return { 'fleet.yaml': 'poll_interval: 1h\n', 'nodes/local.yaml': `transport: local\ndata_dir: ${home}/node\nports: { from: ${PORTS.from}, to: ${PORTS.to} }\n` };
      },
    });
  });
  after(async () => {
    await serve?.stop();
  });

  it(`${RUNS} random requests: no INTERNAL, every error from the catalogue, nothing answered without the token`, async () => {
    const statuses = new Map<string, number>();
    let refusedChecked = 0;
    await fc.assert(
      fc.asyncProperty(
        request(
          [`Bearer ${ADMIN_TOKEN}`, `Bearer ${ADMIN_TOKEN}`, 'Bearer wrong', ''],
          ['/admin/v1/', '/admin/v1/models/', '/admin/v1/replicas/', '/admin/v1/restart', '/admin/v1/webhook', '/metrics', '/'],
          ['/admin/v1/status', '/admin/v1/models', '/admin/v1/nodes', '/admin/v1/replicas', '/admin/v1/restart', '/admin/v1/restart?ids=a,b', '/admin/v1/webhook', '/admin/v1/models/x/retry', '/metrics'],
          ['Bearer wrong', `Bearer ${ADMIN_TOKEN}x`, `Bearer ${ADMIN_TOKEN.slice(0, -1)}`, ADMIN_TOKEN, `Basic ${Buffer.from(`x:${ADMIN_TOKEN}`).toString('base64')}`, ''],
          ['/admin/v1/restart', '/admin/v1/models/x/retry', '/admin/v1/status'],
        ),
        async (req) => {
          const res = await raw(serve.adminPort, req.bytes);
          const s = checkAnswer(res, req.desc, 'admin');
          statuses.set(s, (statuses.get(s) ?? 0) + 1);
          // the auth oracle: only /metrics (by design) and the webhook (its own signature) answer without the token
          const path = req.bytes.toString('latin1').split(' ')[1] ?? '';
          if (req.auth !== `Bearer ${ADMIN_TOKEN}` && path.startsWith('/admin/v1/') && !path.startsWith('/admin/v1/webhook')) {
            assert.ok(res.status < 200 || res.status >= 300, `${req.desc}: ${res.status} without the admin token`);
          }
          if (req.mustRefuse) {
            assert.ok(req.mustRefuse.includes(res.status), `${req.desc}: answered ${res.status}, not 401/403`);
            refusedChecked++;
          }
        },
      ),
      { numRuns: RUNS },
    );
    assert.ok(serve.child.exitCode === null, 'the controller is still up');
    assert.ok(refusedChecked > RUNS / 20, `the auth oracle checked only ${refusedChecked} requests`);
    assert.ok(!/"level":50/.test(serve.out), `an error was logged: ${serve.out.split('\n').filter((l) => l.includes('"level":50')).slice(0, 2).join('\n')}`);
    const scan = new SecretsScan().secret('admin token', ADMIN_TOKEN).secret('webhook secret', 'fuzz-webhook-secret-91ab');
    scan.collect('llmgw stdout', serve.out);
    scan.collect('llmgw stderr', serve.err);
    scan.assertClean();
    recordFault({ fault: '11 fuzzing: admin HTTP', injected: `${RUNS} raw requests to a real llmgw serve's admin port (random methods, paths, tokens, headers, bodies)`, held: `no INTERNAL, no error logged, every error code in the catalogue, ${refusedChecked} well-formed requests without the token all 401; statuses ${JSON.stringify(Object.fromEntries(statuses))}; ${scan.summary}` });
  });
});
