/**
 * A per-key limit across several instances on etcd: three real `llmgw serve` on one etcd over a
 * one-node sshd fleet running one model on the real llama-server; access/keys.yaml gives a key
 * 60 requests per minute; 200 requests spread over the three routers within a minute: 54–66 succeed
 * (each router enforces its share of the limit, ha/router-shares.ts), the rest get 429 KEY_RATE_LIMITED.
 * A key with `concurrency: 1`: three long streams at once, one per router, give one 200 and two 429
 * KEY_CONCURRENCY_LIMITED (the shares are floored, the remainder to the lowest id: 1, 0, 0).
 */
import { strict as assert } from 'node:assert';
import { createHash } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Etcd3 } from 'etcd3';
import { startTestFleet, type TestFleet } from '../harness/controller.js';
import { startEtcd, type EtcdInstance } from '../harness/etcd.js';
import { spawnServe, type ServeProc, procsDiag } from '../harness/serve-proc.js';
import { until } from '../harness/wait.js';

const KEY = 'ha-limited-key-0001';
const CONC_KEY = 'ha-concurrency-key-0002';
const HA = (endpoint: string): string[] => ['--etcd', endpoint, '--lease-ttl', '4s', '--renew-deadline', '3s', '--retry-period', '1s'];

let etcd: EtcdInstance;
let fleet: TestFleet;
let procs: ServeProc[] = [];
const diag = (): string => procsDiag(procs, 2500);

before(async () => {
  [etcd, fleet] = await Promise.all([startEtcd(), startTestFleet({ nodes: 1 })]);
  const files = fleet.baseFiles();
  for (const f of Object.keys(files)) if (f.startsWith('models/') && f !== 'models/good.yaml') delete files[f];
  files['access/keys.yaml'] = ['keys:', '  - name: limited', `    sha256: ${createHash('sha256').update(KEY).digest('hex')}`, '    models: ["*"]', '    limits: { requests_per_minute: 60 }',
    '  - name: one-at-a-time', `    sha256: ${createHash('sha256').update(CONC_KEY).digest('hex')}`, '    models: ["*"]', '    limits: { concurrency: 1 }', ''].join('\n');
  await fleet.push(files, 'fleet: one model, a key with 60 rpm');
  procs = await Promise.all(['a', 'b', 'c'].map((name) => spawnServe({ name, fleet, args: HA(etcd.endpoint), routerAuth: true })));
});

after(async () => {
  await Promise.all(procs.map((p) => p.sigkill()));
  await fleet?.cleanup();
  await etcd?.stop();
});

async function chat(p: ServeProc): Promise<{ status: number; reason: string }> {
  const r = await fetch(`http://127.0.0.1:${p.routerPort}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
    body: JSON.stringify({ model: 'good', messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }),
    signal: AbortSignal.timeout(60_000),
  });
  await r.arrayBuffer();
  return { status: r.status, reason: r.headers.get('x-llmgw-reason') ?? '' };
}

describe('a per-key limit over three instances on etcd', () => {
  it('60 requests/minute, 200 requests spread over the three routers in a minute: 54–66 succeed', async () => {
    // every router serves the model (a probe without the key: 401 means the router is up and has the spec)
    for (const p of procs) {
      await until(`${p.name} serving good`, 180_000, async () => {
        const ms = await p.admin<{ models: { name: string; phase: string }[] }>('/models');
        return ms.models.find((m) => m.name === 'good')?.phase === 'ready';
      }, { diag });
    }
    // each router has counted the three (ha/router-shares.ts: a refresh every retry period counts the
    // registered routers, then writes the router's load report): all three registered, then two
    // reports of each router written after that, the second after a count that saw all three
    const client = new Etcd3({ hosts: etcd.endpoint });
    try {
      await until('the three routers registered in etcd', 60_000, async () => (await client.getAll().prefix('/llmgw/routers/').keys()).length === 3, { diag });
      const allRegisteredAt = Date.now();
      const reports = new Map<string, Set<number>>();
      await until('two load reports of each router after all three registered', 60_000, async () => {
        for (const v of Object.values(await client.getAll().prefix('/llmgw/load/').strings())) {
          const r = JSON.parse(v) as { router: string; at: number };
          if (r.at > allRegisteredAt) reports.set(r.router, (reports.get(r.router) ?? new Set()).add(r.at));
        }
        return reports.size === 3 && [...reports.values()].every((ats) => ats.size >= 2);
      }, { diag, everyMs: 200 });
    } finally {
      client.close();
    }
    const t0 = Date.now();
    const results: { status: number; reason: string }[] = [];
    for (let batch = 0; batch < 20; batch++) {
      results.push(...(await Promise.all(Array.from({ length: 10 }, (_, i) => chat(procs[(batch * 10 + i) % 3]!)))));
    }
    const took = Date.now() - t0;
    assert.ok(took < 50_000, `the 200 requests took ${took} ms`);
    const ok = results.filter((r) => r.status === 200).length;
    const limited = results.filter((r) => r.status === 429 && r.reason === 'KEY_RATE_LIMITED').length;
    assert.equal(ok + limited, 200, JSON.stringify(results.filter((r) => r.status !== 200 && r.status !== 429)));
    assert.ok(ok >= 54 && ok <= 66, `${ok} of 200 succeeded`);
    // each router refuses with its share named
    const r = await fetch(`http://127.0.0.1:${procs[0]!.routerPort}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` }, body: JSON.stringify({ model: 'good', messages: [], max_tokens: 1 }) });
    assert.equal(r.status, 429);
    assert.match(((await r.json()) as { error: { message: string } }).error.message, /allows 20 requests per minute \(access\/keys.yaml, this router's share of 60 over 3 routers\)/);
    console.log(`ha-key-limits: ${ok} of 200 succeeded in ${took} ms`);
  });

  it('concurrency: 1 over three routers: three long streams at once, one per router, give one 200 and two 429', async () => {
    const stream = async (p: ServeProc): Promise<{ status: number; reason: string }> => {
      const r = await fetch(`http://127.0.0.1:${p.routerPort}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${CONC_KEY}` },
        body: JSON.stringify({ model: 'good', messages: [{ role: 'user', content: 'hi' }], max_tokens: 200, ignore_eos: true, stream: true }),
        signal: AbortSignal.timeout(120_000),
      });
      await r.arrayBuffer();
      return { status: r.status, reason: r.headers.get('x-llmgw-reason') ?? '' };
    };
    const results = await Promise.all(procs.map((p) => stream(p)));
    assert.deepEqual(results.map((r) => r.status).sort(), [200, 429, 429], JSON.stringify(results));
    assert.deepEqual(results.filter((r) => r.status === 429).map((r) => r.reason), ['KEY_CONCURRENCY_LIMITED', 'KEY_CONCURRENCY_LIMITED']);
  });
});
