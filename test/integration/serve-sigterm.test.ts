/**
 * SIGTERM of a real `llmgw serve` (sshd node, real llama-server, fleet repo over git) with a stream in
 * flight through its router: the router accepts no new connection at once, the stream runs to its
 * end (within --shutdown-grace), then the process exits 0. With --etcd, the leader resigns at once:
 * the standby leads while the old leader's router is still draining its stream.
 */
import { strict as assert } from 'node:assert';
import { connect } from 'node:net';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { writeTinyModel } from '../fixtures/gguf.js';
import { startTestFleet, type TestFleet } from '../harness/controller.js';
import { startEtcd, type EtcdInstance } from '../harness/etcd.js';
import { logLines, spawnServe, type ServeProc, procsDiag } from '../harness/serve-proc.js';
import { until } from '../harness/wait.js';

interface ModelJson {
  name: string;
  phase: string;
}
interface StatusJson {
  leader: boolean;
}

/** A long stream (6000 tokens, EOS ignored: some seconds): its first chunk, then the rest on demand. */
async function openStream(p: ServeProc): Promise<{ first: string; rest: () => Promise<{ text: string; endedAt: number }> }> {
  const r = await fetch(`http://127.0.0.1:${p.routerPort}/v1/chat/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'long', stream: true, max_tokens: 6000, ignore_eos: true, messages: [{ role: 'user', content: 'Tell me a very long story.' }] }),
  });
  assert.equal(r.status, 200);
  const reader = r.body!.getReader();
  const dec = new TextDecoder();
  const firstChunk = await reader.read();
  const first = dec.decode(firstChunk.value);
  return {
    first,
    rest: async () => {
      let text = first;
      for (let c = await reader.read(); !c.done; c = await reader.read()) text += dec.decode(c.value, { stream: true });
      return { text, endedAt: Date.now() };
    },
  };
}

/** True when a TCP connection to the port is refused. */
function refused(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve(false);
    });
    s.once('error', (e: NodeJS.ErrnoException) => resolve(e.code === 'ECONNREFUSED'));
  });
}

const exitOf = (p: ServeProc): Promise<{ code: number | null; at: number }> =>
  p.alive() ? new Promise((r) => p.child.once('exit', (code) => r({ code, at: Date.now() }))) : Promise.resolve({ code: p.child.exitCode, at: Date.now() });

/** The fleet: one always-on model with a context long enough for a stream of some seconds. */
async function longFleet(): Promise<TestFleet> {
  const fleet = await startTestFleet({ nodes: 1 });
  const long = await writeTinyModel(join(fleet.stateDir, '..', 'models', 'long.gguf'), { seed: 21, contextLength: 8192 });
  const files = fleet.baseFiles();
  delete files['models/good.yaml'];
  delete files['models/kev.yaml'];
  delete files['models/huge.yaml'];
  files['profiles/long.yaml'] = ['engine: llama-cpp@test', 'ctx_size: 8192', 'threads: 1', 'parallel: 1', 'memory_overhead: 64MiB', 'cache_ram: 16MiB', 'start_timeout: 60s', ''].join('\n');
  files['models/long.yaml'] = [`source: file://${long.path}`, `sha256: ${long.sha256}`, 'profile: long', 'replicas: 1', ''].join('\n');
  await fleet.push(files, 'fleet: one model for long streams');
  return fleet;
}

async function ready(p: ServeProc, diag: () => string): Promise<void> {
  await until('model long ready', 120_000, async () => {
    const r = await p.admin<{ models: ModelJson[] }>('/models');
    return r.models.find((m) => m.name === 'long')?.phase === 'ready';
  }, { diag });
}

describe('SIGTERM of llmgw serve with a stream in flight', { timeout: 10 * 60_000 }, () => {
  // a fleet each (a node keeps the owner record of the controller that last drove it)
  const fleets: TestFleet[] = [];
  let etcd: EtcdInstance | null = null;
  const procs: ServeProc[] = [];
  const diag = (): string => procsDiag(procs, 3000);

  after(async () => {
    await Promise.all(procs.map((p) => p.sigkill()));
    await Promise.all(fleets.map((f) => f.cleanup()));
    await etcd?.stop();
  });

  it('one instance: new connections are refused at once, the stream completes, then the process exits 0', async () => {
    const fleet = await longFleet();
    fleets.push(fleet);
    const p = await spawnServe({ name: 'solo', fleet, args: ['--shutdown-grace', '60s'] });
    procs.push(p);
    await ready(p, diag);
    const stream = await openStream(p);
    assert.match(stream.first, /^data: /);
    const exited = exitOf(p);
    const t0 = Date.now();
    p.child.kill('SIGTERM');
    const rest = stream.rest();
    let ended = false;
    void rest.then(() => (ended = true));
    await until('new connections refused', 10_000, () => refused(p.routerPort), { diag });
    assert.equal(ended, false, 'the router stopped accepting while the stream was still running');
    assert.ok(p.alive(), 'the process waits for the stream');
    const { text, endedAt } = await rest;
    assert.ok(text.trimEnd().endsWith('data: [DONE]'), `the stream ran to its end: …${text.slice(-300)}`);
    assert.doesNotMatch(text, /"error"/);
    const chunks = text.split('\n\n').filter((e) => e.startsWith('data: {'));
    assert.ok(chunks.length > 100, `${chunks.length} chunks`);
    const { code, at } = await exited;
    assert.equal(code, 0, diag());
    assert.ok(at >= endedAt - 50, 'the process exited after the stream ended');
    assert.ok(endedAt - t0 < 60_000, 'within the grace');
    console.log(`stream ended ${endedAt - t0} ms after SIGTERM; the process exited ${at - endedAt} ms after it`);
    const lines = logLines(p.out());
    assert.ok(lines.some((l) => l.msg === 'shut down'), diag());
  });

  it('with --etcd: the leader resigns at once, a standby leads while the old leader\'s router still drains its stream', async () => {
    const fleet = await longFleet();
    fleets.push(fleet);
    etcd = await startEtcd();
    const HA = ['--etcd', etcd.endpoint, '--lease-ttl', '15s', '--renew-deadline', '10s', '--retry-period', '1s', '--shutdown-grace', '60s'];
    const a = await spawnServe({ name: 'ha-a', fleet, args: HA });
    procs.push(a);
    await until('a leads', 90_000, async () => (await a.admin<StatusJson>('/status')).leader, { diag });
    const b = await spawnServe({ name: 'ha-b', fleet, args: HA });
    procs.push(b);
    await ready(a, diag);
    await until('b routes as a standby', 90_000, async () => {
      const r = await b.admin<{ models: ModelJson[] }>('/models');
      return r.models.find((m) => m.name === 'long')?.phase === 'ready';
    }, { diag });
    const stream = await openStream(a);
    const exited = exitOf(a);
    const t0 = Date.now();
    a.child.kill('SIGTERM');
    const rest = stream.rest();
    let ended = false;
    void rest.then(() => (ended = true));
    // the lease is 15 s: a standby leading within a few seconds means the leader resigned, it did not expire
    await until('b leads', 10_000, async () => (await b.admin<StatusJson>('/status')).leader, { diag });
    const tookOver = Date.now();
    assert.ok(tookOver - t0 < 10_000);
    assert.equal(ended, false, 'b took over while a\'s router still drained its stream');
    assert.ok(a.alive());
    const { text, endedAt } = await rest;
    console.log(`b led ${tookOver - t0} ms after SIGTERM of a; a's stream ended ${endedAt - t0} ms after`);
    assert.ok(text.trimEnd().endsWith('data: [DONE]'), `the stream ran to its end: …${text.slice(-300)}`);
    assert.equal((await exited).code, 0, diag());
    // and b serves the model
    const r = await fetch(`http://127.0.0.1:${b.routerPort}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'long', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] }) });
    assert.equal(r.status, 200);
  });
});
