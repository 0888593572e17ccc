/**
 * "Parked after exactly 5" under load, against the real components (sshd node, llama-server, a fleet
 * repo served over git): while a client asks the router for an unplaceable model five times a second,
 * a model whose every start fails (llama-server: unknown model architecture) is started exactly
 * park_after_failures times, one at a time, each start at least the backoff after the previous
 * failure, then parked. Then unparked and parked again nine more times, alternately by a commit
 * carrying `Llmgw-Retry:` and by `ctl retry`, each time with exactly 5 more starts.
 */
import { strict as assert } from 'node:assert';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { Reasons } from '../../src/errors/catalogue.js';
import { openNodeDriver } from '../../src/nodes/shell-driver.js';
import type { NodeDriver, ReplicaStartSpec } from '../../src/nodes/driver.js';
import { backoffMs } from '../../src/reconciler/health.js';
import { buildRouter } from '../../src/router/app.js';
import { modelYaml, startTestFleet, type TestController, type TestFleet } from '../harness/controller.js';
import { until } from '../harness/wait.js';

let fleet: TestFleet;
let ctl: TestController;
let router: FastifyInstance;

interface Attempt {
  readonly id: string;
  readonly startedAt: number;
  /** When its failure was reported (waitReady rejected), or null while in flight / when it got ready. */
  endedAt: number | null;
}
const attempts: Attempt[] = [];
const BACKOFF = { initial: 300, max: 1200 };

before(async () => {
  fleet = await startTestFleet({ nodes: 1 });
  const files = fleet.baseFiles();
  files['fleet.yaml'] = files['fleet.yaml']!.replace('backoff: { initial: 100ms, max: 400ms }', `backoff: { initial: ${BACKOFF.initial}ms, max: ${BACKOFF.max}ms }`);
  delete files['models/good.yaml'];
  files['models/huge.yaml'] = modelYaml(fleet.models.good2, ['on_demand: { idle_timeout: 1m }', 'memory: 1TiB']);
  await fleet.push(files, 'fleet: a failing model and an on-demand model that fits nowhere');
  ctl = await fleet.startController({
    driverFor: (n) => {
      const d = openNodeDriver(n, { secretsDir: fleet.secretsDir });
      return Object.assign(Object.create(d) as NodeDriver, {
        startReplica: (spec: ReplicaStartSpec) => {
          if (spec.model === 'kev') attempts.push({ id: spec.id, startedAt: Date.now(), endedAt: null });
          return d.startReplica(spec);
        },
        waitReady: async (id: string, opts: { timeoutMs: number; signal?: AbortSignal }) => {
          try {
            await d.waitReady(id, opts);
          } catch (e) {
            const a = attempts.find((x) => x.id === id);
            if (a) a.endedAt = Date.now();
            throw e;
          }
        },
      });
    },
  });
  router = buildRouter({ fleet: ctl.reconciler, auth: { required: false } });
  await router.listen({ host: '127.0.0.1', port: 0 });
});

after(async () => {
  await router?.close();
  await fleet?.cleanup();
});

/** A client asking for the unplaceable model five times a second until stopped; every answer is model_unplaceable. */
function hammer(url: string): { stop(): Promise<{ sent: number; wrong: string[] }> } {
  let stopped = false;
  let sent = 0;
  const wrong: string[] = [];
  const loop = (async () => {
    while (!stopped) {
      const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'huge', messages: [{ role: 'user', content: 'hi' }] }) });
      const body = (await r.json()) as { error?: { code?: string } };
      sent++;
      if (r.status !== 503 || body.error?.code !== 'model_unplaceable') wrong.push(`${r.status} ${JSON.stringify(body)}`);
      await new Promise((res) => setTimeout(res, 200)); // deliberate: the client's pacing, five requests a second
    }
  })();
  return {
    async stop() {
      stopped = true;
      await loop;
      return { sent, wrong };
    },
  };
}

const parked = (): boolean => ctl.reconciler.model('kev')?.parked != null;

const kevNow = { diag: (): string => `kev: ${JSON.stringify(ctl.reconciler.model('kev'))}` };

function assertCycle(from: number, what: string): void {
  // a start the node set back (its port taken in between: not the model's failure) is logged with its code and not counted
  const setBack = new Set(ctl.logs.filter((l) => l.model === 'kev' && l.msg.startsWith('replica start set back')).map((l) => String(l.replica)));
  const all = attempts.slice(from);
  const cycle = all.filter((a) => !setBack.has(a.id));
  const codes = all.map((a) => ctl.logs.find((l) => l.replica === a.id && l.msg === 'replica start failed')?.code ?? 'none');
  assert.equal(cycle.length, 5, `${what}: ${cycle.length} counted starts of kev, want exactly 5 (all ${all.length} failed with: ${codes.join(', ')})`);
  for (const a of all.filter((x) => setBack.has(x.id))) {
    const code = ctl.logs.find((l) => l.replica === a.id && l.msg === 'replica start failed')?.code;
    assert.ok(!Reasons[code as keyof typeof Reasons]?.countsTowardParking, `${what}: a start set back with ${code}, which counts`);
  }
  for (const [i, a] of cycle.entries()) {
    assert.ok(a.endedAt !== null, `${what}: start ${i + 1} never reported its failure`);
    if (i === 0) continue;
    const prev = cycle[i - 1]!;
    assert.ok(a.startedAt >= prev.endedAt!, `${what}: start ${i + 1} began while start ${i} was still in flight`);
    const gap = a.startedAt - prev.endedAt!;
    assert.ok(gap >= backoffMs(i, { backoff: { initialMs: BACKOFF.initial, maxMs: BACKOFF.max }, parkAfterFailures: 5, readyResetMs: 0 }), `${what}: start ${i + 1} came ${gap} ms after failure ${i}`);
  }
}

describe('parked after exactly 5, while a client hammers an unplaceable model', () => {
  it('10 park cycles: the first, then unparked alternately by a Llmgw-Retry commit and by ctl retry', async () => {
    const url = `http://127.0.0.1:${(router.server.address() as AddressInfo).port}/v1/chat/completions`;
    const client = hammer(url);
    try {
      await until('kev parked the first time', 300_000, parked, kevNow);
      await new Promise((r) => setTimeout(r, 1000)); // deliberate: a non-event (nothing more starts once parked) has nothing to wait on
      assertCycle(0, 'cycle 1');
      for (let cycle = 2; cycle <= 10; cycle++) {
        const from = attempts.length;
        if (cycle % 2 === 0) await fleet.push({}, `retry kev\n\nLlmgw-Retry: kev`).then(() => ctl.reconciler.requestPass('webhook'));
        else await ctl.reconciler.retry('kev');
        await until(`cycle ${cycle}: kev started again`, 120_000, () => attempts.length > from, kevNow);
        await until(`cycle ${cycle}: kev parked again`, 300_000, parked, kevNow);
        await new Promise((r) => setTimeout(r, 500)); // deliberate: a non-event (nothing more starts once parked) has nothing to wait on
        assertCycle(from, `cycle ${cycle} (${cycle % 2 === 0 ? 'Llmgw-Retry' : 'ctl retry'})`);
      }
    } finally {
      const { sent, wrong } = await client.stop();
      assert.deepEqual(wrong, [], 'every request for the unplaceable model was refused as model_unplaceable');
      assert.ok(sent > 20, `the client sent ${sent} requests`);
    }
    assert.equal(ctl.reconciler.model('kev')!.consecutiveFailures, 5);
  });
});
