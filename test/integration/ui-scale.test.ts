/**
 * The status page's feed at the project's scale (#37 item 1, N5): a real `llmgw serve` with 10,000
 * idle on-demand models (test/harness/scale-fleet.ts). A client of /admin/v1/view/stream gets its
 * first `view` frame (a page of the models, not the fleet) within 2 s and is still connected after
 * 12 s (before: one 2.3 MB frame, past the 256 KiB a client may have waiting, and the client dropped);
 * the page in a real Chromium says live, counts the 10,000 and finds m-09999 by search.
 */
import { strict as assert } from 'node:assert';
import { after, before, describe, it } from 'node:test';
import { chromium, type Browser } from 'playwright-core';
import { makeScaleFleet, serveScaleFleet, waitFor, type ScaleFleet, type ScaleServe } from '../harness/scale-fleet.js';

const MODELS = 10_000;
const CHROMIUM = process.env.LLMGW_CHROMIUM ?? '/usr/bin/chromium';

let fleet: ScaleFleet;
let serve: ScaleServe;
let browser: Browser | null = null;

before(async () => {
  fleet = await makeScaleFleet(MODELS, { hot: false });
  serve = await serveScaleFleet(fleet);
  await waitFor(`the ${MODELS} models in force`, 300_000, serve, async () => {
    const r = await fetch(`${serve.adminUrl}/admin/v1/status`).catch(() => null);
    if (!r?.ok) return false;
    return ((await r.json()) as { models: { total: number } }).models.total === MODELS;
  });
});

after(async () => {
  await browser?.close().catch(() => undefined);
  await serve?.stop();
  fleet?.cleanup();
});

describe(`the view stream and the page at ${MODELS.toLocaleString('en')} models`, { timeout: 600_000 }, () => {
  it('a view within 2 s, one page of it, and the stream still open after 12 s', async () => {
    const ac = new AbortController();
    const t0 = performance.now();
    const res = await fetch(`${serve.adminUrl}/admin/v1/view/stream`, { signal: ac.signal });
    assert.equal(res.status, 200);
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    let text = '';
    let firstAt = 0;
    let ended = false;
    // read until 12 s after connecting (what the stream sends meanwhile: the view, patches, pings)
    for (;;) {
      const left = 12_000 - (performance.now() - t0);
      if (left <= 0) break;
      const next = await Promise.race([reader.read(), new Promise<null>((r) => setTimeout(() => r(null), left))]);
      if (next === null) break;
      if (next.done) {
        ended = true;
        break;
      }
      text += dec.decode(next.value, { stream: true });
      if (firstAt === 0 && /event: view\ndata: .*\n\n/.test(text)) firstAt = performance.now() - t0;
    }
    ac.abort();
    assert.ok(firstAt > 0, `no view frame: ${text.slice(0, 300)}`);
    assert.ok(firstAt < 2_000, `the first view after ${Math.round(firstAt)} ms`);
    assert.equal(ended, false, 'the stream was closed before 12 s');
    const frame = /event: view\ndata: (.*)\n\n/.exec(text)![1]!;
    const v = JSON.parse(frame) as { status: { models: { total: number } }; page: { size: number; matched: number; pages: number }; groups: { models: unknown[] }[] };
    assert.equal(v.status.models.total, MODELS);
    assert.deepEqual([v.page.size, v.page.matched, v.page.pages], [100, MODELS, 100]);
    assert.equal(v.groups.reduce((n, g) => n + g.models.length, 0), 100);
    assert.ok(Buffer.byteLength(frame) < 128 * 1024, `the first frame is ${Buffer.byteLength(frame)} bytes`);
    console.log(`ui-scale: first view after ${Math.round(firstAt)} ms, ${Buffer.byteLength(frame)} bytes`);
  });

  it('the page in Chromium says live, counts the fleet, and finds m-09999 by search', async () => {
    browser = await chromium.launch({ executablePath: CHROMIUM, args: process.getuid?.() === 0 ? ['--no-sandbox'] : [] });
    const page = await (await browser.newContext({ viewport: { width: 1200, height: 900 } })).newPage();
    const errors: string[] = [];
    page.on('pageerror', (e) => errors.push(e.message));
    await page.goto(`${serve.adminUrl}/ui/`);
    await page.locator('#conn[data-state="live"]').waitFor({ timeout: 30_000 });
    await page.locator('#models-summary', { hasText: `${MODELS} models` }).waitFor({ timeout: 30_000 });
    assert.equal(await page.locator('article.model').count(), 100, 'one page of cards');
    await page.locator('#models-search').fill('m-09999');
    await page.locator('article.model[data-model="m-09999"]').waitFor({ timeout: 30_000 });
    assert.equal(await page.locator('article.model').count(), 1);
    assert.match(await page.locator('#models-page').innerText(), /1–1 of 1 matching/);
    assert.equal((await page.locator('#conn').getAttribute('data-state')) ?? '', 'live');
    assert.deepEqual(errors, []);
  });
});
