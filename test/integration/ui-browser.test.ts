/**
 * The status page in a real Chromium (Debian's, driven by playwright-core) against a real
 * `llmgw serve` with admin auth on, over sshd nodes running real llama-server: the token form;
 * the parked model's last error, fix hint and retry command; the unplaceable model's numbers; the
 * ready model's replica and node; Retry unparks live (new starts, the park again, no reload); a
 * push that is rejected shows file:line within 2 s of the controller knowing; a controller restart
 * is reconnected to by itself. Throughout: the token is in no URL, log line or page HTML; no request
 * leaves the admin origin; no console errors; the CSP header is there. Saves a screenshot.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { chromium, type Browser, type Page } from 'playwright-core';
import { modelYaml, startTestFleet, type TestFleet } from '../harness/controller.js';
import { repoRoot } from '../harness/paths.js';
import { spawnServe, type ServeProc } from '../harness/serve-proc.js';
import { until } from '../harness/wait.js';

const TOKEN = 'ui-browser-admin-token-3f9c1a7e5b';
const WEBHOOK_SECRET = 'ui-browser-webhook-secret-8d2e6c4a';
const CHROMIUM = process.env.LLMGW_CHROMIUM ?? '/usr/bin/chromium';
export const SCREENSHOT = join(repoRoot, 'dist', 'screenshots', 'status-page.png');

let fleet: TestFleet;
let serve: ServeProc;
let browser: Browser;
let page: Page;
let origin: string;
const requested: string[] = [];
const consoleErrors: { at: number; text: string }[] = [];
const refused: { at: number; text: string }[] = [];
let restartWindow: { from: number; to: number } | null = null;
let wrongTokenWindow: { from: number; to: number } | null = null;

const diag = (): string => `--- serve (${serve?.alive() ? 'running' : 'exited'}) ---\n${serve?.out().slice(-4000) ?? ''}`;

async function adminGet<T>(path: string): Promise<T> {
  const r = await fetch(`${origin}/admin/v1${path}`, { headers: { authorization: `Bearer ${TOKEN}` }, signal: AbortSignal.timeout(30_000) });
  return (await r.json()) as T;
}

async function webhook(): Promise<void> {
  const body = JSON.stringify({ ref: 'refs/heads/main', before: '0'.repeat(40), after: '1'.repeat(40), commits: [] });
  const sig = createHmac('sha256', WEBHOOK_SECRET).update(body).digest('hex');
  const r = await fetch(`${origin}/admin/v1/webhook`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-github-event': 'push', 'x-hub-signature-256': `sha256=${sig}` }, body });
  assert.equal(r.status, 202, await r.text());
}

const card = (model: string, phase?: string) => page.locator(`article.model[data-model="${model}"]${phase ? `[data-phase="${phase}"]` : ''}`);

before(async () => {
  // the page's script comes from the same tsc build (tsconfig.web.json); a bare `tsc -p tsconfig.json` skips it
  if (!existsSync(join(repoRoot, 'dist', 'src', 'ui', 'web', 'app.js'))) {
    const r = spawnSync(process.execPath, [join(repoRoot, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.web.json'], { cwd: repoRoot, encoding: 'utf8' });
    assert.equal(r.status, 0, r.stdout + r.stderr);
  }
  fleet = await startTestFleet({ nodes: 2 });
  await fleet.push(fleet.baseFiles(), 'good, kev (unknown architecture: parks), huge (fits nowhere)');
  writeFileSync(join(fleet.secretsDir, 'admin-token'), `${TOKEN}\n`, { mode: 0o600 });
  writeFileSync(join(fleet.secretsDir, 'webhook-secret'), `${WEBHOOK_SECRET}\n`, { mode: 0o600 });
  serve = await spawnServe({
    name: 'ui',
    fleet,
    adminAuth: true,
    args: ['--admin-token-file', join(fleet.secretsDir, 'admin-token'), '--webhook-secret-file', join(fleet.secretsDir, 'webhook-secret')],
  });
  origin = `http://127.0.0.1:${serve.adminPort}`;
  await until('the admin API answers', 60_000, async () => (await fetch(`${origin}/ui/`)).ok, { diag });

  browser = await chromium.launch({ executablePath: CHROMIUM, args: process.getuid?.() === 0 ? ['--no-sandbox'] : [] });
  const context = await browser.newContext({ viewport: { width: 1200, height: 900 } });
  page = await context.newPage();
  page.on('request', (r) => requested.push(r.url()));
  page.on('response', (r) => {
    if (r.status() >= 400) refused.push({ at: Date.now(), text: `${r.status()} ${r.request().method()} ${r.url()}` });
  });
  page.on('console', (m) => {
    if (m.type() === 'error') consoleErrors.push({ at: Date.now(), text: m.text() });
  });
  page.on('pageerror', (e) => consoleErrors.push({ at: Date.now(), text: `uncaught: ${e.message}` }));
});

after(async () => {
  await browser?.close().catch(() => undefined);
  await serve?.stop().catch(() => undefined);
  await fleet?.cleanup();
});

describe('the status page in Chromium, admin auth on', () => {
  it('/ redirects to /ui/, which carries a strict CSP and asks for the token', async () => {
    const redirect = await fetch(`${origin}/`, { redirect: 'manual' });
    assert.equal(redirect.status, 302);
    assert.equal(redirect.headers.get('location'), '/ui/');
    const res = await page.goto(`${origin}/`);
    assert.ok(res);
    assert.equal(new URL(page.url()).pathname, '/ui/');
    const csp = res.headers()['content-security-policy'] ?? '';
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /script-src 'self'/);
    assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
    await page.locator('#login').waitFor({ state: 'visible' });
    assert.equal(await page.locator('#token').getAttribute('type'), 'password');
    // without the token the feeds refuse
    assert.equal((await fetch(`${origin}/admin/v1/view`)).status, 401);
  });

  it('a wrong token is refused in the form; the right one opens the page', async () => {
    wrongTokenWindow = { from: Date.now(), to: Infinity };
    await page.fill('#token', 'not-the-token');
    await page.press('#token', 'Enter');
    await page.locator('#login-error').filter({ hasText: 'not valid' }).waitFor();
    wrongTokenWindow.to = Date.now();
    await page.fill('#token', TOKEN);
    await page.click('#login button[type=submit]');
    await page.locator('#app').waitFor({ state: 'visible' });
    assert.equal(await page.locator('#login').isVisible(), false);
  });

  it('shows the parked model’s last error, fix hint and retry command', async () => {
    const kev = card('kev', 'parked');
    await kev.waitFor({ timeout: 150_000 }).catch((e: unknown) => {
      throw new Error(`${String(e)}\n${diag()}`);
    });
    const text = await kev.innerText();
    const api = await adminGet<{ model: { parked: { lastError: { code: string; message: string; hint: string } } } }>('/models/kev');
    const last = api.model.parked.lastError;
    assert.match(last.code, /^REPLICA_/);
    assert.match(text, /parked/i);
    assert.ok(text.includes(`${last.message} [${last.code}]`), `the last error: ${text}`);
    assert.ok(text.includes(last.hint), `the fix hint: ${text}`);
    assert.match(text, /llmgw ctl retry kev/);
    assert.ok(await kev.getByRole('button', { name: 'Retry kev' }).isVisible());
    const group = await page.locator('section.group[data-group="parked"] h3').innerText();
    assert.match(group, /PARKED \(1\): not started again until the cause is fixed/);
  });

  it('shows the unplaceable model’s numbers', async () => {
    const huge = card('huge', 'unplaceable');
    await huge.waitFor({ timeout: 60_000 });
    const text = await huge.innerText();
    assert.match(text, /needs\s+1 TiB/);
    assert.match(text, /largest free\s+[\d.]+ [KMGT]iB on node-[12]/);
    assert.match(text, /PLACEMENT_NO_ROOM/);
  });

  it('shows the ready model’s replica and node, and the node’s memory bar', async () => {
    const good = card('good', 'ready');
    await good.waitFor({ timeout: 120_000 });
    const models = await adminGet<{ models: { name: string; replicas: { id: string; node: string; phase: string }[] }[] }>('/models');
    const r = models.models.find((m) => m.name === 'good')!.replicas.find((x) => x.phase === 'ready')!;
    const row = good.locator(`tr[data-replica="${r.id}"]`);
    assert.equal(await row.locator('td.node').innerText(), r.node);
    assert.match(await row.innerText(), /ready/);
    const node = page.locator(`article.node[data-node="${r.node}"]`);
    assert.match(await node.innerText(), /taken by llmgw replicas/);
    assert.match(await node.locator(`li[data-replica="${r.id}"]`).innerText(), /good \(ready, /);
    assert.match((await node.locator('.bar').getAttribute('aria-label')) ?? '', /reserve/);
    // the router's figures, from the controller's own counters: these requests come while the page
    // looks (however soon after it subscribed), so they show, rate and median together, for one
    // window (5 s); read in one look, as the next window may already say 0 req/s
    for (let i = 0; i < 3; i++) {
      const r = await fetch(`http://127.0.0.1:${serve.routerPort}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'good', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }) });
      assert.equal(r.status, 200, await r.text());
    }
    await good
      .locator('.figures')
      .filter({ hasText: /^(?:[1-9][\d.]*|0\.[1-9]) req\/s, p50 ≤ [\d.]+ m?s, queue 0, / })
      .waitFor({ timeout: 20_000 })
      .catch(async (e: unknown) => {
        const figures = await good.locator('.figures').innerText({ timeout: 1000 }).catch(() => '(none)');
        throw new Error(`${String(e)}\nthe page's figures now: ${figures}\n${diag()}`);
      });
    mkdirSync(join(repoRoot, 'dist', 'screenshots'), { recursive: true });
    await page.screenshot({ path: SCREENSHOT, fullPage: true });
  });

  it('Retry unparks the model; the page shows the new starts and the park again, without a reload', async () => {
    await page.evaluate(() => ((globalThis as unknown as { marker: number }).marker = 42));
    const before = Math.max(0, ...(await page.locator('#events li[data-seq]').evaluateAll((els) => els.map((e) => Number(e.getAttribute('data-seq'))))));
    // by keyboard: Tab to the button, Enter
    await page.locator('body').focus();
    let tabs = 0;
    while ((await page.evaluate(() => (globalThis as unknown as { document: { activeElement: { id: string } | null } }).document.activeElement?.id)) !== 'retry-kev') {
      assert.ok(++tabs < 40, 'Retry kev is reachable with Tab');
      await page.keyboard.press('Tab');
    }
    await page.keyboard.press('Enter');
    await page.locator('#retry-msg-kev').filter({ hasText: 'kev: unparked' }).waitFor({ timeout: 60_000 });
    const newer = (kind: string) => page.locator(`#events li[data-kind="${kind}"]`).filter({ hasText: 'kev' }).evaluateAll((els, b) => els.some((e) => Number(e.getAttribute('data-seq')) > b), before);
    await until('an unparked event', 30_000, () => newer('unparked'));
    await until('a new start of kev', 60_000, async () => (await newer('replica-starting')) || (await newer('start-failed')));
    await until('kev parked again', 150_000, () => newer('parked'), { diag });
    await card('kev', 'parked').waitFor({ timeout: 30_000 });
    assert.equal(await page.evaluate(() => (globalThis as unknown as { marker?: number }).marker), 42, 'the page was not reloaded');
  });

  it('a pushed commit that is rejected shows file:line within 2 s of the controller knowing', async () => {
    const broken = modelYaml(fleet.models.good, ['replicas: many']);
    await fleet.push({ 'models/broken.yaml': broken }, 'a model with a bad replica count');
    await webhook();
    const apiKnows = until('the controller rejects the revision', 60_000, async () => ((await adminGet<{ spec: { rejected: unknown } }>('/status')).spec.rejected ? Date.now() : null), { diag });
    const pageShows = page
      .locator('#rejected-card code.where')
      .filter({ hasText: /models\/broken\.yaml:\d+/ })
      .first()
      .waitFor({ timeout: 60_000 })
      .then(() => Date.now());
    const [api, shown] = await Promise.all([apiKnows, pageShows]);
    assert.ok(shown - api < 2000, `the page showed the rejection ${shown - api} ms after the API`);
    await page.locator('#events li[data-kind="revision-rejected"]').first().waitFor({ timeout: 5_000 });
  });

  it('after a controller restart the page reconnects by itself', async () => {
    restartWindow = { from: Date.now(), to: Infinity };
    await serve.stop();
    await page.locator('#conn[data-state="down"]').waitFor({ timeout: 30_000 });
    serve.restart();
    await page.locator('#conn[data-state="live"]').waitFor({ timeout: 90_000 });
    restartWindow.to = Date.now();
    // the new process's view: the models again, the rejection again (it reads the same head)
    await card('good', 'ready')
      .waitFor({ timeout: 120_000 })
      .catch(async (e: unknown) => {
        const phases = (await adminGet<{ models: { name: string; phase: string }[] }>('/models').catch(() => ({ models: [] }))).models.map((m) => `${m.name}:${m.phase}`);
        throw new Error(`${String(e)}\napi: ${phases.join(' ')}\npage: ${await page.locator('#groups').innerText()}\nconn: ${await page.locator('#conn').innerText()}\n${diag()}`);
      });
    await page.locator('#rejected-card').waitFor({ timeout: 60_000 });
    assert.equal(await page.locator('#login').isVisible(), false, 'the token was kept for the tab');
  });

  it('reads on a phone: nothing wider than the screen', async () => {
    await page.setViewportSize({ width: 390, height: 844 });
    await page.locator('#app').waitFor();
    const [scroll, width] = await page.evaluate(() => {
      const d = (globalThis as unknown as { document: { documentElement: { scrollWidth: number; clientWidth: number } } }).document.documentElement;
      return [d.scrollWidth, d.clientWidth];
    });
    assert.ok(scroll <= width, `the page is ${scroll} px wide on a ${width} px screen`);
    await page.screenshot({ path: join(repoRoot, 'dist', 'screenshots', 'status-page-phone.png') });
    await page.setViewportSize({ width: 1200, height: 900 });
  });

  it('the token is in no URL, log line or page HTML; no request left the admin origin; no console errors', async () => {
    assert.ok(requested.length > 5, `requests seen: ${requested.length}`);
    for (const u of requested) {
      assert.ok(u.startsWith(`${origin}/`), `a request left the admin origin: ${u}`);
      assert.ok(!u.includes(TOKEN), `the token is in a URL: ${u}`);
    }
    assert.ok(!serve.out().includes(TOKEN), 'the token is in the server log');
    assert.ok(!(await page.content()).includes(TOKEN), 'the token is in the page HTML');
    // while the controller was down, Chromium itself reports the refused connections (net::ERR_…)
    // and the one refusal of the wrong token, on purpose
    const inside = (w: { from: number; to: number } | null, at: number): boolean => w !== null && at >= w.from && at <= w.to + 2000;
    const refusals = consoleErrors.filter((e) => inside(wrongTokenWindow, e.at) && /401/.test(e.text));
    assert.ok(refusals.length <= 1, JSON.stringify(refusals));
    const errors = consoleErrors.filter((e) => !refusals.includes(e)).filter((e) => !(restartWindow && e.at >= restartWindow.from && e.at <= restartWindow.to + 1000 && /net::ERR_|Failed to load resource|Failed to fetch/.test(e.text)));
    assert.deepEqual(errors, [], `console errors: ${JSON.stringify(errors)}; answers >= 400: ${JSON.stringify(refused)}; wrong token at ${JSON.stringify(wrongTokenWindow)}`);
  });
});
