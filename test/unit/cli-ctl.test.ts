/**
 * `llmgw ctl` against a real admin app on a real socket (127.0.0.1:0) over a fake backend whose
 * snapshot holds a parked model, an unplaceable one, an on-demand model asked for but unplaced,
 * an idle on-demand model, a failing one and a ready one. Golden files pin the tables.
 */
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance, FastifyServerFactory } from 'fastify';
import { buildAdminApp } from '../../src/admin/app.js';
import type { AdminBackend, RestartRequest } from '../../src/admin/backend.js';
import type { ModelsJson, StatusJson } from '../../src/wire/shape.js';
import { resolveTarget } from '../../src/cli/ctl-client.js';
import { LlmgwError } from '../../src/errors/catalogue.js';
import type { FleetSnapshot, ModelView, ReplicaView } from '../../src/reconciler/view.js';
import type { FleetSpec } from '../../src/fleet-spec/types.js';
import { runCli } from '../harness/cli.js';
import { fakeSpec } from '../harness/fake-fleet-view.js';
import { unplaceableView } from '../harness/fake-fleet-view.js';
import { assertGolden } from '../harness/golden.js';
import { modelView, nodeSpec, nodeView, replicaView, snapshot } from '../harness/views.js';

const TOKEN = 'ctl-test-token';
const AT = '2025-03-01T12:00:00.000Z';
const GiB = 2 ** 30;
const ago = (s: number): number => Date.parse(AT) - s * 1000;

const base = fakeSpec({
  models: {
    good: { aliases: ['good-chat'] },
    kev: {},
    huge: {},
    'lazy-asked': { scaling: { mode: 'on_demand', idleTimeoutMs: 900_000, maxReplicas: 1 } },
    'lazy-idle': { scaling: { mode: 'on_demand', idleTimeoutMs: 900_000, maxReplicas: 2 } },
    flaky: { scaling: { mode: 'replicas', replicas: 2 } },
  },
});
const SPEC: FleetSpec = { ...base, revision: '3f2a9c1e0b7d55aa', nodes: { 'node-1': nodeSpec('node-1'), 'node-2': nodeSpec('node-2', { transport: 'local' }) } };

const replica = (id: string, model: string, node: string, phase: ReplicaView['phase'], startedSecondsAgo: number, digest = SPEC.models[model]!.digest): ReplicaView =>
  replicaView(id, model, { node, endpoint: `http://${node === 'node-1' ? '10.0.0.1' : '127.0.0.1'}:${8000 + id.length}`, phase, digest, startedAt: ago(startedSecondsAgo) });
const model = (name: string, over: Partial<ModelView>): ModelView => modelView(SPEC.models[name]!, { memoryBytes: GiB, ...over });

const kevError = { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: "unknown model architecture: 'kev'" };
const flakyError = { code: 'REPLICA_START_TIMEOUT', message: 'not healthy within 2m' };

const SNAPSHOT: FleetSnapshot = snapshot({
  at: Date.parse(AT),
  appliedRevision: '3f2a9c1e0b7d55aa',
  lastSyncOk: ago(15),
  lastStatusWriteOk: ago(14),
  models: [
    model('flaky', { phase: 'degraded', desired: 2, ready: 1, consecutiveFailures: 2, lastError: flakyError, nextAttemptAt: Date.parse(AT) + 40_000, replicas: [replica('flaky-1', 'flaky', 'node-2', 'ready', 7200)] }),
    model('good', { phase: 'ready', desired: 1, ready: 1, replicas: [replica('good-r1', 'good', 'node-1', 'ready', 3 * 3600 + 300)] }),
    model('huge', { phase: 'unplaceable', unplaceable: unplaceableView('needs 1 TiB; largest free 22.1 GiB on node-1; 2 nodes checked') }),
    model('kev', { phase: 'parked', consecutiveFailures: 5, lastError: kevError, parked: { since: ago(2 * 3600), lastError: kevError } }),
    model('lazy-asked', { phase: 'pending', desired: 1, ready: 0 }),
    model('lazy-idle', { phase: 'idle', desired: 0, ready: 0 }),
  ],
  nodes: [
    nodeView('node-1', { memory: { totalBytes: 64 * GiB, availableBytes: Math.round(22.1 * GiB) }, engines: ['llama.cpp@b4500'], replicas: 1 }),
    nodeView('node-2', { memory: { totalBytes: 32 * GiB, availableBytes: 8 * GiB }, engines: ['llama.cpp@b4500', 'llama.cpp@b4600'], replicas: 1 }),
  ],
  lastPass: { startedAt: ago(3), durationMs: 412, result: 'ok', error: null, actions: 2 },
});

