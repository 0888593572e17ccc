/**
 * A replica schedule against the real stack (sshd nodes, llama-server, git http-backend): the
 * controller's clock is injected and moved across the schedule's entries; the model goes from 1
 * replica to 2 at 08:00 (Europe/Berlin) and back to 1 at 20:00, the surplus replica stopped while
 * clients keep being answered through the router, and the metric and `ctl models` follow.
 */
import { strict as assert } from 'node:assert';
import { after, before, describe, it } from 'node:test';
import { parseExposition, sampleValue } from '../../src/metrics/index.js';
import { runCli } from '../harness/cli.js';
import { serveFront, type Front } from '../harness/front.js';
import { keepAsking } from '../harness/router-client.js';
import { modelYaml, startTestFleet, type TestController, type TestFleet } from '../harness/controller.js';

let fleet: TestFleet;
let ctl: TestController;
let front: Front;
let adminUrl: string;
let routerUrl: string;
const TOKEN = 'schedule-e2e-admin-token';

/** The controller's clock: real time shifted, so timeouts still run at real speed. */
let offset = 0;
const clock = (): number => Date.now() + offset;
const setClock = (iso: string): void => {
  offset = Date.parse(iso) - Date.now();
};

const model = (name: string) => ctl.reconciler.model(name)!;
const scheduled = async (): Promise<{ replicas: number | undefined; nextChange: number | undefined }> => {
  const s = parseExposition((await ctl.metricsApp.inject({ method: 'GET', url: '/metrics' })).body);
  return {
    replicas: sampleValue(s, 'llmgw_model_scheduled_replicas', { model: 'good' }),
    nextChange: sampleValue(s, 'llmgw_model_schedule_next_change_timestamp_seconds', { model: 'good' }),
  };
};
type ModelRow = { name: string; desired: number; ready: number; schedule: unknown };
const ctlModels = async (): Promise<ModelRow[]> => {
  const r = await runCli(['ctl', '--server', adminUrl, '--token', TOKEN, 'models', '-o', 'json']);
  assert.equal(r.code, 0, r.stderr);
  return (JSON.parse(r.stdout) as { models: ModelRow[] }).models;
};
const ctlModelsText = async (): Promise<string> => {
  const r = await runCli(['ctl', '--server', adminUrl, '--token', TOKEN, 'models']);
  assert.equal(r.code, 0, r.stderr);
  return r.stdout;
};

before(async () => {
  fleet = await startTestFleet({ nodes: 2 });
  const files = fleet.baseFiles();
  delete files['models/kev.yaml'];
  delete files['models/huge.yaml'];
  files['models/good.yaml'] = modelYaml(fleet.models.good, [
    'replicas: 1',
    'timezone: Europe/Berlin',
    'schedule:',
    '  - { cron: "0 8 * * *", replicas: 2 }',
    '  - { cron: "0 20 * * *", replicas: 1 }',
  ]);
  await fleet.push(files, 'two replicas of good by day');
  setClock('2026-03-30T05:59:30Z'); // 07:59:30 CEST: the 20:00 entry of the evening before is in force
  ctl = await fleet.startController({ clock });
  front = await serveFront(ctl, TOKEN);
  ({ adminUrl, routerUrl } = front);
});

after(async () => {
  await front?.close();
  await fleet?.cleanup();
});

