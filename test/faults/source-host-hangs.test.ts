/**
 * Fault 5: a model source host that accepts and never answers. The memory estimate's HTTP reads had
 * no timeout (undici's default is 300 s) and a failed estimate was retried on every pass, so every
 * pass stalled. Now each read has a deadline and a failed estimate waits before it is tried again.
 * Real stack: sshd node, git http-backend, llama-server; the silent host is a real TCP listener.
 */
import { strict as assert } from 'node:assert';
import { createServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { parseExposition, sampleValue } from '../../src/metrics/index.js';
import { DEFAULT_HEADER_TIMEOUT_MS, MemoryEstimator } from '../../src/reconciler/memory.js';
import { killReplicasUnder, modelYaml, startTestFleet, type TestController, type TestFleet } from '../harness/controller.js';
import { recordFault } from '../harness/fault-report.js';
import { SecretsScan } from '../harness/secrets-scan.js';
import { until } from '../harness/wait.js';

let fleet: TestFleet;
let ctl: TestController;
const sockets: Socket[] = [];
let closed = 0;
// accepts, reads what it is sent, never answers
const silent = createServer((s) => {
  sockets.push(s);
  s.resume();
  s.on('close', () => closed++);
});
const passes: number[] = [];
const RETRY_MS = 8_000;

/** The models as the controller last saw them, for a wait's failure message. */
const modelsNow = { diag: (): string => JSON.stringify(ctl.reconciler.snapshot().models.map((m) => [m.name, m.phase, m.unplaceable?.reason, m.replicas.map((r) => r.phase)])) };

before(async () => {
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', () => r()));
  const port = (silent.address() as AddressInfo).port;
  fleet = await startTestFleet({ nodes: 1 });
  const files = fleet.baseFiles();
  delete files['models/kev.yaml'];
  delete files['models/huge.yaml'];
  // the controller's own timer drives the passes (every 1 s); the test only watches
  files['fleet.yaml'] = files['fleet.yaml']!.replace('poll_interval: 1h', 'poll_interval: 1s');
  files['models/slowsrc.yaml'] = [`source: http://127.0.0.1:${port}/org/slow/resolve/main/slow.gguf`, `sha256: ${fleet.models.good2.sha256}`, 'profile: tiny', 'replicas: 1', ''].join('\n');
  await fleet.push(files, 'a model whose source host never answers');
  const memory = new MemoryEstimator({ retryAfterMs: RETRY_MS });
  ctl = await fleet.startController({ memory, onPass: (_r, seconds) => void passes.push(seconds) });
});

after(async () => {
  for (const s of sockets) s.destroy();
  silent.close();
  await fleet?.cleanup();
});

describe('fault 5: a model source host that accepts and never answers', () => {
  it('the slow model is unplaceable with a "timed out" reason; good is replaced within seconds of a crash; passes stay short', async () => {
    const model = (n: string) => ctl.reconciler.model(n);
    await until('good ready and slowsrc unplaceable', 60_000, () => model('good')?.phase === 'ready' && /timed out/.test(model('slowsrc')?.unplaceable?.reason ?? ''), modelsNow);
    const unplaceable = model('slowsrc')!.unplaceable!;
    assert.equal(unplaceable.code, 'PLACEMENT_MEMORY_UNKNOWN');
    const reason = unplaceable.reason;
    assert.match(reason, /HEAD http:\/\/127\.0\.0\.1:\d+\/org\/slow\/resolve\/main\/slow\.gguf timed out after 5 s/);
    assert.match(reason, /set memory: in models\/slowsrc\.yaml/);
    assert.equal(model('slowsrc')!.phase, 'unplaceable');

    // crash good's replica; the controller's own passes replace it
    const oldId = model('good')!.replicas[0]!.id;
    const passesBefore = passes.length;
    killReplicasUnder(fleet.nodes[0]!.dataDir);
    const crashedAt = Date.now();
    await until('good replaced', 30_000, () => model('good')?.phase === 'ready' && model('good')!.replicas.some((r) => r.id !== oldId && r.phase === 'ready'), modelsNow);
    const replacedMs = Date.now() - crashedAt;
    assert.ok(replacedMs < 15_000, `replaced after ${replacedMs} ms`);

    // keep watching past a retry of the estimate: it is retried after RETRY_MS, not on every pass
    const firstReads = (ctl.reconciler as unknown as { memory: MemoryEstimator }).memory.reads;
    await until('a retry of the estimate', RETRY_MS + 15_000, () => (ctl.reconciler as unknown as { memory: MemoryEstimator }).memory.reads > firstReads, modelsNow);
    // enough passes for the read bound below to mean something, however many came before the crash
    await until('8 passes, 6 of them since the crash', 15_000, () => passes.length > passesBefore + 5 && passes.length >= 8, modelsNow);
    const slowest = Math.max(...passes);
    assert.ok(slowest < DEFAULT_HEADER_TIMEOUT_MS / 1000 + 3, `slowest pass ${slowest} s`);
    const reads = (ctl.reconciler as unknown as { memory: MemoryEstimator }).memory.reads;
    assert.ok(reads <= 2 + Math.ceil((passes.length * 1) / (RETRY_MS / 1000)), `${reads} header reads over ${passes.length} passes`);
    // each read opened one connection, and the timeout closed it
    assert.ok(sockets.length <= reads + 1, `${sockets.length} connections for ${reads} reads`);
    await until('the timed-out connections closed by the client', 10_000, () => sockets.length - closed <= 1, modelsNow);

    // the metric shows it too: every pass under 10 s
    const s = parseExposition((await ctl.metricsApp.inject({ method: 'GET', url: '/metrics' })).body);
    const count = sampleValue(s, 'llmgw_reconcile_duration_seconds_count', {});
    const le10 = sampleValue(s, 'llmgw_reconcile_duration_seconds_bucket', { le: '10' });
    if (count !== undefined) assert.equal(le10, count);

    const scan = new SecretsScan().secret('engine key', 'test-engine-key').secret('git token', fleet.git.token);
    scan.collect('controller log', ctl.logs.map((l) => JSON.stringify(l)).join('\n'));
    scan.collect('/metrics', (await ctl.metricsApp.inject({ method: 'GET', url: '/metrics' })).body);
    scan.collect('snapshot', JSON.stringify(ctl.reconciler.snapshot()));
    scan.assertClean();
    recordFault({
      fault: '5 source host never answers',
      injected: 'a model whose https source is a socket that accepts and never answers, then pkill -9 of another model\'s replica',
      held: `unplaceable "…timed out after 5 s"; good replaced in ${(replacedMs / 1000).toFixed(1)} s; slowest of ${passes.length} passes ${slowest.toFixed(2)} s; ${reads} header reads (retry every ${RETRY_MS / 1000} s, not every pass); ${scan.summary}`,
    });
  });
});
