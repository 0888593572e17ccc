/**
 * SIGKILL of a real `llmgw serve` (sshd node, llama-server, a fleet repo served over git), restarted
 * with the same state dir: the state record carries what the killed controller knew.
 * - An on-demand model in use is kept until its idle timeout counted from the last request before
 *   the kill, then stopped (not on the restarted controller's first pass).
 * - A `ctl restart` requested just before the kill is carried out after it: the old replica is
 *   replaced by one new replica, surge-first, and nothing else is started.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Reasons } from '../../src/errors/catalogue.js';
import { runCli } from '../harness/cli.js';
import { replicaProcesses } from '../harness/replica-procs.js';
import { recordFault } from '../harness/fault-report.js';
import { SecretsScan } from '../harness/secrets-scan.js';
import { startThrottledOrigin } from '../harness/throttled-origin.js';
import { writeTinyModel } from '../fixtures/gguf.js';
import { repoRoot } from '../harness/paths.js';
import { until } from '../harness/wait.js';
import { modelYaml, startTestFleet, type TestFleet } from '../harness/controller.js';
import { spawnServe, type ServeProc } from '../harness/serve-proc.js';

const IDLE_S = 25;

let fleet: TestFleet;
let proc: ServeProc | null = null;
let out = '';
/** Everything every controller printed and every admin answer, for the secrets scan at the end. */
const scan = new SecretsScan();

/** Starts `llmgw serve` on the fleet, or starts it again (same state dir and ports) after a kill; `out` holds what this run printed. */
async function serve(): Promise<void> {
  out = '';
  if (proc) return proc.restart();
  proc = await spawnServe({
    name: 'serve',
    fleet,
    onOutput: (d) => {
      out = (out + d).slice(-200_000);
      scan.collect('llmgw serve output', d);
    },
  });
}

/** A running `llmgw serve` (started when the test before left none). */
async function serving(): Promise<void> {
  if (proc?.alive()) return;
  await serve();
  await until('llmgw serving', 120_000, async () => (await admin<{ lastPass: unknown }>('/status')).lastPass, { diag: logTail });
}

interface ModelJson {
  name: string;
  phase: string;
  replicas: { id: string; phase: string; node: string }[];
}

async function admin<T>(path: string, init?: RequestInit): Promise<T> {
  const r = await fetch(`http://127.0.0.1:${proc!.adminPort}/admin/v1${path}`, init);
  const text = await r.text();
  scan.collect(`admin ${path}`, text);
  return JSON.parse(text) as T;
}

async function models(): Promise<Record<string, ModelJson>> {
  const r = await admin<{ models: ModelJson[] }>('/models');
  return Object.fromEntries(r.models.map((m) => [m.name, m]));
}

const logTail = (): string => `--- llmgw log (tail) ---\n${out.slice(-5000)}`;