class FakeBackend implements AdminBackend {
  pending = new Set<string>();
  /** Replicas of a restart are "replaced" this long after restart() (null: never). */
  restartTakesMs: number | null = 50;
  readonly calls = { retry: [] as string[], restart: [] as RestartRequest[], logs: [] as [string, number][] };
  snapshot(): FleetSnapshot {
    return SNAPSHOT;
  }
  spec(): FleetSpec {
    return SPEC;
  }
  async retry(name: string): Promise<{ model: string; outcome: 'unparked' | 'backoff-cleared' }> {
    this.calls.retry.push(name);
    return { model: name, outcome: SNAPSHOT.models.find((m) => m.name === name)?.parked ? 'unparked' : 'backoff-cleared' };
  }
  /** No model here has a rollout (admin-rollout.test.ts and cli-ctl-rollout.test.ts test the routes). */
  async overrideRollout(name: string): Promise<never> {
    throw new LlmgwError('ROLLOUT_NONE', `${name} has no rollout`);
  }
  async restart(req: RestartRequest): Promise<readonly string[]> {
    this.calls.restart.push(req);
    const all = SNAPSHOT.models.flatMap((m) => m.replicas);
    for (const id of req.replicas ?? []) if (!all.some((r) => r.id === id)) throw new LlmgwError('REPLICA_NOT_FOUND', `no running replica "${id}"`);
    const ids = all.filter((r) => req.all || r.model === req.model || req.replicas?.includes(r.id)).map((r) => r.id);
    for (const id of ids) this.pending.add(id);
    // deliberate: the restart ends after real time, as ctl's wait is a loop over the server's long polls, each ended by its real-time limit (maxWaitMs)
    if (this.restartTakesMs !== null) setTimeout(() => ids.forEach((id) => this.pending.delete(id)), this.restartTakesMs);
    return ids;
  }
  restartDone(ids: readonly string[]): boolean {
    return ids.every((id) => !this.pending.has(id));
  }
  async logs(id: string, lines: number): Promise<string> {
    this.calls.logs.push([id, lines]);
    if (!SNAPSHOT.models.some((m) => m.replicas.some((r) => r.id === id))) throw new LlmgwError('REPLICA_NOT_FOUND', `no replica "${id}"`);
    return 'main: server is listening on http://127.0.0.1:8007\nsrv  update_slots: all slots are idle\n';
  }
  async requestPass(): Promise<void> {}
}

let app: FastifyInstance;
let backend: FakeBackend;
let server: string;
let home: string;
/** An environment with nothing of the host's: no LLMGW_* and an empty HOME. */
let env: NodeJS.ProcessEnv;

const ctl = (args: readonly string[], extraEnv: NodeJS.ProcessEnv = {}) => runCli(['ctl', ...args], home, { ...env, ...extraEnv });
const ctlAuthed = (args: readonly string[]) => ctl([...args, '--server', server, '--token', TOKEN]);

before(async () => {
  home = mkdtempSync(join(tmpdir(), 'llmgw-ctl-'));
  env = { HOME: home, PATH: process.env.PATH };
  backend = new FakeBackend();
  // a short server-side wait, so a restart needs several long-poll rounds
  app = buildAdminApp({ backend, token: TOKEN, limits: { pollMs: 5, maxWaitMs: 200 } });
  await app.listen({ host: '127.0.0.1', port: 0 });
  server = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
});

after(async () => {
  await app.close();
  rmSync(home, { recursive: true, force: true });
});

describe('llmgw ctl: tables (golden)', () => {
  test('ctl status: parked with last error and how to unpark first, then unplaceable with reason, then not ready, then ready/idle; counts against what is wanted now', async () => {
    const r = await ctlAuthed(['status']);
    assert.equal(r.code, 0, r.stderr);
    assertGolden('ctl-status.txt', r.stdout);
    const lines = r.stdout.split('\n');
    const at = (s: string): number => lines.findIndex((l) => l.includes(s));
    assert.ok(at('PARKED') < at('UNPLACEABLE') && at('UNPLACEABLE') < at('NOT READY') && at('NOT READY') < at('READY / IDLE'));
    assert.match(r.stdout, /unknown model architecture: 'kev'/);
    assert.match(r.stdout, /llmgw ctl retry kev/);
    assert.match(r.stdout, /Llmgw-Retry: kev/);
    assert.match(r.stdout, /needs 1 TiB; largest free 22\.1 GiB on node-1; 2 nodes checked/);
    assert.match(r.stdout, /lazy-asked +pending +0\/1 /);
    assert.match(r.stdout, /lazy-idle +0\/0 idle /);
    assert.match(r.stdout, /good +1\/1 /);
  });

  test('ctl models', async () => {
    const r = await ctlAuthed(['models']);
    assert.equal(r.code, 0, r.stderr);
    assertGolden('ctl-models.txt', r.stdout);
  });

  test('ctl replicas', async () => {
    const r = await ctlAuthed(['replicas']);
    assert.equal(r.code, 0, r.stderr);
    assertGolden('ctl-replicas.txt', r.stdout);
  });

  test('ctl nodes', async () => {
    const r = await ctlAuthed(['nodes']);
    assert.equal(r.code, 0, r.stderr);
    assertGolden('ctl-nodes.txt', r.stdout);
  });
});

