/**
 * `llmgw ctl rollout promote|abort` through an HA standby (#34 item 5): two real `llmgw serve`
 * processes on one real etcd, an sshd node running real llama-server replicas of a tiny model, the
 * fleet repo behind git http-backend, and `llmgw ctl` pointed at the STANDBY's admin API only.
 *
 * A definition change whose check fails (the push announced by a webhook to the standby, which
 * forwards the pass) is held; `ctl rollout MODEL` on the standby shows it from the published view.
 * `ctl rollout abort` on the standby is forwarded to the leader through etcd: rolled back, the verdict
 * naming ctl's user and the standby it came through, in the state record in etcd. `ctl rollout
 * promote` on the standby then promotes it, and the new revision takes the model.
 */
import { strict as assert } from 'node:assert';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Etcd3 } from 'etcd3';
import { readDoc } from '../../src/ha/keyed-store.js';
import { stateFromEntries } from '../../src/ha/state-layout.js';
import type { RolloutOneJson } from '../../src/wire/shape.js';
import { writeTinyModel, type TinyModelFile } from '../fixtures/gguf.js';
import { runCli } from '../harness/cli.js';
import { modelYaml, startTestFleet, type TestFleet } from '../harness/controller.js';
import { startEtcd, type EtcdInstance } from '../harness/etcd.js';
import { agreedLeader, logLines, procsDiag, spawnServe, type ServeProc } from '../harness/serve-proc.js';
import { until } from '../harness/wait.js';

const WEBHOOK_SECRET = 'ha-rollout-override-webhook-secret';

let etcd: EtcdInstance;
let etcdClient: Etcd3;
let fleet: TestFleet;
let chat: TinyModelFile;
let procs: ServeProc[] = [];
let leader: ServeProc;
let standby: ServeProc;

const diag = (): string => procsDiag(procs, 4000);

function files(cacheRam: string, matches: string): Record<string, string | null> {
  const f: Record<string, string | null> = fleet.baseFiles();
  delete f['models/kev.yaml'];
  delete f['models/huge.yaml'];
  delete f['models/good.yaml'];
  f['profiles/chat.yaml'] = ['engine: llama-cpp@test', 'ctx_size: 1024', 'threads: 1', 'parallel: 2', 'memory_overhead: 64MiB', `cache_ram: ${cacheRam}`, 'start_timeout: 60s', ''].join('\n');
  const check = ['rollout:', '  checks:', '    - name: answers', '      request: { messages: [{ role: user, content: "What is 2+2?" }], max_tokens: 6 }', `      expect: { status: 200, matches: "${matches}" }`];
  f['models/chat.yaml'] = modelYaml(chat, ['replicas: 1', ...check]).replace('profile: tiny', 'profile: chat');
  return f;
}

/** `llmgw ctl` against the standby's admin API only. */
const ctlStandby = (...args: string[]) => runCli(['ctl', '--server', `http://127.0.0.1:${standby.adminPort}`, ...args], undefined, { ...process.env, USER: 'ops', LLMGW_ADMIN_TOKEN: '' });
const rolloutOn = (p: ServeProc) => p.admin<RolloutOneJson>('/models/chat/rollout');

interface ModelLite {
  name: string;
  digest: string;
  ready: number;
  replicas: { digest: string; phase: string }[];
}
const chatOn = async (p: ServeProc): Promise<ModelLite | undefined> => (await p.admin<{ models: ModelLite[] }>('/models')).models.find((m) => m.name === 'chat');

async function etcdRollout(): Promise<{ phase: string; verdict?: { code: string; message: string } } | undefined> {
  const { view } = await readDoc(etcdClient, '/llmgw/state');
  return view === null ? undefined : stateFromEntries(view).models.chat?.rollout;
}

