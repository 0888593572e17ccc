/**
 * `llmgw plan` and RPC groups (#40), through the real CLI on a git fleet repo: a `spread: rpc`
 * model whose need (read from a real GGUF's header, as the controller reads it) exceeds each
 * node's declared capacity but fits two is shown as a head plus a worker, with each host's layers,
 * weights, KV cache and bytes, and why; a model that fits one node is not split; past max_hosts
 * the model fits nowhere, with the group's numbers.
 */
import { strict as assert } from 'node:assert';
import { after, before, describe, it } from 'node:test';
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { gguf } from '@huggingface/gguf';
import { minimalFleet } from '../harness/fleet.js';
import { cleanupTempDirs, makeTempDir, WorkRepo } from '../harness/git.js';
import { runCli } from '../harness/cli.js';
import { replicaMemory, shapeFromMetadata } from '../../src/reconciler/memory.js';
import { writeTinyModel, type TinyModelFile } from '../fixtures/gguf.js';

const MiB = 2 ** 20;
const HOST_KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBvVj2GfUu1xJ1u3u9QmTq2l1nq8mQnJ6zq3l9nG7Y0a';
const nodeFile = (host: string, bytes: number, zone: string): string => `host: ${host}\nhost_key: ${HOST_KEY}\nidentity: fleet-key\nlabels: { zone: ${zone} }\ncapacity: { memory: ${bytes} }\n`;

interface PlanJson {
  models: { model: string; placement: { verdict: string; fits: boolean; nodes: string[]; text: string; details?: string[]; groups?: { hosts: { node: string; role: string; freeBytes: number; layers: { first: number; count: number } | null; weightBytes: number | null; kvBytes: number | null; ownBytes: number; bytes: number }[]; totalLayers: number | null }[] } | null }[];
  nodes: { name: string; usedAfter: number; starts: string[] }[];
  engineInstalls: { engine: string; nodes: string[] }[];
}

let tiny: TinyModelFile;
let need: number;

before(async () => {
  tiny = await writeTinyModel(join(await makeTempDir(), 'big.gguf'), { seed: 3, embeddingLength: 256, layers: 8 });
  const [{ metadata }, st] = await Promise.all([gguf(tiny.path, { allowLocalFile: true }), stat(tiny.path)]);
  // the controller's estimate for the rpc profile below: the file, the KV cache for ctx 256, no prompt cache, 1 MiB overhead
  need = replicaMemory(shapeFromMetadata(metadata as unknown as Record<string, unknown>, st.size), { ctxSize: 256, memoryOverheadBytes: MiB, cacheRamBytes: 0 });
});
after(cleanupTempDirs);

/** A repo whose base has node-a (60 % of the need), node-b (50 %) and node-c (20 %), and a head adding `models`. */
async function planOf(models: Record<string, string>, baseModels: Record<string, string> = {}): Promise<{ code: number; text: string; json: PlanJson; md: string; gh: string }> {
  const files = minimalFleet();
  delete files['nodes/cpu-01.yaml'];
  delete files['nodes/cpu-02.yaml'];
  files['fleet.yaml'] = 'placement_reserve: 0\n';
  files['nodes/node-a.yaml'] = nodeFile('10.0.0.1', Math.floor(need * 0.6), 'a');
  files['nodes/node-b.yaml'] = nodeFile('10.0.0.2', Math.floor(need * 0.5), 'b');
  files['nodes/node-c.yaml'] = nodeFile('10.0.0.3', Math.floor(need * 0.2), 'c');
  files['engines/llama-cpp.yaml'] = files['engines/llama-cpp.yaml']!.replace('    path: /opt/llama/b6500/llama-server\n', '    path: /opt/llama/b6500/llama-server\n    rpc: true\n');
  files['profiles/rpc.yaml'] = 'engine: llama-cpp@b6500\nctx_size: 256\ncache_ram: 0\nmemory_overhead: 1MiB\n';
  for (const m of ['alpha', 'beta', 'gamma']) delete files[`models/${m}.yaml`];
  delete files['access/keys.yaml'];
  const repo = await WorkRepo.init();
  await repo.write({ ...files, ...baseModels });
  const base = await repo.commit('base');
  await repo.write(models);
  await repo.commit('add models');
  const valid = await runCli(['validate', repo.dir]);
  assert.equal(valid.code, 0, valid.stdout + valid.stderr);
  const text = await runCli(['plan', '--base', base, '--no-status'], repo.dir);
  const json = await runCli(['plan', '--base', base, '--no-status', '-f', 'json'], repo.dir);
  const md = await runCli(['plan', '--base', base, '--no-status', '-f', 'markdown'], repo.dir);
  const gh = await runCli(['plan', '--base', base, '--no-status', '-f', 'github'], repo.dir);
  return { code: text.code, text: text.stdout, json: JSON.parse(json.stdout) as PlanJson, md: md.stdout, gh: gh.stdout };
}