describe('llmgw ctl: -o json', () => {
  test('models and status print the admin API answer', async () => {
    const m = await ctlAuthed(['models', '-o', 'json']);
    assert.equal(m.code, 0, m.stderr);
    const models = JSON.parse(m.stdout) as ModelsJson;
    assert.deepEqual(models.models.map((x) => [x.name, x.phase, x.ready, x.desired]), [
      ['flaky', 'degraded', 1, 2],
      ['good', 'ready', 1, 1],
      ['huge', 'unplaceable', 0, 1],
      ['kev', 'parked', 0, 1],
      ['lazy-asked', 'pending', 0, 1],
      ['lazy-idle', 'idle', 0, 0],
    ]);
    assert.equal(models.models.find((x) => x.name === 'kev')?.parked?.lastError.code, 'REPLICA_UNKNOWN_ARCHITECTURE');
    const s = await ctlAuthed(['status', '--output', 'json']);
    const status = JSON.parse(s.stdout) as StatusJson;
    assert.equal(status.models.byPhase.parked, 1);
    assert.equal(status.revision, '3f2a9c1e0b7d55aa');
    const rs = await ctlAuthed(['replicas', '-o', 'json']);
    assert.deepEqual((JSON.parse(rs.stdout) as { replicas: { id: string }[] }).replicas.map((x) => x.id), ['flaky-1', 'good-r1']);
  });
});

describe('llmgw ctl: retry, restart, logs', () => {
  test('retry a parked model: unparked; a model that is not parked: backoff cleared', async () => {
    const a = await ctlAuthed(['retry', 'kev']);
    assert.equal(a.code, 0, a.stderr);
    assert.equal(a.stdout, 'kev: unparked; it will be started again');
    const b = await ctlAuthed(['retry', 'good-chat']);
    assert.equal(b.code, 0, b.stderr);
    assert.equal(b.stdout, 'good: not parked; backoff cleared');
    const j = await ctlAuthed(['retry', 'kev', '-o', 'json']);
    assert.equal(JSON.parse(j.stdout).outcome, 'unparked');
  });

  test('retry an unknown model: exit 1 with the code and hint', async () => {
    const r = await ctlAuthed(['retry', 'nope']);
    assert.equal(r.code, 1);
    assert.equal(r.stdout, '');
    assert.match(r.stderr, /No model named "nope".*\[NOT_FOUND\]/);
    assert.match(r.stderr, /hint: .*llmgw ctl models/);
  });

  test('restart --model waits until the controller reports it handled', async () => {
    backend.restartTakesMs = 700; // several of the server's 200 ms waits
    const r = await ctlAuthed(['restart', '--model', 'good']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, 'restarting good-r1 surge-first (each new replica starts before the old one stops)…\nrestarted replica of good (good-r1)');
    assert.deepEqual(backend.calls.restart.at(-1), { model: 'good' });
    assert.ok(backend.restartDone(['good-r1']));
  });

  test('restart by id and --all; --no-wait returns at once', async () => {
    backend.restartTakesMs = 20;
    const r = await ctlAuthed(['restart', 'good-r1', 'flaky-1']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, 'restarted 2 replicas (flaky-1, good-r1)');
    backend.restartTakesMs = null;
    const n = await ctlAuthed(['restart', '--all', '--no-wait']);
    assert.equal(n.code, 0, n.stderr);
    assert.match(n.stdout, /^restart requested for 2 replicas \(flaky-1, good-r1\)/);
    backend.pending.clear();
  });

  test('a restart that does not finish within --timeout: exit 1, says it goes on', async () => {
    backend.restartTakesMs = null;
    const r = await ctlAuthed(['restart', '--model', 'good', '--timeout', '300ms']);
    assert.equal(r.code, 1);
    assert.match(r.stdout, /^restarting good-r1 surge-first/);
    assert.match(r.stderr, /did not finish within 300ms; it goes on in the controller/);
    assert.match(r.stderr, /hint: `llmgw ctl replicas`/);
    backend.pending.clear();
    backend.restartTakesMs = 50;
  });

  test('restart of an unknown replica: exit 1 REPLICA_NOT_FOUND', async () => {
    const r = await ctlAuthed(['restart', 'nope']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /\[REPLICA_NOT_FOUND\]/);
  });

  test('logs REPLICA --lines N prints the tail', async () => {
    const r = await ctlAuthed(['logs', 'good-r1', '--lines', '5']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout, 'main: server is listening on http://127.0.0.1:8007\nsrv  update_slots: all slots are idle');
    assert.deepEqual(backend.calls.logs.at(-1), ['good-r1', 5]);
    const missing = await ctlAuthed(['logs', 'nope']);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /\[REPLICA_NOT_FOUND\]/);
  });
});