async function chat(model: string): Promise<number> {
  const r = await fetch(`http://127.0.0.1:${proc!.routerPort}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 1 }),
  });
  await r.arrayBuffer();
  return r.status;
}

before(async () => {
  fleet = await startTestFleet({ nodes: 1 });
  const files = fleet.baseFiles();
  delete files['models/kev.yaml'];
  delete files['models/huge.yaml'];
  files['models/good.yaml'] = modelYaml(fleet.models.good, [`on_demand: { idle_timeout: ${IDLE_S}s }`]);
  files['models/steady.yaml'] = modelYaml(fleet.models.good2, ['replicas: 1']);
  await fleet.push(files, 'fleet: an on-demand model and an always-on one');
});

after(async () => {
  await proc?.sigkill();
  await fleet?.cleanup();
});

describe('SIGKILL of llmgw serve, restarted with the same state dir', () => {
  it('keeps an on-demand model in use until its idle timeout from the last request, and carries out a restart asked for before the kill', async () => {
    await serve();
    await until('steady ready', 120_000, async () => (await models()).steady?.phase === 'ready', { diag: logTail });
    // the on-demand model in use: activated by a request, used until just before the kill
    assert.equal(await chat('good'), 200);
    assert.equal(await chat('good'), 200);
    const lastRequestAt = Date.now();
    const before = await models();
    const goodReplica = before.good!.replicas.find((r) => r.phase === 'ready')!;
    const oldSteady = before.steady!.replicas[0]!.id;
    // a restart asked for, then the controller is killed before it is carried out
    const restart = await admin<{ ids: string[]; done: boolean }>('/restart', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'steady' }) });
    assert.deepEqual(restart.ids, [oldSteady]);
    assert.equal(restart.done, false);
    await proc!.sigkill();
    await serve();
    // the restart is carried out: the old replica replaced by a ready new one
    const after = await until('the restart carried out', 120_000, async () => {
      const m = await models();
      const s = m.steady?.replicas ?? [];
      return s.length === 1 && s[0]!.id !== oldSteady && s[0]!.phase === 'ready' ? m : null;
    }, { diag: logTail });
    const done = await admin<{ done: boolean }>(`/restart?ids=${oldSteady}&wait=true&timeout=30`);
    assert.equal(done.done, true);
    // the on-demand model is still served by the same replica, well after the restarted controller's first passes
    assert.deepEqual(after.good!.replicas.map((r) => r.id), [goodReplica.id]);
    while (Date.now() < lastRequestAt + (IDLE_S - 5) * 1000) {
      const m = await models();
      assert.deepEqual(m.good!.replicas.map((r) => `${r.id} ${r.phase}`), [`${goodReplica.id} ready`], 'the on-demand replica in use was stopped before its idle timeout');
      await new Promise((r) => setTimeout(r, 1000)); // deliberate: sampled every second through the idle timeout (real time is what is tested)
    }
    // and stopped once the idle timeout from the last request has passed
    await until('the idle on-demand replica stopped', 60_000, async () => (await models()).good?.replicas.length === 0, { diag: logTail });
    const stoppedAt = Date.now();
    assert.ok(stoppedAt >= lastRequestAt + IDLE_S * 1000, `stopped ${stoppedAt - lastRequestAt} ms after the last request (idle timeout ${IDLE_S} s)`);
    assert.match(out, /"reason":"idle"/);
    recordFault({ fault: '4 SIGKILL of the real controller', injected: 'SIGKILL of `llmgw serve` with an on-demand model in use and a `ctl restart` asked for', held: 'the restarted controller kept the on-demand replica until its idle timeout from the last request, and carried out the restart surge-first' });
    // nothing but the one surge replacement was started by the restarted controller
    assert.ok(out.split('"msg":"starting replica"').length - 1 <= 1, 'the restarted controller started at most the one surge replacement (none when the killed one had launched it)');
  });

  it('a truncated state file: serve starts anyway, names the file moved aside in ctl status, and the router serves', async () => {
    await proc?.sigkill();
    const statePath = join(fleet.stateDir, 'serve', 'state.json');
    writeFileSync(statePath, '{"version":2,"models":{');
    await serve();
    const status = await until('the controller serving again', 120_000, async () => {
      const s = await admin<{ stateError: { code: string; message: string; hint: string } | null; lastPass: unknown }>('/status');
      return s.lastPass ? s : null;
    }, { diag: logTail });
    assert.equal(status.stateError?.code, 'STATE_FILE_CORRUPT');
    assert.ok(status.stateError!.message.includes(statePath), status.stateError!.message);
    assert.ok(readdirSync(join(fleet.stateDir, 'serve')).some((f) => f.startsWith('state.json.corrupt-')), 'the bad file is kept aside');
    assert.match(out, /"msg":"state file not usable"/);
    const ctl = await runCli(['ctl', 'status', '--server', `http://127.0.0.1:${proc!.adminPort}`]);
    assert.match(ctl.stdout, /^state file\s+FAILED: .*STATE_FILE_CORRUPT/m);
    assert.match(ctl.stdout, /moved aside to .*state\.json\.corrupt-/);
    await until('steady served through the router', 120_000, async () => (await chat('steady')) === 200, { diag: logTail });
    recordFault({ fault: '8 a corrupt or truncated state file', injected: 'state.json truncated between two runs of `llmgw serve`', held: 'serve started, the file moved aside and named in the log, /admin/v1/status and `ctl status` (STATE_FILE_CORRUPT), the router served' });
  });

  it('SIGKILL right after "starting replica": the replica ends adopted or started once — never two, no orphan', async () => {
    await serving();
    await fleet.push({ 'models/fresh.yaml': modelYaml(fleet.models.good, ['replicas: 1']) }, 'fleet: add fresh');
    const mark = out.length;
    await admin('/models/steady/retry', { method: 'POST' }); // any admin call that runs a pass picks up the commit
    await until('fresh starting', 60_000, async () => /"model":"fresh"[^\n]*"msg":"starting replica"/.test(out.slice(mark)), { diag: logTail });
    await proc!.sigkill();
    await serve();
    let most = 0;
    await until('fresh ready', 120_000, async () => {
      most = Math.max(most, replicaProcesses(fleet.nodes[0]!.dataDir).filter((p) => p.startsWith('fresh-')).length);
      return (await models()).fresh?.phase === 'ready';
    }, { diag: logTail });
    assert.ok(most <= 1, `${most} llama-server processes of fresh at once`);
    const known = new Set((await admin<{ replicas: { id: string }[] }>('/replicas')).replicas.map((r) => r.id));
    assert.deepEqual(replicaProcesses(fleet.nodes[0]!.dataDir).filter((id) => !known.has(id)), [], 'a llama-server process the controller does not report (an orphan)');
    assert.equal(replicaProcesses(fleet.nodes[0]!.dataDir).filter((p) => p.startsWith('fresh-')).length, 1);
    recordFault({ fault: '4 SIGKILL of the real controller', injected: "SIGKILL of `llmgw serve` right after 'starting replica'", held: `the replica ended adopted or started once: at most ${most} llama-server of the model at a time, none the controller does not report` });
  });

  it("SIGKILL after a failing model's third failure: it parks at exactly 5 counted failures across both controllers", async () => {
    await serving();
    const before = out;
    await fleet.push({ 'models/kev.yaml': modelYaml(fleet.models.kev, ['replicas: 1']) }, 'fleet: add kev');
    await admin('/models/steady/retry', { method: 'POST' });
    let last: unknown = null;
    await until('kev failed 3 times', 120_000, async () => {
      last = await admin<{ model: { consecutiveFailures: number } }>('/models/kev');
      return (last as { model?: { consecutiveFailures: number } }).model!.consecutiveFailures >= 3;
    }, { diag: logTail }).catch((e: Error) => {
      throw new Error(`${e.message}\n--- /models/kev ---\n${JSON.stringify(last)}`);
    });
    await proc!.sigkill();
    const old = out.slice(before.length);
    await serve();
    const kev = await until('kev parked', 120_000, async () => {
      const m = (await admin<{ model: { parked: unknown; consecutiveFailures: number } }>('/models/kev')).model;
      return m.parked ? m : null;
    }, { diag: logTail });
    assert.equal(kev.consecutiveFailures, 5);
    const started = (log: string): string[] => [...log.matchAll(/"replica":"(kev-[^"]+)"[^\n]*"msg":"starting replica"/g)].map((m) => m[1]!);
    const failed = (log: string): string[] => [...log.matchAll(/"replica":"(kev-[^"]+)"[^\n]*"msg":"replica start failed"/g)].map((m) => m[1]!);
    // a start the node set back (a port taken in between: not the model's failure) is logged and not counted
    const setbacks = (log: string): string[] => [...log.matchAll(/"code":"([A-Z_]+)"[^\n]*"model":"kev"[^\n]*"msg":"replica start set back[^"]*"|"model":"kev"[^\n]*"code":"([A-Z_]+)"[^\n]*"msg":"replica start set back[^"]*"/g)].map((m) => m[1] ?? m[2]!);
    const setBack = [...setbacks(old), ...setbacks(out)];
    const inFlightAtKill = started(old).filter((id) => !failed(old).includes(id)).length;
    const total = started(old).length + started(out).length - setBack.length;
    assert.ok(total === 5 || (total === 6 && inFlightAtKill === 1), `${total} counted starts of kev (${inFlightAtKill} in flight at the kill; set back, not counted: ${setBack.join(', ') || 'none'})`);
    assert.ok(setBack.every((c) => !Reasons[c as keyof typeof Reasons]?.countsTowardParking), `a set-back start had a code that counts: ${setBack.join(', ')}`);
    await new Promise((r) => setTimeout(r, 1500)); // deliberate: a non-event (a parked model not started again) has nothing to wait on
    assert.equal(started(out).length + started(old).length - setBack.length, total, 'a parked model is not started again');
    recordFault({ fault: '4 SIGKILL of the real controller', injected: "SIGKILL of `llmgw serve` after a failing model's third failure", held: `parked at exactly 5 counted failures across both controllers (${total} counted starts, ${setBack.length} set back by the node)` });
  });
  it('SIGKILL during a model download: the next controller resumes it — one download at a time, the file verified, no partial left', async () => {
    await serving();
    const file = await writeTinyModel(join(fleet.stateDir, 'slow.gguf'), { seed: 9 });
    const origin = await startThrottledOrigin(file.path, { bytesPerSecond: 400_000 });
    try {
      const source = `source: ${origin.url}`;
      await fleet.push({ 'models/slowdl.yaml': [source, `sha256: ${file.sha256}`, 'profile: tiny', 'replicas: 1', 'memory: 200MiB', ''].join('\n') }, 'fleet: a model downloaded slowly');
      await admin('/models/steady/retry', { method: 'POST' });
      await until('the download a third of the way', 60_000, async () => origin.gets.some((g) => !g.done && g.sent > file.bytes / 3), { diag: logTail });
      await proc!.sigkill();
      await serve();
      let most = 0;
      await until('slowdl ready', 180_000, async () => {
        most = Math.max(most, origin.gets.filter((g) => !g.done).length);
        return (await models()).slowdl?.phase === 'ready';
      }, { diag: logTail });
      assert.ok(most <= 1, `${most} downloads of the file at once`);
      const m = (await admin<{ model: { consecutiveFailures: number } }>('/models/slowdl')).model;
      assert.equal(m.consecutiveFailures, 0, 'the kill counted as a failure of the model');
      const parts = spawnSync('find', [fleet.nodes[0]!.dataDir, '-name', '*.part'], { encoding: 'utf8' }).stdout.trim();
      assert.equal(parts, '', 'a partial download was left behind');
      const sent = origin.gets.reduce((n, g) => n + g.sent, 0);
      recordFault({
        fault: '4 SIGKILL of the real controller',
        injected: `SIGKILL of \`llmgw serve\` a third of the way through a ${Math.round(file.bytes / 1024)} KiB model download at 400 KB/s`,
        held: `the next controller got the model ready with 0 failures; at most ${most} download at a time (${origin.gets.length} GETs, ${Math.round(sent / 1024)} KiB sent in all); no partial left`,
      });
    } finally {
      await origin.close();
    }
  });

  it('no secret in anything the killed and restarted controllers printed or answered', async () => {
    await serving();
    const metrics = await (await fetch(`http://127.0.0.1:${proc!.adminPort}/metrics`)).text();
    scan.collect('metrics', metrics);
    scan.secret('engine key', readFileSync(join(fleet.stateDir, 'serve', 'engine-api-key'), 'utf8').trim());
    scan.secret('git token', fleet.git.token);
    scan.assertClean();
  });
});
