/**
 * A revision proves itself before it takes the model's traffic (#34, checks), on the real stack: an
 * sshd node, real llama-server replicas of a tiny model, the fleet repo behind git http-backend, the
 * router in front of the controller's own view, and the official `openai` client keeping streams in
 * flight through every step.
 *
 * A definition change whose rollout check fails: one replica of the new revision starts beside the
 * stable one, takes no user request (its own llama-server counts only the check's tokens), and is
 * held back with the check's expected and got; it drains and stops, the stable revision serves on,
 * nothing is cut or fails; `ctl retry` (the admin call) runs the checks again. Then a change whose
 * checks pass replaces the stable replica, again with nothing cut.
 */
import { strict as assert } from 'node:assert';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { FastifyInstance } from 'fastify';
import OpenAI from 'openai';
import { buildRouter } from '../../src/router/app.js';
import { writeTinyModel, type TinyModelFile } from '../fixtures/gguf.js';
import { modelYaml, startTestFleet, type TestController, type TestFleet } from '../harness/controller.js';
import { streamLoad } from '../harness/stream-load.js';
import { until } from '../harness/wait.js';

let fleet: TestFleet;
let ctl: TestController;
let router: FastifyInstance;
let client: OpenAI;
let chat: TinyModelFile;

const CHECK_TOKENS = 6;
const check = (matches: string): string[] => [
  'rollout:',
  '  checks:',
  '    - name: answers',
  `      request: { messages: [{ role: user, content: "What is 2+2?" }], max_tokens: ${CHECK_TOKENS} }`,
  `      expect: { status: 200, matches: "${matches}" }`,
];

function files(cacheRam: string, matches: string): Record<string, string | null> {
  const f: Record<string, string | null> = fleet.baseFiles();
  delete f['models/kev.yaml'];
  delete f['models/huge.yaml'];
  delete f['models/good.yaml'];
  f['profiles/chat.yaml'] = ['engine: llama-cpp@test', 'ctx_size: 1024', 'threads: 1', 'parallel: 2', 'memory_overhead: 64MiB', `cache_ram: ${cacheRam}`, 'start_timeout: 60s', 'extra_args: [--metrics]', ''].join('\n');
  f['models/chat.yaml'] = modelYaml(chat, ['replicas: 1', ...check(matches)]).replace('profile: tiny', 'profile: chat');
  return f;
}