describe('llmgw ctl: exit codes and usage', () => {
  test('usage errors exit 2 without contacting anyone', async () => {
    for (const args of [
      [],
      ['frobnicate'],
      ['status', 'extra'],
      ['status', '-o', 'yaml'],
      ['status', '--lines', '3'],
      ['models', '--model', 'x'],
      ['retry'],
      ['retry', 'a', 'b'],
      ['logs'],
      ['logs', 'x', '--lines', '0'],
      ['logs', 'x', '--lines', 'many'],
      ['restart'],
      ['restart', 'a', '--all'],
      ['restart', '--model', 'good', '--all'],
      ['restart', '--all', '--timeout', 'soon'],
      ['status', '--bogus'],
      ['status', '--server', 'not a url'],
      ['status', '--server', 'ftp://x'],
    ]) {
      const r = await ctl(args);
      assert.equal(r.code, 2, `${args.join(' ')} → ${r.code}: ${r.stderr}`);
      assert.ok(r.stderr.length > 0);
    }
  });

  test('--help prints the usage and exits 0', async () => {
    const r = await ctl(['--help']);
    assert.equal(r.code, 0);
    assert.match(r.stdout, /^usage: llmgw ctl <command>/);
    for (const c of ['status', 'models', 'replicas', 'nodes', 'retry MODEL', 'restart REPLICA', 'logs REPLICA']) assert.ok(r.stdout.includes(c), c);
    const top = await runCli(['help']);
    assert.match(top.stdout, /ctl status\|models/);
  });

  test('no token / a bad token: exit 1 with the controller\'s code and hint', async () => {
    const none = await ctl(['status', '--server', server]);
    assert.equal(none.code, 1);
    assert.match(none.stderr, /\[ADMIN_AUTH_MISSING\]/);
    assert.match(none.stderr, /hint: .*LLMGW_ADMIN_TOKEN/);
    const bad = await ctl(['status', '--server', server, '--token', 'wrong']);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /\[ADMIN_AUTH_INVALID\]/);
  });

  test('an unreachable controller: exit 1, says where it looked and how to point elsewhere', async () => {
    const probe = buildAdminApp({ backend, token: TOKEN });
    await probe.listen({ host: '127.0.0.1', port: 0 });
    const dead = `http://127.0.0.1:${(probe.server.address() as AddressInfo).port}`;
    await probe.close();
    const r = await ctl(['status', '--server', dead, '--token', TOKEN]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, new RegExp(`cannot reach the llmgw controller at ${dead.replace(/[.]/g, '\\.')}.*\\[CTL_UNREACHABLE\\]`));
    assert.match(r.stderr, /hint: .*--server URL, LLMGW_SERVER/);
  });
});

