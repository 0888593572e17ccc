/**
 * A model's rollout on the status page, in a real Chromium (Debian's, driven by playwright-core)
 * against the real admin app and page (buildAdminApp on a real socket), fed snapshots a controller
 * in a canary step publishes (the controller behind it is a test double: the snapshots are the case).
 * A canary step shows the step ("step 1 of 2, 10%"), a time left that counts down, and both arms side
 * by side (requests, errors, error rate, TTFT p95, TPOT p95); a rolled-back revision its verdict and
 * the fix; the next step and the promotion show live, without a reload. The countdown's words are
 * table-tested in the page itself. No console error; saves a screenshot.
 */
import { LlmgwError } from '../../src/errors/catalogue.js';
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { chromium, type Browser, type Page } from 'playwright-core';
import { buildAdminApp } from '../../src/admin/app.js';
import type { AdminBackend } from '../../src/admin/backend.js';
import type { FleetSnapshot, ModelView } from '../../src/reconciler/view.js';
import { fakeSpec } from '../harness/fake-fleet-view.js';
import { repoRoot } from '../harness/paths.js';
import { arm, CANARY_DIGEST, canaryRollout, STABLE_DIGEST, withCanary } from '../harness/rollout-views.js';
import { modelView, nodeView, replicaView, snapshot } from '../harness/views.js';

const CHROMIUM = process.env.LLMGW_CHROMIUM ?? '/usr/bin/chromium';
const SCREENSHOT = join(repoRoot, 'dist', 'screenshots', 'status-page-rollout.png');

const SPEC = fakeSpec({ models: { chat: {}, code: {}, embed: {} } });
const chatSpec = withCanary(SPEC.models.chat!);
const codeSpec = withCanary(SPEC.models.code!);
const ROLLED_BACK = 'canary rolled back at 10%: error rate 31% vs 0% on the stable revision over 42 / 380 requests';

/** The fleet as a controller in the middle of chat's canary publishes it; `chat` replaces chat's view. */
function fleetAt(at: number, chat: Partial<ModelView>): FleetSnapshot {
  const replicas = (model: string) => [replicaView(`${model}-r1`, model, { digest: STABLE_DIGEST, startedAt: at - 600_000 }), replicaView(`${model}-r2`, model, { digest: CANARY_DIGEST, endpoint: 'http://10.0.0.1:8002', startedAt: at - 60_000 })];
  return snapshot({
    at,
    lastSyncOk: at,
    models: [
      modelView(chatSpec, { ready: 2, desired: 1, replicas: replicas('chat'), ...chat }),
      modelView(codeSpec, { ready: 1, replicas: replicas('code').slice(0, 1), rollout: canaryRollout(at - 300_000, { phase: 'rolled_back', verdict: { code: 'ROLLOUT_ROLLED_BACK', message: ROLLED_BACK } }) }),
      modelView(SPEC.models.embed!, { ready: 1 }),
    ],
    nodes: [nodeView('node-1')],
  });
}

