/**
 * `llmgw ctl rollout MODEL` and `llmgw ctl rollout promote|abort MODEL` against a real admin app on a
 * real socket, over a backend whose overrides apply the real pure transition
 * (test/harness/rollout-backend.ts): text and --json, who the override says did it, the exit
 * status of each failure, and the canary's step in `ctl status`.
 */
import { strict as assert } from 'node:assert';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, beforeEach, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import { buildAdminApp } from '../../src/admin/app.js';
import { whoAmI } from '../../src/cli/ctl.js';
import type { RolloutOneJson, RolloutOverrideJson } from '../../src/wire/shape.js';
import { runCli } from '../harness/cli.js';
import { freePort } from '../harness/ports.js';
import { initialRollouts, RolloutBackend } from '../harness/rollout-backend.js';

const TOKEN = 'ctl-rollout-token';
let app: FastifyInstance;
let backend: RolloutBackend;
let server: string;
let home: string;

const ctl = (args: readonly string[], env: NodeJS.ProcessEnv = {}) => runCli(['ctl', ...args, '--server', server, '--token', TOKEN], home, { HOME: home, PATH: process.env.PATH, ...env });

before(async () => {
  home = mkdtempSync(join(tmpdir(), 'llmgw-ctl-rollout-'));
  backend = new RolloutBackend();
  app = buildAdminApp({ backend, token: TOKEN });
  const port = await freePort();
  await app.listen({ host: '127.0.0.1', port });
  server = `http://127.0.0.1:${port}`;
});

beforeEach(() => {
  backend.records = initialRollouts();
  backend.calls.length = 0;
});

after(async () => {
  await app.close();
  rmSync(home, { recursive: true, force: true });
});

describe('llmgw ctl rollout MODEL', () => {
  test('text: the canary\'s step of every step, its share and time left, both arms side by side, the decisions', async () => {
    const r = await ctl(['rollout', 'chat-alias']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^model\s+chat$/m);
    assert.match(r.stdout, /^phase\s+canary 10% \(step 1\/2\), 1m20s left \(since 40s ago\)/m);
    assert.match(r.stdout, /^\s+STABLE\s+CANARY$/m);
    assert.match(r.stdout, /^requests\s+380\s+42$/m);
    assert.match(r.stdout, /^error rate\s+0%\s+31%$/m);
    assert.match(r.stdout, /^TTFT p95\s+338 ms\s+812 ms$/m);
    assert.match(r.stdout, /^TPOT p95\s+21 ms\s+23 ms$/m);
    assert.match(r.stdout, /^decide\s+llmgw ctl rollout promote chat {2}\| {2}llmgw ctl rollout abort chat$/m);
  });

  test('--json: the admin API\'s answer; a model without a rollout says so and exits 0', async () => {
    const j = await ctl(['rollout', 'embed', '-o', 'json']);
    assert.equal(j.code, 0, j.stderr);
    const body = JSON.parse(j.stdout) as RolloutOneJson;
    assert.equal(body.rollout?.phase, 'held');
    assert.equal(body.rollout?.verdict?.code, 'ROLLOUT_HELD');
    const none = await ctl(['rollout', 'plain']);
    assert.equal(none.code, 0, none.stderr);
    assert.match(none.stdout, /^plain: no rollout; revision [0-9a-f]{12} serves/);
  });

  test('an unknown model: exit 1 with NOT_FOUND and its hint; wrong arguments: usage, exit 2, nothing asked', async () => {
    const r = await ctl(['rollout', 'nope']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /No model named "nope".*\[NOT_FOUND\]\n {4}hint: /s);
    for (const args of [['rollout'], ['rollout', 'promote'], ['rollout', 'delete', 'chat'], ['rollout', 'abort', 'chat', 'embed']]) {
      const u = await ctl(args);
      assert.equal(u.code, 2, `${args.join(' ')}: ${u.stderr}`);
      assert.match(u.stderr, /usage: llmgw ctl rollout MODEL \| llmgw ctl rollout promote\|abort MODEL/);
    }
    assert.deepEqual(backend.calls, []);
  });
});

describe('llmgw ctl rollout promote|abort MODEL', () => {
  test('abort a canary: rolled back at its share, said to be by ctl as this user on this host', async () => {
    const r = await ctl(['rollout', 'abort', 'chat'], { USER: 'alice' });
    assert.equal(r.code, 0, r.stderr);
    const by = whoAmI({ USER: 'alice' });
    assert.match(by, /^llmgw ctl \(alice@\S+\)$/);
    assert.deepEqual(backend.calls, [{ model: 'chat', how: 'abort', by }]);
    assert.match(r.stdout, /^chat: rollout of revision [0-9a-f]{12} aborted; aaaaaaaaaaaa serves/);
    assert.ok(r.stdout.includes(`verdict: rollout aborted at 10% by ${by}; the stable revision serves [ROLLOUT_ABORTED]`), r.stdout);
    const shown = await ctl(['rollout', 'chat']);
    assert.match(shown.stdout, /^phase\s+ROLLED BACK just now: the stable revision serves$/m);
    assert.match(shown.stdout, /^decide\s+llmgw ctl rollout promote chat {2}\| {2}llmgw ctl retry chat$/m);
  });

  test('promote a held revision (--json), then again: "already", still exit 0', async () => {
    const r = await ctl(['rollout', 'promote', 'embed', '--output', 'json']);
    assert.equal(r.code, 0, r.stderr);
    const body = JSON.parse(r.stdout) as RolloutOverrideJson;
    assert.equal(body.outcome, 'promoted');
    assert.equal(body.rollout.phase, 'promoted');
    const again = await ctl(['rollout', 'promote', 'embed']);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stdout, /was promoted already; nothing changed$/);
  });

  test('a model without a rollout: exit 1 with ROLLOUT_NONE and its hint', async () => {
    const r = await ctl(['rollout', 'abort', 'plain']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /plain has no rollout to abort \[ROLLOUT_NONE\]\n {4}hint: The model has no rollout under way/);
  });

  test('whoAmI: printable and bounded whatever the environment holds', () => {
    assert.equal(whoAmI({ USER: 'bob' }, 'box'), 'llmgw ctl (bob@box)');
    assert.equal(whoAmI({}, 'box'), 'llmgw ctl (box)');
    assert.equal(whoAmI({ USER: 'e\u001b[2Jvil name' }, 'box'), 'llmgw ctl (e?[2Jvil?name@box)');
    assert.ok(whoAmI({ USER: 'x'.repeat(500) }, 'box').length <= 120);
  });
});

describe('llmgw ctl status: ROLLOUTS', () => {
  test('a canary shows its share, step and time left; a held one its verdict and hint', async () => {
    const r = await ctl(['status']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^ROLLOUTS \(2\): /m);
    assert.match(r.stdout, /^ {2}chat {2}rollout: revision [0-9a-f]{12} canary 10% \(step 1\/2\), 1m20s left; aaaaaaaaaaaa serves the rest$/m);
    assert.match(r.stdout, /^ {2}embed {2}rollout HELD 5m ago: held at 10%: 12 of 30 requests on the canary \[ROLLOUT_HELD\]; bbbbbbbbbbbb serves$/m);
    assert.match(r.stdout, /^ {4}hint {2}.*llmgw ctl rollout promote embed/m);
  });
});