const view = () => ctl.reconciler.model('chat')!;
/** Tokens a replica's llama-server predicted so far (its own /metrics), or null when it does not answer. */
async function predicted(endpoint: string): Promise<number | null> {
  try {
    const res = await fetch(`${endpoint}/metrics`, { headers: { authorization: 'Bearer test-engine-key' }, signal: AbortSignal.timeout(2000) });
    const m = /^llamacpp:tokens_predicted_total (\d+)/m.exec(await res.text());
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

before(async () => {
  fleet = await startTestFleet({ nodes: 1 });
  chat = await writeTinyModel(join(fleet.stateDir, '..', 'models', 'chat.gguf'), { seed: 5, embeddingLength: 256, layers: 4, tensorType: 'f16' });
  await fleet.push(files('16MiB', '.'), 'chat, with a rollout check');
  ctl = await fleet.startController();
  router = buildRouter({ fleet: ctl.reconciler, auth: { required: false } });
  await router.listen({ port: 0, host: '127.0.0.1' });
  client = new OpenAI({ baseURL: `http://127.0.0.1:${(router.server.address() as AddressInfo).port}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
  await ctl.until('chat ready (a first deploy has no stable revision: no rollout)', 120_000, () => view().ready === 1 && view().rollout === undefined);
});

after(async () => {
  await router?.close();
  await fleet?.cleanup();
});

describe('rollout checks (real llama-server, sshd, git, the openai client)', { timeout: 10 * 60_000 }, () => {
  it('a failed check holds the revision back: no user request reaches it, the stable one serves, nothing is cut; a retry checks again', async () => {
    const stable = view().spec.digest;
    const load = streamLoad(client, 'chat', 3);
    await ctl.until('streams in flight', 30_000, () => load.tally.ok > 0);
    await fleet.push(files('17MiB', '^this will never match$'), 'chat: a new definition whose check fails');
    // every snapshot the controller publishes (what the router routes from): the revision under test
    // appears in them, and is never offered as ready
    let newEndpoint = '';
    let routed = false;
    let reads: Promise<void> | null = null;
    let seenTokens: number | null = null;
    const off = ctl.reconciler.onSnapshot((snap) => {
      for (const r of snap.models.find((m) => m.name === 'chat')?.replicas ?? []) {
        if (r.digest === stable || r.endpoint === '') continue;
        if (r.phase === 'ready') routed = true;
        if (newEndpoint === '') {
          newEndpoint = r.endpoint;
          // what its own llama-server predicted, read from the moment it is known until it is gone
          reads = until('the revision under test read until it is gone', 240_000, async () => {
            const n = await predicted(newEndpoint);
            if (n !== null) seenTokens = Math.max(seenTokens ?? 0, n);
            return n === null && seenTokens !== null;
          }, { everyMs: 50 }).then(() => undefined);
        }
      }
    });
    await ctl.until('held', 120_000, () => view().rollout?.phase === 'held');
    const verdict = view().rollout!.verdict!;
    assert.equal(verdict.code, 'ROLLOUT_CHECK_FAILED');
    assert.match(verdict.message, /check "answers" \(models\/chat\.yaml\) failed: expected text matching \/\^this will never match\$\/, got ./);
    await ctl.until('the held revision drained and stopped', 60_000, () => view().replicas.every((x) => x.digest === stable));
    off();
    await reads;
    assert.notEqual(newEndpoint, '', 'the revision under test ran');
    assert.equal(routed, false, 'the revision under test is never offered to the router');
    const tally = await load.stop();
    assert.ok(seenTokens !== null && seenTokens >= 1, `the new replica's llama-server was read after its check (saw ${seenTokens})`);
    assert.ok(seenTokens <= CHECK_TOKENS, `only the check reached the revision under test: ${seenTokens} tokens predicted, the check asks for at most ${CHECK_TOKENS}`);
    assert.equal(tally.failed + tally.cut, 0, `nothing failed or cut: ${JSON.stringify(tally.errors.slice(0, 3))}`);
    assert.ok(tally.ok > 0);
    assert.equal(view().ready, 1);
    assert.ok(ctl.logs.some((l) => l.msg === 'rollout held: a check failed; the stable revision keeps serving'));

    // held until a retry: the admin call runs the checks again (they fail again: held again)
    const checksRun = (): number => ctl.logs.filter((l) => l.msg === "rollout: running the new revision's checks").length;
    assert.equal(checksRun(), 1);
    await ctl.reconciler.retry('chat');
    await ctl.until('the checks ran again', 120_000, () => checksRun() === 2);
    await ctl.until('held again', 60_000, () => view().rollout?.phase === 'held' && view().replicas.every((x) => x.digest === stable));
  });

  it('checks that pass: the new revision replaces the stable one, nothing cut', async () => {
    const load = streamLoad(client, 'chat', 3);
    await ctl.until('streams in flight', 30_000, () => load.tally.ok > 0);
    await fleet.push(files('18MiB', '.'), 'chat: a new definition whose check passes');
    const next = (): string => view().spec.digest;
    await ctl.until('promoted and settled on the new revision', 180_000, () => view().rollout === undefined && view().ready === 1 && view().replicas.every((x) => x.digest === next() && x.phase === 'ready'));
    const tally = await load.stop();
    assert.equal(tally.failed + tally.cut, 0, `nothing failed or cut: ${JSON.stringify(tally.errors.slice(0, 3))}`);
    assert.ok(ctl.logs.some((l) => l.msg === 'rollout: checks passed; the new revision replaces the stable one'));
  });
});
