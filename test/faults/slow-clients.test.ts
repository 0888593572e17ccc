/**
 * Fault 6: slow and abusive clients against a real `llmgw serve` child. 500 sockets dripping a
 * webhook body (declaring 25 MiB), 500 sockets with a valid router key dripping a chat body, and 300
 * requests for an on-demand model that cannot start (its engine never listens), all at once. Must
 * hold: the admin API's status answers in under 1 s throughout; the controller's RSS grows by less
 * than RSS_BOUND; the webhook is refused before its body is read; dripping sockets are closed after
 * the client timeout; the router's in-flight cap answers 503 router_overloaded (requests waiting for
 * activation count against it). Loopback only.
 */
import { strict as assert } from 'node:assert';
import { createHash } from 'node:crypto';
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { writeTinyModel } from '../fixtures/gguf.js';
import { llamaServerDir } from '../harness/llama-server.js';
import { replicaPortRange } from '../harness/ports.js';
import { until } from '../harness/wait.js';
import { recordFault } from '../harness/fault-report.js';
import { SecretsScan } from '../harness/secrets-scan.js';
import { startServeChild, type ServeChild } from '../harness/serve-child.js';

/** The replica ports of this file's node (its own range: files run side by side). */
const PORTS = replicaPortRange();

const ROUTER_KEY = 'fault-router-key-5f1c0a9e7d';
const ADMIN_TOKEN = 'fault-admin-token-8e2b4c6d1a';
const WEBHOOK_SECRET = 'fault-webhook-secret-3a7f9b';
const CLIENT_TIMEOUT_S = 5;
const MAX_IN_FLIGHT = 600;
const DRIPS = 500;
const ACTIVATIONS = 300;
const RSS_BOUND = 150 * 1024 * 1024;

let serve: ServeChild;

before(async () => {
  const engineDir = await llamaServerDir();
  serve = await startServeChild({
    args: ['--admin-token-file', 'admin-token', '--webhook-secret-file', 'webhook-secret', '--client-timeout', `${CLIENT_TIMEOUT_S}s`, '--header-timeout', '3s', '--router-max-in-flight', String(MAX_IN_FLIGHT)],
    files: (home) => {
      writeFileSync(join(home, 'admin-token'), `${ADMIN_TOKEN}\n`, { mode: 0o600 });
      writeFileSync(join(home, 'webhook-secret'), `${WEBHOOK_SECRET}\n`, { mode: 0o600 });
      // an engine that passes --version and then never listens: the on-demand model stays "starting"
      const engine = join(home, 'sleepy-engine');
      writeFileSync(engine, `#!/bin/sh\nif [ "$1" = --version ]; then exec ${join(engineDir, 'llama-server')} --version; fi\nwhile :; do sleep 1; done\n`);
      chmodSync(engine, 0o755);
      return {
        'fleet.yaml': 'poll_interval: 5s\nactivation_window: 15s\nbackoff: { initial: 1s, max: 5s }\n',
        'nodes/local.yaml': `transport: local\ndata_dir: ${join(home, 'node')}\nports: { from: ${PORTS.from}, to: ${PORTS.to} }\n`,
        'engines/llama-cpp.yaml': `versions:\n  sleepy:\n    path: ${engine}\n`,
        'profiles/tiny.yaml': 'engine: llama-cpp@sleepy\nctx_size: 256\nthreads: 1\nparallel: 1\nmemory_overhead: 64MiB\nstart_timeout: 300s\n',
        'access/keys.yaml': `keys:\n  - name: tester\n    sha256: ${createHash('sha256').update(ROUTER_KEY).digest('hex')}\n    models: ["*"]\n`,
      };
    },
  });
  const model = await writeTinyModel(join(serve.home, 'sleepy.gguf'), { seed: 7 });
  // the model goes in with a second commit (the sha256 is known only now)
  const { gitCommit } = await import('../harness/serve-child.js');
  gitCommit(join(serve.home, 'fleet'), { 'models/sleepy.yaml': `source: file://${model.path}\nsha256: ${model.sha256}\nprofile: tiny\non_demand:\n  idle_timeout: 10m\n` }, 'an on-demand model that cannot start');
  await until('the spec with the model applied', 60_000, async () => ((await status()).body as { models: { total: number } }).models.total === 1, { diag: () => serve.out.slice(-3000) });
});

after(async () => {
  await serve?.stop();
});

