/**
 * An operator overrides a rollout's verdict with `llmgw ctl` (#34 item 5), on the real stack: an sshd
 * node, real llama-server replicas of a tiny model, the fleet repo behind git http-backend, the
 * controller's admin API and router, and the official `openai` client keeping streams in flight.
 *
 * A definition change whose check fails is held (`ctl rollout MODEL` shows it, with the check's
 * verdict); `ctl rollout abort` rolls it back (ROLLOUT_ABORTED, naming who, written to the state
 * record); `ctl retry` runs its checks again (held again); `ctl rollout promote` promotes the held
 * revision, which then replaces the stable replica surge-first with nothing cut; with no rollout left,
 * `ctl rollout abort` fails with ROLLOUT_NONE.
 */
import { strict as assert } from 'node:assert';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { loadState } from '../../src/reconciler/state-store.js';
import type { RolloutOneJson } from '../../src/wire/shape.js';
import { writeTinyModel, type TinyModelFile } from '../fixtures/gguf.js';
import { runCli } from '../harness/cli.js';
import { modelYaml, startTestFleet, type TestController, type TestFleet } from '../harness/controller.js';
import { serveFront, type Front } from '../harness/front.js';
import { streamLoad } from '../harness/stream-load.js';

const TOKEN = 'rollout-override-admin-token';
let fleet: TestFleet;
let ctl: TestController;
let front: Front;
let client: OpenAI;
let chat: TinyModelFile;

const check = (matches: string): string[] => [
  'rollout:',
  '  checks:',
  '    - name: answers',
  '      request: { messages: [{ role: user, content: "What is 2+2?" }], max_tokens: 6 }',
  `      expect: { status: 200, matches: "${matches}" }`,
];

function files(cacheRam: string, matches: string): Record<string, string | null> {
  const f: Record<string, string | null> = fleet.baseFiles();
  delete f['models/kev.yaml'];
  delete f['models/huge.yaml'];
  delete f['models/good.yaml'];
  f['profiles/chat.yaml'] = ['engine: llama-cpp@test', 'ctx_size: 1024', 'threads: 1', 'parallel: 2', 'memory_overhead: 64MiB', `cache_ram: ${cacheRam}`, 'start_timeout: 60s', ''].join('\n');
  f['models/chat.yaml'] = modelYaml(chat, ['replicas: 1', ...check(matches)]).replace('profile: tiny', 'profile: chat');
  return f;
}

const view = () => ctl.reconciler.model('chat')!;
const ctlRun = (...args: string[]) => runCli(['ctl', '--server', front.adminUrl, '--token', TOKEN, ...args], undefined, { ...process.env, USER: 'ops' });
const checksRun = (): number => ctl.logs.filter((l) => l.msg === "rollout: running the new revision's checks").length;

