/**
 * #40: a model larger than any node runs as a llama.cpp RPC group. Through a real `llmgw serve` on
 * two sshd nodes on loopback, the real llama-server and rpc-server (built with GGML_RPC), a tiny
 * GGUF and the official `openai` client:
 * - a `placement: {spread: rpc}` model whose declared need exceeds each node's free memory but fits
 *   their sum runs as a head on one node and an rpc-server on the other, bound to 127.0.0.1 only on
 *   a port of its node's range; it answers chats through the router; a model that fits one node is
 *   not split;
 * - `kill -9` of the worker's rpc-server while a stream runs: the stream ends with an error, never
 *   hanging; the group is seen failed within 10 s with RPC_WORKER_EXITED, replaced by a new group,
 *   which answers;
 * - a definition change with no room beside the group: the old group drains and stops (head and
 *   worker), then a new group starts and answers;
 * - the model removed from the fleet: its head and worker are stopped, and nothing listens on the
 *   worker's port;
 * - nodes whose installs of the engine version are different builds (what --version names) form no
 *   group: the model is unplaceable with both builds named, and nothing is started;
 * - a worker that cannot start (an engine without rpc-server): the group's start fails, counted once,
 *   with the worker's host named, and no head is launched.
 */
import { strict as assert } from 'node:assert';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { groupText, renderReplicas } from '../../src/format/ctl-format.js';
import type { PageView } from '../../src/ui/view.js';
import { groupLayerSplit } from '../../src/reconciler/group-split.js';
import type { ReplicasJson } from '../../src/wire/shape.js';
import { modelYaml, startTestFleet, type TestFleet } from '../harness/controller.js';
import { spawnServe, type ServeProc } from '../harness/serve-proc.js';
import { until } from '../harness/wait.js';

let fleet: TestFleet;
let serve: ServeProc;
const diag = (): string => serve?.out().slice(-6000) ?? '';
const cleanups: (() => void)[] = [];

interface ModelsJson { models: { name: string; phase: string; replicas: { id: string; node: string; phase: string }[]; unplaceable: { code: string; reason: string } | null; consecutiveFailures: number; lastError: { code: string; message: string } | null }[] }
interface EventsJson { events: { seq: number; kind: string; model: string | null; replica: string | null; code: string | null; message: string }[] }
interface WorkerState { id: string; group: string; host: string; port: number; pid: number }

/** Local addresses of the sockets listening on `port` (`ss -ltn`: this machine is both nodes). */
function listeningOn(port: number): string[] {
  return execFileSync('ss', ['-ltnH'], { encoding: 'utf8' }).split('\n')
    .map((l) => l.trim().split(/\s+/)[3] ?? '')
    .filter((local) => local.endsWith(`:${port}`));
}

/** The RPC workers recorded on each node (rpc/<id>/state.json), with the node's index. */
function workers(): (WorkerState & { node: number })[] {
  return fleet.nodes.flatMap((n, i) => {
    const dir = join(n.dataDir, 'rpc');
    if (!existsSync(dir)) return [];
    return readdirSync(dir).flatMap((id) => {
      const f = join(dir, id, 'state.json');
      return existsSync(f) ? [{ ...(JSON.parse(readFileSync(f, 'utf8')) as WorkerState), node: i + 1 }] : [];
    });
  });
}

/** A replica's argv as its node recorded it. */
function argvOf(node: number, replica: string): string[] {
  return (JSON.parse(readFileSync(join(fleet.nodes[node - 1]!.dataDir, 'replicas', replica, 'state.json'), 'utf8')) as { argv: string[] }).argv;
}

/** A push, then a pass that syncs it (the poll is 1h: a retry of the healthy small model asks for one and answers after it). */
async function pushAndSync(files: Record<string, string | null>, message: string): Promise<void> {
  await fleet.push(files, message);
  await serve.admin('/models/small/retry', { method: 'POST' });
}

/** The big model's group `before` replaced: one new replica ready, only its worker running, and it answers. */
async function replacedBy(before: string): Promise<void> {
  await until('a new group ready, the old one gone', 120_000, async () => {
    const m = await modelOf('big');
    return m?.phase === 'ready' && m.replicas.length === 1 && m.replicas[0]!.id !== before && m.replicas[0]!.phase === 'ready';
  }, { diag });
  const now = (await modelOf('big'))!.replicas[0]!.id;
  await until('only the new group\'s worker', 30_000, async () => {
    const ws = workers();
    return ws.length === 1 && ws[0]!.id === `${now}.w1`;
  }, { diag });
  const answer = await new OpenAI({ apiKey: 'none', baseURL: `http://127.0.0.1:${serve.routerPort}/v1`, maxRetries: 0, timeout: 60_000 }).chat.completions.create({ model: 'big', messages: [{ role: 'user', content: 'hello' }], max_tokens: 4, temperature: 0 });
  assert.equal(typeof (answer.choices[0]?.message.content ?? ''), 'string');
}