async function status(): Promise<{ ms: number; body: unknown }> {
  const t = performance.now();
  const r = await fetch(`http://127.0.0.1:${serve.adminPort}/admin/v1/status`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
  const body = (await r.json()) as unknown;
  assert.equal(r.status, 200);
  return { ms: performance.now() - t, body };
}

interface Drip {
  readonly sock: Socket;
  readonly openedAt: number;
  closedAt: number | null;
  head: string;
}

function dripper(port: number, headers: string): Drip {
  const sock = connect(port, '127.0.0.1');
  const d: Drip = { sock, openedAt: performance.now(), closedAt: null, head: '' };
  // written now, not on 'connect': a drip written before the connection is up would be flushed
  // ahead of anything written in a 'connect' handler, and the server would see " POST …"
  sock.write(headers);
  sock.on('data', (b: Buffer) => {
    if (d.head.length < 200) d.head += b.toString('latin1');
  });
  sock.on('error', () => undefined);
  sock.on('close', () => (d.closedAt = performance.now()));
  return d;
}

function activation(): Promise<{ status: number; code: string; reason: string }> {
  const body = JSON.stringify({ model: 'sleepy', messages: [{ role: 'user', content: 'hi' }] });
  return new Promise((resolve, reject) => {
    const req = request(
      { host: '127.0.0.1', port: serve.routerPort, method: 'POST', path: '/v1/chat/completions', agent: false, headers: { 'content-type': 'application/json', authorization: `Bearer ${ROUTER_KEY}`, 'content-length': Buffer.byteLength(body) } },
      (res) => {
        let text = '';
        res.on('data', (c: Buffer) => (text += c.toString()));
        res.on('end', () => {
          let code = '';
          try {
            code = (JSON.parse(text) as { error: { code: string } }).error.code;
          } catch {
            code = `unparsed:${text.slice(0, 80)}`;
          }
          resolve({ status: res.statusCode ?? 0, code, reason: String(res.headers['x-llmgw-reason'] ?? '') });
        });
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

describe('fault 6: slow and abusive clients', () => {
  it(`${DRIPS} dripping webhooks, ${DRIPS} dripping router bodies and ${ACTIVATIONS} activations: status stays fast, memory bounded, sockets closed, the cap answers`, async () => {
    const rss0 = serve.rss();
    let rssPeak = rss0;
    const latencies: number[] = [];
    let polling = true;
    const poller = (async () => {
      while (polling) {
        latencies.push((await status()).ms);
        rssPeak = Math.max(rssPeak, serve.rss());
        await new Promise((r) => setTimeout(r, 200)); // deliberate: the status poller's period (latency and RSS sampled under the drip)
      }
    })();

    const webhookHead = `POST /admin/v1/webhook HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\nx-github-event: push\r\nx-hub-signature-256: sha256=${'0'.repeat(64)}\r\ncontent-length: 26214400\r\n\r\n{`;
    const routerHead = `POST /v1/chat/completions HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\nauthorization: Bearer ${ROUTER_KEY}\r\ncontent-length: 100000\r\n\r\n{`;
    const hooks: Drip[] = [];
    const bodies: Drip[] = [];
    for (let i = 0; i < DRIPS; i++) {
      hooks.push(dripper(serve.adminPort, webhookHead));
      bodies.push(dripper(serve.routerPort, routerHead));
    }
    const drip = setInterval(() => {
      for (const d of [...hooks, ...bodies]) if (d.closedAt === null && !d.sock.destroyed && d.sock.writable) d.sock.write(' ');
    }, 500);
    const answers = await Promise.all(Array.from({ length: ACTIVATIONS }, () => activation()));
    const waitClosed = async (ds: Drip[]): Promise<void> => {
      const deadline = performance.now() + (CLIENT_TIMEOUT_S + 10) * 1000;
      while (ds.some((d) => d.closedAt === null) && performance.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    };
    await waitClosed([...hooks, ...bodies]);
    clearInterval(drip);
    polling = false;
    await poller;
    for (const d of [...hooks, ...bodies]) d.sock.destroy();

    // the webhook: refused from its declared length, before reading the body (413), and closed
    assert.equal(hooks.filter((d) => d.closedAt === null).length, 0, 'every webhook socket closed');
    const hookStatus = new Map<string, number>();
    for (const d of hooks) hookStatus.set(d.head.slice(0, 12), (hookStatus.get(d.head.slice(0, 12)) ?? 0) + 1);
    assert.deepEqual([...hookStatus.keys()], ["HTTP/1.1 413"], JSON.stringify([...hookStatus]) + hooks[0]!.head);
    const hookLife = Math.max(...hooks.map((d) => d.closedAt! - d.openedAt));
    assert.ok(hookLife < (CLIENT_TIMEOUT_S + 3) * 1000, `a webhook socket lived ${hookLife} ms`);

    // dripping router bodies: 408 after the client timeout, or refused by the cap at once; all closed
    assert.equal(bodies.filter((d) => d.closedAt === null).length, 0, 'every dripping router socket closed');
    const bodyLife = Math.max(...bodies.map((d) => d.closedAt! - d.openedAt));
    assert.ok(bodyLife < (CLIENT_TIMEOUT_S + 3) * 1000, `a dripping router socket lived ${bodyLife} ms`);
    const timedOut = bodies.filter((d) => d.head.startsWith('HTTP/1.1 408')).length;
    const bodiesOverloaded = bodies.filter((d) => d.head.startsWith('HTTP/1.1 503') && d.head.includes('router_overloaded')).length;
    assert.equal(timedOut + bodiesOverloaded, DRIPS, `408: ${timedOut}, 503: ${bodiesOverloaded}, others: ${JSON.stringify(bodies.filter((d) => !/^HTTP\/1\.1 (408|503)/.test(d.head)).map((d) => d.head.slice(0, 60)).slice(0, 3))}`);

    // activations: every one a 503 from the catalogue; the cap took what did not fit
    const byCode = new Map<string, number>();
    for (const a of answers) byCode.set(`${a.status} ${a.code}`, (byCode.get(`${a.status} ${a.code}`) ?? 0) + 1);
    for (const key of byCode.keys()) assert.match(key, /^503 (router_overloaded|model_loading|model_failing)$/, JSON.stringify([...byCode]));
    const activationsOverloaded = byCode.get('503 router_overloaded') ?? 0;
    // 800 requests in flight at once against a cap of 600: at least 200 refused, wherever they were
    assert.ok(activationsOverloaded + bodiesOverloaded >= DRIPS + ACTIVATIONS - MAX_IN_FLIGHT, `refused ${activationsOverloaded} activations + ${bodiesOverloaded} drips`);
    assert.ok(activationsOverloaded < ACTIVATIONS, 'some activations were admitted and waited');

    // the admin API kept answering
    assert.ok(latencies.length >= 10, `${latencies.length} status polls`);
    const slowest = Math.max(...latencies);
    assert.ok(slowest < 1000, `slowest status ${slowest.toFixed(0)} ms`);
    const growth = rssPeak - rss0;
    assert.ok(growth < RSS_BOUND, `RSS grew by ${(growth / 2 ** 20).toFixed(0)} MiB`);

    const scan = new SecretsScan().secret('router key', ROUTER_KEY).secret('admin token', ADMIN_TOKEN).secret('webhook secret', WEBHOOK_SECRET);
    const engineKey = (await import('node:fs')).readFileSync(join(serve.home, 'state', 'engine-api-key'), 'utf8').trim();
    scan.secret('engine key', engineKey);
    scan.collect('llmgw stdout', serve.out);
    scan.collect('llmgw stderr', serve.err);
    scan.collect('status', JSON.stringify((await status()).body));
    scan.collect('/metrics', await (await fetch(`http://127.0.0.1:${serve.adminPort}/metrics`)).text());
    scan.collect('router answers', JSON.stringify(answers) + bodies.map((d) => d.head).join('\n'));
    scan.assertClean();

    recordFault({
      fault: '6 slow and abusive clients',
      injected: `${DRIPS} webhook sockets declaring 25 MiB and dripping, ${DRIPS} router sockets with a valid key dripping a body, ${ACTIVATIONS} requests for an on-demand model that cannot start (cap ${MAX_IN_FLIGHT}, client timeout ${CLIENT_TIMEOUT_S} s)`,
      held: `status answered ${latencies.length}× in ≤ ${slowest.toFixed(0)} ms; RSS +${(growth / 2 ** 20).toFixed(0)} MiB (bound ${RSS_BOUND / 2 ** 20}); webhooks 413 before the body, closed in ≤ ${(hookLife / 1000).toFixed(1)} s; drips 408 (${timedOut}) or 503 router_overloaded (${bodiesOverloaded}), closed in ≤ ${(bodyLife / 1000).toFixed(1)} s; activations ${JSON.stringify(Object.fromEntries(byCode))}; ${scan.summary}`,
    });
  });
});