const bigModel = (placement: string, extra = ''): string => `source: file://${tiny.path}\nsha256: ${tiny.sha256}\nprofile: rpc\nreplicas: 1\nplacement: ${placement}\n${extra}`;

describe('llmgw plan: RPC groups', () => {
  it('a model no node holds alone is shown as head + worker with each host\'s split; one that fits a node is not split', async () => {
    const r = await planOf({
      'models/big.yaml': bigModel('{ spread: rpc, max_hosts: 3 }'),
      'models/small.yaml': `source: hf://org/s-GGUF/s.gguf\nsha256: ${'c'.repeat(64)}\nprofile: rpc\nreplicas: 1\nmemory: 1MiB\nnode_selector: { zone: c }\nplacement: { spread: rpc }\n`,
    });
    assert.equal(r.code, 1, r.text);
    const big = r.json.models.find((m) => m.model === 'big')!.placement!;
    assert.equal(big.verdict, 'fits');
    assert.deepEqual(big.nodes, ['node-a', 'node-b']);
    const g = big.groups![0]!;
    assert.equal(g.totalLayers, 8);
    assert.deepEqual(g.hosts.map((h) => [h.node, h.role]), [['node-a', 'head'], ['node-b', 'worker']]);
    // every layer once, the head's first; every byte of the need placed; no host over its free memory
    assert.equal(g.hosts[0]!.layers!.first, 0);
    assert.equal(g.hosts[1]!.layers!.first, g.hosts[0]!.layers!.count);
    assert.equal(g.hosts[0]!.layers!.count + g.hosts[1]!.layers!.count, 8);
    assert.ok(g.hosts[0]!.layers!.count > 0 && g.hosts[1]!.layers!.count > 0);
    assert.ok(Math.abs(g.hosts.reduce((s, h) => s + h.bytes, 0) - need) <= 2, `${g.hosts.map((h) => h.bytes)} vs ${need}`);
    for (const h of g.hosts) {
      assert.ok(h.bytes <= h.freeBytes, `${h.node}: ${h.bytes} > ${h.freeBytes}`);
      assert.equal(h.bytes - h.ownBytes - h.weightBytes! - h.kvBytes! <= 1, true);
      assert.ok(h.kvBytes! > 0 && h.weightBytes! > 0);
    }
    assert.ok(g.hosts[0]!.ownBytes >= MiB, 'the head keeps the overhead');
    assert.equal(g.hosts[1]!.ownBytes, 0);

    // the text: why this many hosts, and a line per host
    assert.match(r.text, /\+ big +added: 1 replica, profile rpc \(llama-cpp@b6500\)\n +fits as an RPC group of 2 hosts \(no node holds it alone\): solo needs [\d.]+ MiB; largest free [\d.]+ MiB; group node-a \(head, [\d.]+ MiB\) \+ node-b \([\d.]+ MiB\)\n/);
    assert.match(r.text, /\n +node-a \(head\): layers 0-\d \(\d of 8\), weights [\d.]+ MiB, KV [\d.]+ [KM]iB, [\d.]+ MiB of its own \(embeddings and output, prompt cache, overhead\), [\d.]+ MiB in all of [\d.]+ MiB free\n/);
    assert.match(r.text, /\n +node-b \(worker\): layers \d-7 \(\d of 8\), weights [\d.]+ MiB, KV [\d.]+ [KM]iB, [\d.]+ MiB in all of [\d.]+ MiB free\n +\+ small /);
    // the node table shows each host's share
    assert.match(r.text, /\n  node-a +0 B → [\d.]+ MiB of [\d.]+ MiB: \+big \(rpc head\)\n/);
    assert.match(r.text, /\n  node-b +0 B → [\d.]+ MiB of [\d.]+ MiB: \+big \(rpc worker\)\n/);
    const nb = r.json.nodes.find((n) => n.name === 'node-b')!;
    assert.equal(nb.usedAfter, g.hosts[1]!.bytes);
    // both hosts get the engine
    assert.deepEqual(r.json.engineInstalls, [{ engine: 'llama-cpp@b6500', nodes: ['node-a', 'node-b', 'node-c'] }]);
    assert.match(r.md, /\| ✅ fits as an RPC group of 2 hosts .*<br>node-a \(head\): layers 0-/);
    assert.match(r.gh, /^::notice file=models\/big\.yaml,line=4,title=llmgw plan%3A big added::added: .*%0Afits as an RPC group of 2 hosts .*%0Anode-a \(head\): layers 0-.*%0Anode-b \(worker\): layers /m);

    // fits one node (node-c): placed as any replica, never split
    const small = r.json.models.find((m) => m.model === 'small')!.placement!;
    assert.deepEqual([small.verdict, small.nodes, small.groups], ['fits', ['node-c'], undefined]);
    assert.match(r.text, /\+ small +added: .*\n +fits on node-c\n/);
  });

  it('changing spread is a definition change, named; changing max_hosts is not', async () => {
    const small = (placement: string): string => `source: hf://org/s-GGUF/s.gguf\nsha256: ${'c'.repeat(64)}\nprofile: rpc\nreplicas: 1\nmemory: 1MiB\nplacement: ${placement}\n`;
    const r = await planOf({ 'models/s1.yaml': small('{ spread: rpc }'), 'models/s2.yaml': small('{ spread: rpc, max_hosts: 4 }') }, { 'models/s1.yaml': small('{ spread: none }'), 'models/s2.yaml': small('{ spread: rpc, max_hosts: 2 }') });
    assert.match(r.text, /~ s1 +definition changed \(placement spread none → rpc\)/);
    assert.match(r.text, /~ s2 +placement max_hosts: 2 → 4 \(a bound on a group's hosts: nothing running is replaced\)\n/);
    assert.doesNotMatch(r.text, /s2 +definition changed/);
  });

  it('more than max_hosts would hold it: fits nowhere, with the group\'s numbers', async () => {
    const r = await planOf({ 'models/big.yaml': bigModel('{ spread: rpc, max_hosts: 2 }', `memory: ${Math.ceil(need * 1.2)}\n`) });
    const big = r.json.models.find((m) => m.model === 'big')!.placement!;
    assert.equal(big.verdict, 'fits-nowhere');
    assert.match(big.text, /^fits nowhere, not even as an RPC group: needs 28\.4 MiB; largest free 14\.2 MiB on node-a; group of 2 at most 26 MiB; 3 nodes checked$/);
    assert.deepEqual([big.nodes, big.groups, big.details], [[], [], []]);
    assert.match(r.text, /\+ big +added: 1 replica, profile rpc \(llama-cpp@b6500\)\n +fits nowhere, not even as an RPC group: needs 28\.4 MiB; /);
    assert.match(r.text, /1 changed model fits nowhere\.$/);
  });
});