const modelOf = async (name: string): Promise<ModelsJson['models'][number] | undefined> => (await serve.admin<ModelsJson>('/models')).models.find((m) => m.name === name);

before(async () => {
  fleet = await startTestFleet({ nodes: 2 });
  const files = fleet.baseFiles();
  for (const f of Object.keys(files)) if (f.startsWith('models/')) delete files[f];
  // the poll stays at the harness's 1h: a dead worker is seen within 10 s by the groups' own watch
  files['engines/llama-cpp.yaml'] += '    rpc: true\n';
  // each node declares 1 GiB: 768 MiB free after the reserve; the big model needs 1.2 GiB, the small one 100 MiB
  for (const n of ['node-1', 'node-2']) files[`nodes/${n}.yaml`] += 'capacity: { memory: 1GiB }\n';
  // room for a long answer: a stream still runs when its worker is killed
  files['profiles/long.yaml'] = files['profiles/tiny.yaml']!.replace('ctx_size: 256', 'ctx_size: 2048');
  files['models/big.yaml'] = modelYaml(fleet.models.good, ['replicas: 1', 'memory: 1200MiB', 'placement: { spread: rpc, max_hosts: 2 }']).replace('profile: tiny', 'profile: long');
  files['models/small.yaml'] = modelYaml(fleet.models.good2, ['replicas: 1', 'memory: 100MiB', 'placement: { spread: rpc }']);
  await fleet.push(files, 'fleet: a model no node holds alone, split over two; one that fits a node');
  serve = await spawnServe({ name: 'rpc-group', fleet });
  await until('both models ready', 120_000, async () => (await serve.admin<ModelsJson>('/models')).models.filter((m) => m.phase === 'ready').length === 2, { diag });
});

after(async () => {
  await serve?.sigkill();
  await fleet?.cleanup();
  for (const c of cleanups) c();
});