describe('a replica schedule on the real stack', () => {
  it('before 08:00 the evening entry is in force: one replica', async () => {
    await ctl.until('good ready', 90_000, () => model('good').phase === 'ready');
    assert.equal(model('good').desired, 1);
    assert.equal(model('good').replicas.length, 1);
    assert.deepEqual(await scheduled(), { replicas: 1, nextChange: Date.parse('2026-03-30T06:00:00Z') / 1000 });
  });

  it('at 08:00 the model scales to two replicas; the metric and ctl models follow', async () => {
    setClock('2026-03-30T06:00:01Z');
    assert.equal((await scheduled()).replicas, 2, 'the metric follows the clock at the next scrape');
    await ctl.until('two ready replicas of good', 90_000, () => model('good').ready === 2);
    assert.equal(model('good').desired, 2);
    assert.equal(new Set(model('good').replicas.map((r) => r.node)).size, 2, 'one per node');
    assert.deepEqual(await scheduled(), { replicas: 2, nextChange: Date.parse('2026-03-30T18:00:00Z') / 1000 });
    const good = (await ctlModels()).find((m) => m.name === 'good')!;
    assert.deepEqual([good.desired, good.ready], [2, 2]);
    assert.deepEqual(good.schedule, {
      timezone: 'Europe/Berlin',
      replicas: 2,
      entry: { index: 0, cron: '0 8 * * *' },
      since: '2026-03-30T06:00:00.000Z',
      next: { at: '2026-03-30T18:00:00.000Z', replicas: 1, entry: { index: 1, cron: '0 20 * * *' } },
    });
    assert.match(await ctlModelsText(), /good\s+ready\s+2\/2\s+0\s+2 replicas by "0 8 \* \* \*"; 1 in 1[01]h\d+m/);
  });

  it('at 20:00 it scales back to one, stopping the surplus replica while clients are answered', async () => {
    const before = model('good').replicas.map((r) => r.id);
    const client = keepAsking(routerUrl, 'good');
    await client.answered(4); // answered before the change
    setClock('2026-03-30T18:00:01Z');
    await ctl.until('good back to one replica', 90_000, () => model('good').desired === 1 && model('good').replicas.length === 1 && model('good').ready === 1);
    await client.answered(4); // and after it
    const { failures } = await client.stop();
    assert.deepEqual(failures, []);
    assert.ok(before.includes(model('good').replicas[0]!.id), 'a replica that was running stays; the surplus one was stopped');
    const stops = ctl.logs.filter((l) => l.msg === 'stopping replica' && l.model === 'good');
    assert.deepEqual(stops.map((l) => l.reason), ['surplus']);
    assert.deepEqual(await scheduled(), { replicas: 1, nextChange: Date.parse('2026-03-31T06:00:00Z') / 1000 });
    const good = (await ctlModels()).find((m) => m.name === 'good')!;
    assert.deepEqual([good.desired, good.ready], [1, 1]);
    assert.match(await ctlModelsText(), /good\s+ready\s+1\/1\s+0\s+1 replica by "0 20 \* \* \*"; 2 in 1[01]h\d+m/);
  });

  it('a controller restarted mid-window takes the count in force from the clock alone', async () => {
    await ctl.stop();
    setClock('2026-03-31T10:30:00Z'); // Tuesday 12:30 CEST: the 08:00 entry is in force
    ctl = await fleet.startController({ clock });
    await ctl.until('two ready replicas after the restart', 90_000, () => model('good').ready === 2);
    assert.equal(model('good').desired, 2);
    assert.deepEqual(await scheduled(), { replicas: 2, nextChange: Date.parse('2026-03-31T18:00:00Z') / 1000 });
  });

  it('with nothing else asking for a pass, the controller acts at the entry’s time (the schedule wake)', async () => {
    await ctl.stop();
    setClock('2026-03-31T17:59:55Z'); // Tuesday 19:59:55 CEST; poll interval 1h: no poll comes
    ctl = await fleet.startController({ clock });
    {
      await new Promise<void>((resolve, reject) => {
        const timeout = setTimeout(() => reject(new Error(`no scale-down within 60 s; good: ${JSON.stringify(ctl.reconciler.model('good'))}`)), 60_000);
        const check = (): void => {
          const g = ctl.reconciler.model('good');
          if (g && g.desired === 1 && g.replicas.length === 1) {
            clearTimeout(timeout);
            off();
            resolve();
          }
        };
        const off = ctl.reconciler.onSnapshot(check);
      });
      const stop = ctl.logs.find((l) => l.msg === 'stopping replica' && l.model === 'good');
      assert.equal(stop?.reason, 'surplus');
      assert.ok(['wake', 'coalesced'].includes(String(stop?.trigger)), `stopped in a pass the reconciler's wake asked for (${String(stop?.trigger)})`);
      assert.ok(clock() >= Date.parse('2026-03-31T18:00:00Z'), 'not before the entry’s time');
      assert.equal((await scheduled()).replicas, 1);
    }
  });
});
