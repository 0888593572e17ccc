/**
 * The status page on a standby (two real `llmgw serve` on one real etcd, sshd nodes, llama-server;
 * local mode: the page opens without a token): it names the leader and shows the same models as
 * the leader's own admin API. SIGKILL of the leader: the page on the survivor shows it leading,
 * and a leader-changed event, without a reload.
 */
import { strict as assert } from 'node:assert';
import { after, before, describe, it } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import { startTestFleet, type TestFleet } from '../harness/controller.js';
import { startEtcd, type EtcdInstance } from '../harness/etcd.js';
import { spawnServe, type ServeProc, procsDiag } from '../harness/serve-proc.js';
import { until } from '../harness/wait.js';

const CHROMIUM = process.env.LLMGW_CHROMIUM ?? '/usr/bin/chromium';
const HA = (endpoint: string): string[] => ['--etcd', endpoint, '--lease-ttl', '4s', '--renew-deadline', '3s', '--retry-period', '1s'];

interface StatusJson {
  leader: boolean;
  control: { instance: { id: string; label: string }; leader: { id: string; label: string } | null };
}

let etcd: EtcdInstance;
let fleet: TestFleet;
let procs: ServeProc[] = [];
let browser: Browser;
let page: Page;
const consoleErrors: string[] = [];

const diag = (): string => procsDiag(procs, 3000);

before(async () => {
  [etcd, fleet] = await Promise.all([startEtcd(), startTestFleet({ nodes: 2 })]);
  const files = fleet.baseFiles();
  delete files['models/huge.yaml'];
  await fleet.push(files, 'good and kev (parks)');
  procs = await Promise.all(['a', 'b'].map((name) => spawnServe({ name, fleet, args: HA(etcd.endpoint) })));
  browser = await chromium.launch({ executablePath: CHROMIUM, args: process.getuid?.() === 0 ? ['--no-sandbox'] : [] });
  page = await browser.newPage();
  page.on('console', (m) => {
    if (m.type() === 'error') consoleErrors.push(m.text());
  });
  page.on('pageerror', (e) => consoleErrors.push(`uncaught: ${e.message}`));
});

after(async () => {
  await browser?.close().catch(() => undefined);
  await Promise.all(procs.map((p) => p.sigkill()));
  await fleet?.cleanup();
  await etcd?.stop();
});

describe('the status page on a standby', () => {
  let leader: ServeProc;
  let standby: ServeProc;
  let leaderLabel: string;

  it('names the leader and shows the same models as the leader', async () => {
    const statuses = await until('one leader', 90_000, async () => {
      const s = await Promise.all(procs.map((p) => p.admin<StatusJson>('/status')));
      const leading = s.filter((x) => x.leader);
      return leading.length === 1 && s.every((x) => x.control.leader?.id === leading[0]!.control.instance.id) ? s : null;
    }, { diag });
    const li = statuses.findIndex((s) => s.leader);
    leader = procs[li]!;
    standby = procs[1 - li]!;
    leaderLabel = statuses[li]!.control.instance.label;
    await until('good ready and kev parked on the leader', 150_000, async () => {
      const m = await leader.admin<{ models: { name: string; phase: string }[] }>('/models');
      const ph = Object.fromEntries(m.models.map((x) => [x.name, x.phase]));
      return ph.good === 'ready' && ph.kev === 'parked';
    }, { diag });

    await page.goto(`http://127.0.0.1:${standby.adminPort}/`);
    await page.locator('#app').waitFor({ state: 'visible', timeout: 30_000 });
    assert.equal(await page.locator('#login').isVisible(), false, 'local mode: no token form');
    await page.locator('#fleet').filter({ hasText: `leader: ${leaderLabel}` }).waitFor({ timeout: 30_000 });
    assert.match(await page.locator('#fleet').innerText(), /standby \(/);
    await page.locator('article.model[data-model="good"][data-phase="ready"]').waitFor({ timeout: 30_000 });
    await page.locator('article.model[data-model="kev"][data-phase="parked"]').waitFor({ timeout: 30_000 });
    const onLeader = await leader.admin<{ models: { name: string; phase: string }[] }>('/models');
    const shown = await page.locator('article.model').evaluateAll((els) => els.map((e) => `${e.getAttribute('data-model')}:${e.getAttribute('data-phase')}`).sort());
    assert.deepEqual(shown, onLeader.models.map((m) => `${m.name}:${m.phase}`).sort());
  });

  it('SIGKILL of the leader: the survivor’s page shows it leading, live', async () => {
    await leader.sigkill();
    await page.locator('#fleet').filter({ hasText: /LEADER of the etcd cluster/ }).waitFor({ timeout: 60_000 }).catch((e: unknown) => {
      throw new Error(`${String(e)}\n${diag()}`);
    });
    await page.locator('#events li[data-kind="leader-changed"]').first().waitFor({ timeout: 10_000 });
    await page.locator('article.model[data-model="good"][data-phase="ready"]').waitFor({ timeout: 90_000 });
    assert.deepEqual(consoleErrors, []);
  });
});