before(async () => {
  [etcd, fleet] = await Promise.all([startEtcd(), startTestFleet({ nodes: 1 })]);
  etcdClient = new Etcd3({ hosts: etcd.endpoint });
  chat = await writeTinyModel(join(fleet.stateDir, '..', 'models', 'chat.gguf'), { seed: 9, embeddingLength: 256, layers: 4, tensorType: 'f16' });
  await fleet.push(files('16MiB', '.'), 'chat, with a rollout check');
  const secret = join(fleet.secretsDir, 'webhook-secret');
  writeFileSync(secret, WEBHOOK_SECRET, { mode: 0o600 });
  const args = ['--etcd', etcd.endpoint, '--lease-ttl', '4s', '--renew-deadline', '3s', '--retry-period', '1s', '--webhook-secret-file', secret];
  procs = await Promise.all(['a', 'b'].map((name) => spawnServe({ name, fleet, args })));
  leader = (await until('one agreed leader', 90_000, () => agreedLeader(procs), { diag })).proc;
  standby = procs.find((p) => p !== leader)!;
  await until('chat ready, as the standby sees it', 180_000, async () => {
    const m = await chatOn(standby);
    return m?.ready === 1 && (await rolloutOn(standby)).rollout === null;
  }, { diag });
});

after(async () => {
  await Promise.all(procs.map((p) => p.sigkill()));
  etcdClient?.close();
  await fleet?.cleanup();
  await etcd?.stop();
});

describe('ctl rollout promote|abort through an HA standby', { timeout: 10 * 60_000 }, () => {
  it('held by a failed check; abort and promote asked on the standby are carried out by the leader', async () => {
    const stable = (await chatOn(standby))!.digest;
    await fleet.push(files('17MiB', '^this will never match$'), 'chat: a new definition whose check fails');
    // the push, announced to the standby: it forwards the pass to the leader
    const hook = await fetch(`http://127.0.0.1:${standby.adminPort}/admin/v1/webhook`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-gitlab-event': 'Push Hook', 'x-gitlab-token': WEBHOOK_SECRET },
      body: JSON.stringify({ ref: 'refs/heads/main' }),
    });
    assert.equal(hook.status, 202);
    await until('held, as the standby shows it', 180_000, async () => (await rolloutOn(standby)).rollout?.phase === 'held', { diag });
    const held = await ctlStandby('rollout', 'chat');
    assert.equal(held.code, 0, held.stderr);
    assert.match(held.stdout, /^phase\s+HELD since /m);
    assert.match(held.stdout, /\[ROLLOUT_CHECK_FAILED\]$/m);

    const abort = await ctlStandby('rollout', 'abort', 'chat');
    assert.equal(abort.code, 0, `${abort.stderr}\n${diag()}`);
    assert.match(abort.stdout, /^chat: rollout of revision [0-9a-f]{12} aborted/);
    assert.match(abort.stdout, /verdict: rollout aborted during the checks by llmgw ctl \(ops@[^)]+\) \(via [^)]+\); the stable revision serves \[ROLLOUT_ABORTED\]/);
    // carried out by the leader: its log says who, and the state record in etcd holds it
    const line = logLines(leader.out()).find((l) => l.msg === 'rollout aborted by an operator');
    assert.ok(line, `the leader logged the abort\n${diag()}`);
    assert.equal(line.model, 'chat');
    assert.match(String(line.by), /^llmgw ctl \(ops@[^)]+\) \(via [^)]+\)$/);
    assert.equal(logLines(standby.out()).some((l) => l.msg === 'rollout aborted by an operator'), false, 'the standby did not act itself');
    const inEtcd = await etcdRollout();
    assert.equal(inEtcd?.phase, 'rolled_back');
    assert.equal(inEtcd?.verdict?.code, 'ROLLOUT_ABORTED');
    await until('the standby shows it rolled back', 30_000, async () => (await rolloutOn(standby)).rollout?.phase === 'rolled_back', { diag });

    const promote = await ctlStandby('rollout', 'promote', 'chat', '-o', 'json');
    assert.equal(promote.code, 0, `${promote.stderr}\n${diag()}`);
    const body = JSON.parse(promote.stdout) as { outcome: string; rollout: { phase: string; digest: string } };
    assert.equal(body.outcome, 'promoted');
    assert.equal(body.rollout.phase, 'promoted');
    assert.notEqual(body.rollout.digest, stable);
    await until('the promoted revision took the model, as the standby sees it', 180_000, async () => {
      const m = await chatOn(standby);
      return m !== undefined && m.digest === body.rollout.digest && m.ready === 1 && m.replicas.every((r) => r.digest === m.digest && r.phase === 'ready') && (await rolloutOn(standby)).rollout === null;
    }, { diag });

    const none = await ctlStandby('rollout', 'promote', 'chat');
    assert.equal(none.code, 1);
    assert.match(none.stderr, /\[ROLLOUT_NONE\]/);
  });
});