describe('an RPC group', () => {
  const openai = (): OpenAI => new OpenAI({ apiKey: 'none', baseURL: `http://127.0.0.1:${serve.routerPort}/v1`, maxRetries: 0, timeout: 60_000 });
  const chat = async (model: string): Promise<string> => (await openai().chat.completions.create({ model, messages: [{ role: 'user', content: 'hello' }], max_tokens: 4, temperature: 0 })).choices[0]?.message.content ?? '';

  it('runs a head and a worker on two nodes, the worker bound to the node address only, and answers chats', async () => {
    const big = (await modelOf('big'))!;
    assert.equal(big.replicas.length, 1);
    const head = big.replicas[0]!;
    const ws = workers();
    assert.equal(ws.length, 1, `one rpc worker in all: ${JSON.stringify(ws)}`);
    const w = ws[0]!;
    assert.equal(w.id, `${head.id}.w1`);
    assert.equal(w.group, 'big');
    assert.notEqual(`node-${w.node}`, head.node, 'the worker runs on the other node');
    // bound to the node's address (no listen_address: 127.0.0.1) and nothing else
    assert.deepEqual(listeningOn(w.port), [`127.0.0.1:${w.port}`]);
    const argv = argvOf(Number(head.node.slice(5)), head.id);
    assert.equal(argv[argv.indexOf('--rpc') + 1], `127.0.0.1:${w.port}`);
    assert.equal(typeof (await chat('big')), 'string');
    // the head keeps the first of the tiny model's 4 layers in proportion to its share, the worker takes the rest and the output layer
    const shares = (await serve.admin<ReplicasJson>('/replicas')).replicas.find((r) => r.id === head.id)!.group!;
    const want = groupLayerSplit(shares, 4);
    assert.equal(argv[argv.indexOf('-ngl') + 1], String(want.gpuLayers));
    assert.equal(want.headLayers, 2, 'equal shares: half the layers each');
    // the admin API (and ctl replicas, which renders it) shows the group's hosts and each one's share
    const rs = await serve.admin<ReplicasJson>('/replicas');
    const shown = rs.replicas.find((r) => r.id === head.id)!;
    assert.deepEqual(shown.group?.map((h) => [h.node, h.role, h.worker ?? null]), [[head.node, 'head', null], [`node-${w.node}`, 'worker', w.id]]);
    assert.equal(shown.group!.reduce((n, h) => n + h.bytes, 0), 1200 * 1024 * 1024);
    assert.match(renderReplicas(rs), new RegExp(`RPC GROUP[\\s\\S]*${head.node} head [\\d.]+ MiB \\+ node-${w.node} worker [\\d.]+ MiB`));
    // and the metrics, a series per host
    const text = await (await fetch(`http://127.0.0.1:${serve.adminPort}/metrics`)).text();
    for (const h of shown.group!) assert.match(text, new RegExp(`^llmgw_rpc_group_host_bytes\\{[^}]*node="${h.node}"[^}]*\\} ${h.bytes}$`, 'm'));
    // the page: each node's bar takes its host's share, and the model's card names the group
    const page = await serve.admin<PageView>('/view');
    for (const h of shown.group!) {
      const on = page.nodes.find((n) => n.name === h.node)!.replicas.find((r) => r.id === head.id);
      assert.equal(on?.bytes, h.bytes, `${h.node}'s bar takes its share`);
      assert.match(on!.text, new RegExp(`^big \\(ready, rpc ${h.role}, [\\d.]+ MiB\\)$`));
    }
    const card = page.groups.flatMap((g) => g.models).find((m) => m.name === 'big')!;
    assert.equal(card.replicas[0]!.group, groupText(shown.group!));
    // the small model fits a node alone: never split
    const small = (await modelOf('small'))!;
    assert.equal(small.replicas.length, 1);
    assert.ok(!argvOf(Number(small.replicas[0]!.node.slice(5)), small.replicas[0]!.id).includes('--rpc'));
  });

  it('a worker killed under a stream: the stream ends with an error, the group is seen failed within 10 s and replaced', async () => {
    const before = (await modelOf('big'))!.replicas[0]!.id;
    const w = workers()[0]!;
    const seqBefore = Math.max(0, ...(await serve.admin<EventsJson>('/events?model=big')).events.map((e) => e.seq));
    // a long stream on the head, and the worker killed under it once its first token is out
    const stream = await openai().chat.completions.create({ model: 'big', messages: [{ role: 'user', content: 'tell me a long story' }], max_tokens: 1800, temperature: 0, stream: true });
    let first: () => void = () => {};
    const started = new Promise<void>((r) => (first = r));
    const reading = (async () => {
      let chunks = 0;
      try {
        for await (const c of stream) {
          if (c.choices[0]?.delta.content) first();
          chunks++;
        }
        return { chunks, error: null as unknown };
      } catch (e) {
        return { chunks, error: e };
      } finally {
        first();
      }
    })();
    await started;
    process.kill(w.pid, 'SIGKILL');
    const killedAt = Date.now();
    const seen = await until('the group seen failed with the worker\'s reason', 10_000, async () => (await serve.admin<EventsJson>('/events?model=big')).events.find((e) => e.seq > seqBefore && e.code === 'RPC_WORKER_EXITED'), { diag });
    const detectMs = Date.now() - killedAt;
    console.log(`# worker killed: seen failed after ${detectMs} ms: ${seen.message}`);
    const r = await reading;
    // the head aborted at its next token (or was stopped): the stream ends with an error event, which the client raises
    assert.ok(r.error instanceof OpenAI.APIError, `the stream ended with an error event, after ${r.chunks} chunks: ${String(r.error)}`);
    console.log(`# the stream: ${r.chunks} chunks, then: ${String(r.error)}`);
    await replacedBy(before);
  });

  it('a definition change with no room beside the group: the old group drains and stops, a new one starts', async () => {
    const before = (await modelOf('big'))!.replicas[0]!.id;
    await pushAndSync({ 'profiles/long.yaml': fleet.baseFiles()['profiles/tiny.yaml']!.replace('ctx_size: 256', 'ctx_size: 1024') }, 'fleet: the big model\'s context shrinks');
    await replacedBy(before);
  });

  it('the model removed: its head and its worker stop, and nothing listens on the worker\'s port', async () => {
    const w = workers()[0]!;
    await pushAndSync({ 'models/big.yaml': null }, 'fleet: the big model goes');
    await until('the group gone', 60_000, async () => (await modelOf('big')) === undefined && workers().length === 0, { diag });
    assert.deepEqual(listeningOn(w.port), []);
  });

  it('hosts whose builds of the engine differ form no group, and the reason names both builds', async () => {
    // the same path on each node holding another build, as when llama-server was installed by hand:
    // here one binary behind a wrapper whose --version answers for the node it is reached on (sshd's port)
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-builds-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const real = fleet.engineBinary;
    writeFileSync(join(dir, 'llama-server'), `#!/bin/sh
if [ "$1" = --version ]; then
  case "$SSH_CONNECTION" in *" ${fleet.nodes[1]!.port}") printf 'version: 9.9.9 (build 2, commit feedbee)\\nbuilt by hand\\n'; exit 0 ;; esac
fi
exec ${real} "$@"
`, { mode: 0o755 });
    symlinkSync(join(dirname(real), 'rpc-server'), join(dir, 'rpc-server'));
    await pushAndSync({
      'engines/handmade.yaml': ['versions:', '  v1:', `    path: ${join(dir, 'llama-server')}`, '    rpc: true', ''].join('\n'),
      'profiles/handmade.yaml': fleet.baseFiles()['profiles/tiny.yaml']!.replace('llama-cpp@test', 'handmade@v1'),
      'models/split.yaml': modelYaml(fleet.models.good, ['replicas: 1', 'memory: 1200MiB', 'placement: { spread: rpc }']).replace('profile: tiny', 'profile: handmade'),
    }, 'fleet: a model split over nodes whose engines differ');
    const m = await until('the model unplaceable, naming both builds', 60_000, async () => {
      const x = await modelOf('split');
      return x?.unplaceable?.code === 'PLACEMENT_GROUP_VERSIONS' ? x : null;
    }, { diag });
    assert.match(m.unplaceable!.reason, /^a group's hosts run one build of handmade@v1, and these would not: .+; .+: install the same build on every host$/);
    assert.match(m.unplaceable!.reason, /0\.4\.0-dev \(build 1, commit [0-9a-f]+\) on node-1( \(head\))?[;:]/);
    assert.match(m.unplaceable!.reason, /9\.9\.9 \(build 2, commit feedbee\) on node-2( \(head\))?[;:]/);
    assert.equal(m.replicas.length, 0);
    assert.equal(workers().length, 0, 'no worker started');
    await pushAndSync({ 'models/split.yaml': null }, 'fleet: the split model goes');
  });

  it('a group whose worker cannot start: the start fails once, with the worker host\'s reason, and nothing is left running', async () => {
    // an engine that says it carries rpc-server (rpc: true) and does not: the worker's start fails on its node
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-norpc-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    symlinkSync(fleet.engineBinary, join(dir, 'llama-server'));
    await pushAndSync({
      'engines/norpc.yaml': ['versions:', '  v1:', `    path: ${join(dir, 'llama-server')}`, '    rpc: true', ''].join('\n'),
      'profiles/norpc.yaml': fleet.baseFiles()['profiles/tiny.yaml']!.replace('llama-cpp@test', 'norpc@v1'),
      'models/broken.yaml': modelYaml(fleet.models.good, ['replicas: 1', 'memory: 1200MiB', 'placement: { spread: rpc }']).replace('profile: tiny', 'profile: norpc'),
    }, 'fleet: a model split over nodes whose engine has no rpc-server');
    const m = await until('the group\'s start failed', 60_000, async () => {
      const x = await modelOf('broken');
      return x?.lastError ? x : null;
    }, { diag });
    assert.equal(m.lastError!.code, 'ENGINE_NO_RPC');
    assert.match(m.lastError!.message, /node-\d/, 'the message names the worker\'s node');
    // each failed start of the group counts once (the events of its failures match the count)
    const failures = (await serve.admin<EventsJson>('/events?model=broken')).events.filter((e) => e.code === 'ENGINE_NO_RPC').length;
    const now = (await modelOf('broken'))!;
    assert.ok(failures >= 1 && now.consecutiveFailures >= 1 && now.consecutiveFailures <= failures, `failures counted ${now.consecutiveFailures}, events ${failures}`);
    assert.equal(workers().length, 0, 'no worker left running');
    assert.ok(fleet.nodes.every((n) => !existsSync(join(n.dataDir, 'replicas')) || readdirSync(join(n.dataDir, 'replicas')).every((id) => !id.startsWith('broken-'))), 'no head was launched');
  });
});