/** A controller double: the snapshot the test sets, heard by the page's streams at once. */
class Controller implements AdminBackend {
  private listeners = new Set<(s: FleetSnapshot) => void>();
  constructor(private snap: FleetSnapshot) {}
  publish(s: FleetSnapshot): void {
    this.snap = s;
    for (const l of this.listeners) l(s);
  }
  snapshot(): FleetSnapshot {
    return this.snap;
  }
  spec() {
    return SPEC;
  }
  onSnapshot(listener: (s: FleetSnapshot) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
  async retry(model: string) {
    return { model, outcome: 'backoff-cleared' as const };
  }
  async restart() {
    return [];
  }
  async overrideRollout(model: string): Promise<never> {
    throw new LlmgwError('ROLLOUT_NONE', `the page's test controller overrides no rollout (${model})`);
  }
  restartDone() {
    return true;
  }
  async logs() {
    return '';
  }
  async requestPass() {}
}

let app: FastifyInstance;
let controller: Controller;
let browser: Browser;
let page: Page;
let origin: string;
const T0 = Date.now();
const consoleErrors: string[] = [];

const panel = (model: string) => page.locator(`article.model[data-model="${model}"] section.rollout`);
const cell = (model: string, figure: string, armName: string) => panel(model).locator(`table.arms tr[data-figure="${figure}"] td[data-arm="${armName}"]`);

before(async () => {
  // the page's script comes from the same tsc build (tsconfig.web.json); a bare `tsc -p tsconfig.json` skips it
  if (!existsSync(join(repoRoot, 'dist', 'src', 'ui', 'web', 'rollout-panel.js'))) {
    const r = spawnSync(process.execPath, [join(repoRoot, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.web.json'], { cwd: repoRoot, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stdout + r.stderr);
  }
  // step 1 began 30 s ago and ends in 90 s
  controller = new Controller(fleetAt(T0, { rollout: canaryRollout(T0 - 30_000) }));
  app = buildAdminApp({ backend: controller, token: null });
  await app.listen({ host: '127.0.0.1', port: 0 });
  origin = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  browser = await chromium.launch({ executablePath: CHROMIUM, args: process.getuid?.() === 0 ? ['--no-sandbox'] : [] });
  page = await (await browser.newContext({ viewport: { width: 1200, height: 900 } })).newPage();
  page.on('console', (m) => {
    if (m.type() === 'error') consoleErrors.push(m.text());
  });
  page.on('pageerror', (e) => consoleErrors.push(`uncaught: ${e.message}`));
  await page.goto(`${origin}/ui/`);
  await page.locator('#conn[data-state="live"]').waitFor({ timeout: 30_000 });
});

after(async () => {
  await browser?.close().catch(() => undefined);
  await app?.close().catch(() => undefined);
});

describe('a rollout on the status page, in Chromium', () => {
  it('a canary step: its phase, "step 1 of 2, 10%", the time left, and both arms side by side', async () => {
    const chat = panel('chat');
    await chat.waitFor({ timeout: 30_000 });
    assert.equal(await chat.getAttribute('data-rollout'), 'canary');
    assert.equal(await chat.locator('.tag').innerText(), 'canary');
    assert.equal(await chat.locator('.step').innerText(), 'step 1 of 2, 10%');
    assert.match(await chat.locator('.rollout-summary').innerText(), /^revision bbbbbbbbbbbb takes 10% of the requests \(step 1 of 2\); aaaaaaaaaaaa serves the rest$/);
    // the arms' heads carry the revisions; every figure of both arms, side by side
    assert.deepEqual(await chat.locator('table.arms thead th').allInnerTexts(), ['', 'stable aaaaaaaaaaaa', 'canary bbbbbbbbbbbb']);
    const rows: string[][] = [];
    for (const tr of await chat.locator('table.arms tbody tr').all()) rows.push(await tr.locator('th, td').allInnerTexts());
    assert.deepEqual(rows, [
      ['requests', '380', '42'],
      ['errors', '0', '1'],
      ['error rate', '0%', '2.4%'],
      ['TTFT p95', '338 ms', '401 ms'],
      ['TPOT p95', '41 ms', '44 ms'],
    ]);
    assert.match(await chat.locator('table.arms caption').innerText(), /passes so far$/);
    assert.match(await chat.innerText(), /A step is judged on: at least 30 requests an arm/);
    // each replica says which arm it serves
    assert.deepEqual(await page.locator('article.model[data-model="chat"] tr[data-replica] td:nth-child(4)').allInnerTexts(), ['ready (stable)', 'ready (canary)']);
    // the card's one-line detail gives way to the panel
    assert.equal(await page.locator('article.model[data-model="chat"] dl.kv:not(.verdict) dt', { hasText: /^detail$/ }).count(), 0);
  });

  it('the time left counts down (1m30s at the start, ticking each second)', async () => {
    const left = panel('chat').locator('[data-until]');
    const first = await left.innerText();
    assert.match(first, /^1m(\d\d?s)? left$|^\d\d?s left$/);
    await left.filter({ hasNotText: new RegExp(`^${first}$`) }).waitFor({ timeout: 10_000 });
    assert.match(await left.innerText(), /^1m(\d\d?s)? left$|^\d\d?s left$/);
  });

  it('the countdown\'s words, table-tested in the page (the module the page loads)', async () => {
    const got = await page.evaluate(async () => {
      const m = (await import('/ui/rollout-panel.js' as string)) as { leftText(until: number, now: number): string };
      const cases: [number, number][] = [[90_000, 0], [60_000, 0], [59_001, 0], [45_000, 0], [1, 0], [0, 0], [-5_000, 0], [3_600_000, 0], [7_500_000, 0], [3_660_000, 0]];
      return cases.map(([until, now]) => m.leftText(until, now));
    });
    assert.deepEqual(got, ['1m30s left', '1m left', '1m left', '45s left', '1s left', 'ending: judged at the next pass', 'ending: judged at the next pass', '1h left', '2h5m left', '1h1m left']);
  });

  it('a rolled-back revision: the verdict with both arms\' figures, and the fix', async () => {
    const code = panel('code');
    await code.waitFor();
    assert.equal(await code.getAttribute('data-rollout'), 'rolled_back');
    assert.equal(await code.locator('.tag').innerText(), 'rolled back');
    const text = await code.innerText();
    assert.ok(text.includes(`${ROLLED_BACK} [ROLLOUT_ROLLED_BACK]`), text);
    assert.match(text, /fix\s+The canary did worse than the stable revision.*llmgw ctl retry code/s);
    assert.equal(await code.locator('table.arms').count(), 0, 'no arms once rolled back');
    assert.equal(await code.locator('[data-until]').count(), 0, 'no time left once rolled back');
    assert.equal(await panel('embed').count(), 0, 'a model without a rollout has no panel');
  });

  it('the next step and the promotion show live, without a reload', async () => {
    mkdirSync(join(repoRoot, 'dist', 'screenshots'), { recursive: true });
    await page.locator('#groups').screenshot({ path: SCREENSHOT });
    const now = Date.now();
    controller.publish(fleetAt(now, { rollout: canaryRollout(now, { step: 1, share: 0.5, figures: { stable: arm(61, 0, 330, 40), canary: arm(12, 0, 2412, 4.25), verdict: 'inconclusive' }, verdict: { code: 'ROLLOUT_INCONCLUSIVE', message: '12 of 30 requests on the canary' } }) }));
    await panel('chat').locator('.step', { hasText: 'step 2 of 2, 50%' }).waitFor({ timeout: 10_000 });
    assert.equal(await cell('chat', 'requests', 'canary').innerText(), '12');
    assert.equal(await cell('chat', 'ttftP95', 'canary').innerText(), '2.4 s');
    assert.equal(await cell('chat', 'tpotP95', 'canary').innerText(), '4.3 ms');
    const text = await panel('chat').innerText();
    assert.match(text, /too few requests to judge so far/);
    assert.ok(text.includes('12 of 30 requests on the canary [ROLLOUT_INCONCLUSIVE]'), text);
    assert.doesNotMatch(text, /\bfix\b/, 'no fix while the step runs');

    controller.publish(fleetAt(Date.now(), { rollout: canaryRollout(now, { phase: 'promoted' }) }));
    await panel('chat').and(page.locator('[data-rollout="promoted"]')).waitFor({ timeout: 10_000 });
    assert.equal(await panel('chat').locator('table.arms').count(), 0);
    assert.match(await panel('chat').innerText(), /revision bbbbbbbbbbbb proved itself and replaces aaaaaaaaaaaa/);
    assert.deepEqual(consoleErrors, []);
  });
});
