/**
 * bench:rollout — routine operations under streaming load on the real stack (two sshd nodes, real
 * llama-server, git http-backend, the router in front of the controller, six `openai` streams of a
 * few seconds each, maxRetries 0): for a definition change, a restart, a 2 → 1 scale-down, a
 * schedule change and a restart with no room to surge (drain_grace 15s), the requests sent, cut and
 * failed, the operation's duration and the most llama-server processes seen. Prints, never asserts.
 */
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import OpenAI from 'openai';
import { stopIds } from '../src/reconciler/stops.js';
import { buildRouter } from '../src/router/app.js';
import { writeTinyModel } from '../test/fixtures/gguf.js';
import { modelYaml, startTestFleet } from '../test/harness/controller.js';
import { replicaProcesses } from '../test/harness/replica-procs.js';
import { sampleProcesses, streamLoad } from '../test/harness/stream-load.js';

const fleet = await startTestFleet({ nodes: 2 });
const chat = await writeTinyModel(join(fleet.stateDir, '..', 'models', 'chat.gguf'), { seed: 11, embeddingLength: 512, layers: 8, tensorType: 'f16' });
const files = (o: { replicas?: number; cacheRam?: string; extra?: string[]; drainGrace?: string; capacity?: [string, string] } = {}): Record<string, string> => {
  const f = fleet.baseFiles();
  delete f['models/kev.yaml'];
  delete f['models/huge.yaml'];
  delete f['models/good.yaml'];
  f['fleet.yaml'] = ['poll_interval: 1h', 'placement_reserve: 256MiB', 'stop_grace: 10s', `drain_grace: ${o.drainGrace ?? '30s'}`, ''].join('\n');
  f['profiles/stream.yaml'] = ['engine: llama-cpp@test', 'ctx_size: 2048', 'threads: 1', 'parallel: 4', 'memory_overhead: 64MiB', `cache_ram: ${o.cacheRam ?? '16MiB'}`, 'start_timeout: 60s', ''].join('\n');
  f['models/chat.yaml'] = modelYaml(chat, [`replicas: ${o.replicas ?? 2}`, ...(o.extra ?? [])]).replace('profile: tiny', 'profile: stream');
  if (o.capacity) {
    f['nodes/node-1.yaml'] = `${f['nodes/node-1.yaml']!}capacity: { memory: ${o.capacity[0]} }\n`;
    f['nodes/node-2.yaml'] = `${f['nodes/node-2.yaml']!}capacity: { memory: ${o.capacity[1]} }\n`;
  }
  return f;
};
await fleet.push(files(), 'chat: two replicas');
const ctl = await fleet.startController();
const router = buildRouter({ fleet: ctl.reconciler, auth: { required: false } });
await router.listen({ port: 0, host: '127.0.0.1' });
const client = new OpenAI({ baseURL: `http://127.0.0.1:${(router.server.address() as AddressInfo).port}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });
const dirs = fleet.nodes.map((n) => n.dataDir);
const settled = (n: number) => (): boolean => {
  const m = ctl.reconciler.model('chat');
  const procs = dirs.reduce((s, d) => s + replicaProcesses(d).length, 0);
  return !!m && m.replicas.length === n && m.replicas.every((r) => r.phase === 'ready' && r.digest === m.spec.digest) && procs === n && stopIds(ctl.reconciler.record()).length === 0;
};
await ctl.until('two replicas', 120_000, settled(2));

const rows: string[] = [];
async function measure(what: string, op: () => Promise<unknown>, n: number): Promise<void> {
  const l = streamLoad(client, 'chat', 6);
  const procs = sampleProcesses(dirs);
  await sleep(2500);
  const t0 = performance.now();
  await op();
  await ctl.reconciler.requestPass('webhook');
  await ctl.until(`${what} begins`, 30_000, () => !settled(n)()).catch(() => undefined);
  await ctl.until(`${what} settles`, 180_000, settled(n));
  const ms = performance.now() - t0;
  await sleep(1500);
  const t = await l.stop();
  const d = t.spans.map(([s, e]) => e - s).sort((a, b) => a - b);
  rows.push(`| ${what} | ${t.sent} | ${t.cut} | ${t.failed} | ${(ms / 1000).toFixed(1)} s | ${procs.stop()} | ${(d[0]! / 1000).toFixed(1)}–${(d.at(-1)! / 1000).toFixed(1)} s |`);
}

await measure('definition change (2 replicas)', () => fleet.push(files({ cacheRam: '17MiB' }), 'new definition'), 2);
await measure('restart --model (2 replicas)', () => ctl.reconciler.restart({ model: 'chat' }), 2);
await measure('scale-down 2 → 1', () => fleet.push(files({ cacheRam: '17MiB', replicas: 1 }), 'one replica'), 1);
await fleet.push(files({ cacheRam: '17MiB', replicas: 2 }), 'two again');
await ctl.reconciler.requestPass('webhook');
await ctl.until('two again', 120_000, settled(2));
await measure('schedule change 2 → 1', () => fleet.push(files({ cacheRam: '17MiB', replicas: 2, extra: ['timezone: UTC', 'schedule:', '  - { cron: "* * * * *", replicas: 1 }'] }), 'schedule'), 1);
await fleet.push(files({ replicas: 1, drainGrace: '15s', extra: ['memory: 512MiB'], capacity: ['1GiB', '300MiB'] }), 'no room');
await ctl.reconciler.requestPass('webhook');
await ctl.until('one replica, no room', 120_000, settled(1));
await measure('restart, no room to surge (drain_grace 15s)', () => ctl.reconciler.restart({ model: 'chat' }), 1);

console.log('| operation | requests sent | cut | failed | duration | max llama-server processes | stream durations |');
console.log('|---|---|---|---|---|---|---|');
for (const r of rows) console.log(r);
await router.close();
await fleet.cleanup();