describe('llmgw ctl: where the server and token come from', () => {
  test('environment: LLMGW_SERVER and LLMGW_ADMIN_TOKEN (flags win over them)', async () => {
    const r = await ctl(['models'], { LLMGW_SERVER: server, LLMGW_ADMIN_TOKEN: TOKEN });
    assert.equal(r.code, 0, r.stderr);
    const f = await ctl(['models', '--token', 'wrong'], { LLMGW_SERVER: server, LLMGW_ADMIN_TOKEN: TOKEN });
    assert.equal(f.code, 1);
    assert.match(f.stderr, /ADMIN_AUTH_INVALID/);
  });

  test('the default config file ~/.config/llmgw/ctl.json with a tokenFile next to it; --config and LLMGW_CONFIG', async () => {
    const dir = join(home, '.config', 'llmgw');
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'admin.token'), `${TOKEN}\n`);
    writeFileSync(join(dir, 'ctl.json'), JSON.stringify({ server, tokenFile: 'admin.token' }));
    try {
      const r = await ctl(['replicas']);
      assert.equal(r.code, 0, r.stderr);
      const other = join(home, 'other.json');
      writeFileSync(other, JSON.stringify({ server, token: 'wrong' }));
      assert.equal((await ctl(['replicas', '--config', other])).code, 1);
      assert.equal((await ctl(['replicas'], { LLMGW_CONFIG: other })).code, 1);
      assert.equal((await ctl(['replicas', '--config', other, '--token', TOKEN])).code, 0);
    } finally {
      rmSync(join(home, '.config'), { recursive: true, force: true });
    }
  });

  test('config problems are usage errors (exit 2): a missing --config, bad JSON, unknown keys', async () => {
    assert.equal((await ctl(['status', '--config', join(home, 'missing.json')])).code, 2);
    const bad = join(home, 'bad.json');
    writeFileSync(bad, '{server:');
    assert.match((await ctl(['status', '--config', bad])).stderr, /not valid JSON/);
    writeFileSync(bad, JSON.stringify({ server, tokn: 'x' }));
    const r = await ctl(['status', '--config', bad]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /unknown key "tokn"/);
  });

  test('resolveTarget: precedence flags > env > config file > default', () => {
    const cfgDir = mkdtempSync(join(tmpdir(), 'llmgw-ctl-cfg-'));
    try {
      writeFileSync(join(cfgDir, 'ctl.json'), JSON.stringify({ server: 'https://cfg.example:9443/', token: 'cfg-token' }));
      const cfgEnv = { HOME: '/nonexistent', LLMGW_CONFIG: join(cfgDir, 'ctl.json') };
      assert.deepEqual(resolveTarget({}, { HOME: '/nonexistent' }, cfgDir), { server: 'http://127.0.0.1:8081', token: null, ca: null });
      assert.deepEqual(resolveTarget({}, cfgEnv, cfgDir), { server: 'https://cfg.example:9443', token: 'cfg-token', ca: null });
      assert.deepEqual(resolveTarget({}, { ...cfgEnv, LLMGW_SERVER: 'http://env:1', LLMGW_ADMIN_TOKEN: 'env-token' }, cfgDir), { server: 'http://env:1', token: 'env-token', ca: null });
      assert.deepEqual(resolveTarget({ server: 'http://flag:2', token: 'flag-token' }, { ...cfgEnv, LLMGW_SERVER: 'http://env:1', LLMGW_ADMIN_TOKEN: 'env-token' }, cfgDir), {
        server: 'http://flag:2',
        token: 'flag-token',
        ca: null,
      });
      assert.equal(resolveTarget({}, { HOME: '/nonexistent', XDG_CONFIG_HOME: '/nonexistent-xdg' }, cfgDir).server, 'http://127.0.0.1:8081');
    } finally {
      rmSync(cfgDir, { recursive: true, force: true });
    }
  });
});

describe('llmgw ctl: TLS', () => {
  let tlsApp: FastifyInstance;
  let tlsServer: string;
  let dir: string;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'llmgw-ctl-tls-'));
    execFileSync(
      'openssl',
      ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2', '-subj', '/CN=llmgw-test-ca',
        '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost', '-keyout', join(dir, 'key.pem'), '-out', join(dir, 'cert.pem')],
      { stdio: 'pipe' },
    );
    const key = readFileSync(join(dir, 'key.pem'));
    const cert = readFileSync(join(dir, 'cert.pem'));
    const serverFactory = ((handler: Parameters<FastifyServerFactory>[0]) => createHttpsServer({ key, cert }, handler)) as unknown as FastifyServerFactory;
    tlsApp = buildAdminApp({ backend, token: TOKEN, serverFactory });
    await tlsApp.listen({ host: '127.0.0.1', port: 0 });
    tlsServer = `https://127.0.0.1:${(tlsApp.server.address() as AddressInfo).port}`;
  });
  after(async () => {
    await tlsApp.close();
    rmSync(dir, { recursive: true, force: true });
  });

  test('https:// with --ca (or LLMGW_CA) works; without trusting the CA: exit 1 with a TLS hint', async () => {
    const ok = await ctl(['models', '--server', tlsServer, '--token', TOKEN, '--ca', join(dir, 'cert.pem')]);
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(ok.stdout, /^MODEL/);
    const env2 = await ctl(['models', '--server', tlsServer, '--token', TOKEN], { LLMGW_CA: join(dir, 'cert.pem') });
    assert.equal(env2.code, 0, env2.stderr);
    const untrusted = await ctl(['models', '--server', tlsServer, '--token', TOKEN]);
    assert.equal(untrusted.code, 1);
    assert.match(untrusted.stderr, /\[CTL_TLS\]/);
    assert.match(untrusted.stderr, /hint: .*--ca FILE/);
  });
});