before(async () => {
  fleet = await startTestFleet({ nodes: 1 });
  chat = await writeTinyModel(join(fleet.stateDir, '..', 'models', 'chat.gguf'), { seed: 7, embeddingLength: 256, layers: 4, tensorType: 'f16' });
  await fleet.push(files('16MiB', '.'), 'chat, with a rollout check');
  ctl = await fleet.startController();
  front = await serveFront(ctl, TOKEN);
  client = new OpenAI({ baseURL: `${front.routerUrl}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
  await ctl.until('chat ready (a first deploy has no stable revision: no rollout)', 120_000, () => view().ready === 1 && view().rollout === undefined);
});

after(async () => {
  await front?.close();
  await fleet?.cleanup();
});

describe('ctl rollout promote|abort on the real stack', { timeout: 10 * 60_000 }, () => {
  it('held by a failed check → abort → retry → promote: each seen in ctl rollout MODEL, the promoted revision takes over with nothing cut', async () => {
    const stable = view().spec.digest;
    const none = await ctlRun('rollout', 'chat');
    assert.equal(none.code, 0, none.stderr);
    assert.match(none.stdout, /^chat: no rollout; revision [0-9a-f]{12} serves/);

    await fleet.push(files('17MiB', '^this will never match$'), 'chat: a new definition whose check fails');
    await ctl.until('held by the failed check, the new replica gone', 180_000, () => view().rollout?.phase === 'held' && view().replicas.every((r) => r.digest === stable));
    const next = view().spec.digest;
    assert.notEqual(next, stable);
    const held = await ctlRun('rollout', 'chat');
    assert.equal(held.code, 0, held.stderr);
    assert.match(held.stdout, /^phase\s+HELD since /m);
    assert.ok(held.stdout.includes(`${next.slice(0, 12)} under test; ${stable.slice(0, 12)} is the stable revision`), held.stdout);
    assert.match(held.stdout, /^verdict\s+check "answers" \(models\/chat\.yaml\) failed: .*\[ROLLOUT_CHECK_FAILED\]$/m);

    // abort: rolled back, by whom, written before the answer
    const abort = await ctlRun('rollout', 'abort', 'chat');
    assert.equal(abort.code, 0, abort.stderr);
    assert.match(abort.stdout, /^chat: rollout of revision [0-9a-f]{12} aborted; [0-9a-f]{12} serves/);
    assert.match(abort.stdout, /verdict: rollout aborted during the checks by llmgw ctl \(ops@[^)]+\); the stable revision serves \[ROLLOUT_ABORTED\]/);
    const saved = (await loadState(join(fleet.stateDir, 'state.json'))).state.models.chat?.rollout;
    assert.equal(saved?.phase, 'rolled_back', 'the state file holds the abort once ctl has its answer');
    assert.equal(saved?.verdict?.code, 'ROLLOUT_ABORTED');
    const shown = JSON.parse((await ctlRun('rollout', 'chat', '-o', 'json')).stdout) as RolloutOneJson;
    assert.equal(shown.rollout?.phase, 'rolled_back');
    assert.equal(shown.rollout?.verdict?.code, 'ROLLOUT_ABORTED');
    assert.ok(ctl.logs.some((l) => l.msg === 'rollout aborted by an operator' && l.model === 'chat' && typeof l.by === 'string' && l.by.startsWith('llmgw ctl (ops@')));
    // aborting again changes nothing
    const again = await ctlRun('rollout', 'abort', 'chat');
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stdout, /was rolled back already; nothing changed/);

    // retry: the checks run again, and fail again
    const ran = checksRun();
    const retry = await ctlRun('retry', 'chat');
    assert.equal(retry.code, 0, retry.stderr);
    await ctl.until('the checks ran again and held it again', 180_000, () => checksRun() > ran && view().rollout?.phase === 'held' && view().replicas.every((r) => r.digest === stable));

    // promote the held revision: it replaces the stable replica surge-first, with streams in flight
    const load = streamLoad(client, 'chat', 2);
    await ctl.until('streams in flight', 30_000, () => load.tally.ok > 0);
    const promote = await ctlRun('rollout', 'promote', 'chat');
    assert.equal(promote.code, 0, promote.stderr);
    assert.match(promote.stdout, /^chat: revision [0-9a-f]{12} promoted; it replaces [0-9a-f]{12} replica by replica, surge-first$/);
    await ctl.until('promoted and settled on the new revision', 180_000, () => view().rollout === undefined && view().ready === 1 && view().replicas.every((r) => r.digest === next && r.phase === 'ready'));
    const tally = await load.stop();
    assert.equal(tally.failed + tally.cut, 0, `nothing failed or cut: ${JSON.stringify(tally.errors.slice(0, 3))}`);
    assert.ok(tally.ok > 0);

    // no rollout left: nothing to override
    const gone = await ctlRun('rollout', 'abort', 'chat');
    assert.equal(gone.code, 1);
    assert.match(gone.stderr, /chat has no rollout to abort: .*\[ROLLOUT_NONE\]\n {4}hint: /);
  });
});
