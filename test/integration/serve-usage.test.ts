/**
 * Usage through a real `llmgw serve` (sshd node, llama-server, a fleet repo served over git):
 * - llmgw_key_requests_total / llmgw_key_tokens_total on /metrics, GET /admin/v1/usage and
 *   `llmgw ctl usage` agree exactly with the requests sent (the openai client at default settings);
 * - the usage log (--usage-log) survives a SIGKILL of the controller with at most the last second
 *   lost, is appended to by the restarted controller, and holds no prompt or completion text.
 */
import { strict as assert } from 'node:assert';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { runCli } from '../harness/cli.js';
import { startTestFleet, type TestFleet } from '../harness/controller.js';
import { spawnServe, type ServeProc } from '../harness/serve-proc.js';
import { until } from '../harness/wait.js';

let fleet: TestFleet;
let serve: ServeProc;
let logPath = '';
const MARKER = 'PROMPT-TEXT-MARKER-7f3a';
const diag = (): string => serve?.out().slice(-4000) ?? '';

interface UsageJson {
  rows: { key: string; model: string; requests: number; errors: number; promptTokens: number; cachedTokens: number; completionTokens: number; p50LatencySeconds: number | null }[];
}

before(async () => {
  fleet = await startTestFleet({ nodes: 1 });
  const files = fleet.baseFiles();
  for (const f of Object.keys(files)) if (f.startsWith('models/') && f !== 'models/good.yaml') delete files[f];
  // per-key series on /metrics are opt-in (#36, N14)
  files['fleet.yaml'] = `${files['fleet.yaml']!.trimEnd()}\nmetrics_per_key: true\n`;
  await fleet.push(files, 'fleet: one model');
  logPath = join(fleet.stateDir, 'usage.jsonl');
  serve = await spawnServe({ name: 'usage', fleet, args: ['--usage-log', logPath] });
  await until('good ready', 120_000, async () => (await serve.admin<{ models: { name: string; phase: string }[] }>('/models')).models.find((m) => m.name === 'good')?.phase === 'ready', { diag });
});

after(async () => {
  await serve?.sigkill();
  await fleet?.cleanup();
});

const lines = (): Record<string, unknown>[] => (existsSync(logPath) ? readFileSync(logPath, 'utf8').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as Record<string, unknown>) : []);

describe('usage through llmgw serve', () => {
  let prompt = 0;
  let completion = 0;
  let sent = 0;
  const client = (): OpenAI => new OpenAI({ apiKey: 'unused', baseURL: `http://127.0.0.1:${serve.routerPort}/v1` });

  it('metrics, GET /admin/v1/usage and ctl usage agree exactly with the requests sent', async () => {
    const c = client();
    for (let i = 0; i < 4; i++) {
      const r = await c.chat.completions.create({ model: 'good', messages: [{ role: 'user', content: `${MARKER} ${i}` }], max_tokens: 3 });
      prompt += r.usage!.prompt_tokens;
      completion += r.usage!.completion_tokens;
      sent++;
    }
    const s = await c.chat.completions.create({ model: 'good-alias', messages: [{ role: 'user', content: `${MARKER} stream` }], max_tokens: 4, stream: true, stream_options: { include_usage: true } });
    for await (const ch of s) {
      if (ch.usage) {
        prompt += ch.usage.prompt_tokens;
        completion += ch.usage.completion_tokens;
      }
    }
    sent++;
    await assert.rejects(c.chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: MARKER }], max_tokens: 1 }), OpenAI.NotFoundError);

    const usage = await serve.admin<UsageJson>('/usage');
    const good = usage.rows.find((r) => r.model === 'good')!;
    assert.ok(good, JSON.stringify(usage));
    assert.equal(good.key, '(auth disabled)');
    assert.equal(good.requests, sent);
    assert.equal(good.errors, 0);
    assert.equal(good.promptTokens + good.cachedTokens, prompt);
    assert.equal(good.completionTokens, completion);
    assert.deepEqual(usage.rows.find((r) => r.model === '')?.requests, 1);

    const metrics = await (await fetch(`http://127.0.0.1:${serve.adminPort}/metrics`)).text();
    const sample = (name: string, labels: string): number => Number(new RegExp(`^${name}\\{${labels}\\} (\\d+)$`, 'm').exec(metrics)?.[1] ?? 0);
    assert.equal(sample('llmgw_key_requests_total', 'key="\\(auth disabled\\)",model="good",code="200"'), sent);
    assert.equal(sample('llmgw_key_requests_total', 'key="\\(auth disabled\\)",model="",code="404"'), 1);
    const tok = (kind: string): number => sample('llmgw_key_tokens_total', `key="\\(auth disabled\\)",model="good",kind="${kind}"`);
    assert.equal(tok('prompt') + tok('cached'), prompt);
    assert.equal(tok('completion'), completion);

    const ctl = await runCli(['ctl', 'usage', '--server', `http://127.0.0.1:${serve.adminPort}`, '--model', 'good']);
    assert.equal(ctl.code, 0, ctl.stderr);
    assert.match(ctl.stdout, new RegExp(`^\\(auth disabled\\) +good +${sent} +0 +${good.promptTokens} +${good.cachedTokens} +${completion} +\\S+$`, 'm'));
  });

  it('the usage log survives a SIGKILL with at most the last second lost, and holds no prompt or completion text', async () => {
    // the lines so far are past their batch's second: written (and fsynced) together
    const before = await until('every request so far in the usage log', 10_000, () => lines().length === sent + 1 && lines(), { diag });
    assert.equal(before.length, sent + 1, 'every request so far, fsynced');
    const c = client();
    for (let i = 0; i < 3; i++) await c.chat.completions.create({ model: 'good', messages: [{ role: 'user', content: `${MARKER} late ${i}` }], max_tokens: 2 });
    await serve.sigkill();
    const kept = lines();
    assert.ok(kept.length >= before.length && kept.length <= before.length + 3, `${kept.length} lines`);
    assert.deepEqual(kept.slice(0, before.length), before, 'nothing written before is lost or changed');
    const l = before[0]!;
    assert.deepEqual(Object.keys(l).sort(), ['cached_tokens', 'completion_tokens', 'duration_ms', 'ended_early', 'key', 'model', 'prompt_tokens', 'reason', 'replica', 'status', 'time'].sort());
    assert.equal(l.model, 'good');
    assert.equal(l.status, 200);
    assert.match(String(l.replica), /\S/);
    const text = readFileSync(logPath, 'utf8');
    assert.ok(!text.includes(MARKER), 'no prompt text in the usage log');
    assert.ok(!text.includes('content'), 'no completion text either');

    // the restarted controller appends
    serve.restart();
    await until('good ready again', 120_000, async () => (await serve.admin<{ models: { name: string; phase: string }[] }>('/models')).models.find((m) => m.name === 'good')?.phase === 'ready', { diag });
    await client().chat.completions.create({ model: 'good', messages: [{ role: 'user', content: MARKER }], max_tokens: 1 });
    await until('the new line fsynced', 5000, () => lines().length === kept.length + 1, { diag });
    assert.deepEqual(lines().slice(0, kept.length), kept);
  });
});
