/**
 * Group placement (#40), table tests of the pure function: solo when a node fits, else the fewest
 * hosts with the head on the most free memory, each host's share of the layers in proportion to
 * its free memory; unplaceable with the numbers; the selector, the reserve and the nodes' engine
 * versions respected.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { groupLayersOf, hostLine, placeGroup, type GroupLayers, type GroupPlacement, type GroupRequest } from '../../src/reconciler/group-placement.js';
import type { PlacementNode } from '../../src/reconciler/placement.js';

const GiB = 2 ** 30;
const node = (name: string, gib: number, labels: Record<string, string> = {}, extra: Partial<PlacementNode> = {}): PlacementNode => ({
  name, labels, capacityBytes: gib * GiB, usedBytes: 0, reachable: true, ...extra,
});
const req = (gib: number | null, extra: Partial<GroupRequest> = {}): GroupRequest => ({
  model: 'big', memoryBytes: gib === null ? null : gib * GiB, nodeSelector: {}, maxHosts: 2, ...extra,
});
/** 32 layers of 1.75 GiB weights and 0.125 GiB KV (60 GiB), plus 4 GiB the head alone holds: 64 GiB. */
const LAYERS: GroupLayers = { weightBytes: new Array<number>(32).fill(1.75 * GiB), kvBytes: new Array<number>(32).fill(0.125 * GiB) };

type Want = { solo: string } | { hosts: [string, 'head' | 'worker'][]; why?: RegExp } | { code: string; reason: RegExp };

const cases: { name: string; nodes: PlacementNode[]; request: GroupRequest; reserve?: number; want: Want }[] = [
  { name: 'fits one node → solo, never split (the node with the most free)', nodes: [node('a', 40), node('b', 80), node('c', 70)], request: req(64, { maxHosts: 3 }), want: { solo: 'b' } },
  {
    name: 'needs two → head = the most free, the worker the next',
    nodes: [node('node-b', 28), node('node-a', 40), node('node-c', 10)],
    request: req(64),
    want: { hosts: [['node-a', 'head'], ['node-b', 'worker']], why: /^solo needs 64 GiB; largest free 40 GiB; group node-a \(head, 40 GiB\) \+ node-b \(28 GiB\)$/ },
  },
  {
    name: 'the fewest hosts: three when two do not hold it, not four',
    nodes: [node('a', 30), node('b', 25), node('c', 20), node('d', 20)],
    request: req(64, { maxHosts: 4 }),
    want: { hosts: [['a', 'head'], ['b', 'worker'], ['c', 'worker']] },
  },
  {
    name: 'needs three with max_hosts 2 → unplaceable with the numbers',
    nodes: [node('node-a', 40), node('node-b', 18), node('node-c', 10)],
    request: req(64),
    want: { code: 'PLACEMENT_NO_ROOM', reason: /^needs 64 GiB; largest free 40 GiB on node-a; group of 2 at most 58 GiB; 3 nodes checked$/ },
  },
  {
    name: 'even max_hosts do not hold it: the group of max_hosts in the reason',
    nodes: [node('node-a', 40), node('node-b', 10), node('node-c', 8)],
    request: req(64, { maxHosts: 3 }),
    want: { code: 'PLACEMENT_NO_ROOM', reason: /^needs 64 GiB; largest free 40 GiB on node-a; group of 3 at most 58 GiB; 3 nodes checked$/ },
  },
  {
    name: 'the selector excludes nodes (and is counted)',
    nodes: [node('a', 40, { zone: 'x' }), node('b', 60, { zone: 'y' }), node('c', 30, { zone: 'x' })],
    request: req(64, { nodeSelector: { zone: 'x' } }),
    want: { hosts: [['a', 'head'], ['c', 'worker']] },
  },
  {
    name: 'the selector leaves too little: the reason counts the excluded',
    nodes: [node('a', 40, { zone: 'x' }), node('b', 60, { zone: 'y' })],
    request: req(64, { nodeSelector: { zone: 'x' } }),
    want: { code: 'PLACEMENT_NO_ROOM', reason: /^needs 64 GiB; largest free 40 GiB on a; a group needs 2 nodes, only 1 has known free memory; 2 nodes checked, 1 excluded by selector$/ },
  },
  {
    name: 'version mismatch: no group, the reason names both versions and their hosts',
    nodes: [node('node-a', 40), node('node-b', 30)],
    request: req(64, { engine: { name: 'llama-cpp', version: 'b6500' }, installed: { 'node-a': 'b6500', 'node-b': 'b6600' } }),
    want: { code: 'PLACEMENT_GROUP_VERSIONS', reason: /^a group's hosts run one engine version, and these would not: llama-cpp@b6500 on node-a \(head\); llama-cpp@b6600 on node-b; the profile names llama-cpp@b6500/ },
  },
  {
    name: 'a node without the engine gets the profile\'s version: a group',
    nodes: [node('node-a', 40), node('node-b', 30)],
    request: req(64, { engine: { name: 'llama-cpp', version: 'b6500' }, installed: { 'node-a': 'b6500' } }),
    want: { hosts: [['node-a', 'head'], ['node-b', 'worker']] },
  },
  {
    name: 'the reserve is respected: 2 × (34 − 2) = 64 holds it, a larger reserve does not',
    nodes: [node('a', 34), node('b', 34)],
    request: req(64),
    reserve: 2 * GiB,
    want: { hosts: [['a', 'head'], ['b', 'worker']] },
  },
  {
    name: 'the reserve is respected: 2 × (34 − 3) = 62 does not hold 64',
    nodes: [node('a', 34), node('b', 34)],
    request: req(64),
    reserve: 3 * GiB,
    want: { code: 'PLACEMENT_NO_ROOM', reason: /^needs 64 GiB; largest free 31 GiB on a; group of 2 at most 62 GiB; 2 nodes checked$/ },
  },
  {
    name: 'used memory counts, unreachable nodes are never chosen',
    nodes: [node('a', 64, {}, { usedBytes: 24 * GiB }), node('b', 100, {}, { reachable: false }), node('c', 30)],
    request: req(64),
    want: { hosts: [['a', 'head'], ['c', 'worker']] },
  },
  {
    name: 'no node matches the selector: no matching node, no group part',
    nodes: [node('a', 40, { zone: 'x' })],
    request: req(64, { nodeSelector: { zone: 'q' } }),
    want: { code: 'PLACEMENT_NO_MATCHING_NODE', reason: /^needs 64 GiB; no node with known free memory; 1 node checked, 1 excluded by selector$/ },
  },
  { name: 'memory need unknown', nodes: [node('a', 40)], request: req(null), want: { code: 'PLACEMENT_MEMORY_UNKNOWN', reason: /memory need unknown/ } },
];

function check(got: GroupPlacement, want: Want): void {
  if ('solo' in want) return assert.deepEqual(got, { kind: 'solo', node: want.solo });
  if ('code' in want) {
    assert.equal(got.kind, 'unplaceable', JSON.stringify(got));
    if (got.kind !== 'unplaceable') return;
    assert.equal(got.unplaceable.code, want.code);
    assert.match(got.unplaceable.reason, want.reason);
    return;
  }
  assert.equal(got.kind, 'group', JSON.stringify(got));
  if (got.kind !== 'group') return;
  assert.deepEqual(got.hosts.map((h) => [h.node, h.role]), want.hosts);
  if (want.why) assert.match(got.why, want.why);
}

describe('group placement', () => {
  for (const c of cases) {
    it(c.name, () => {
      check(placeGroup({ nodes: c.nodes, reserveBytes: c.reserve ?? 0, request: c.request }), c.want);
    });
  }

  it('the split in bytes (no layers known): in proportion to free memory, every byte placed, none over a host\'s free', () => {
    const g = placeGroup({ nodes: [node('a', 40), node('b', 28)], reserveBytes: 0, request: req(64) });
    assert.equal(g.kind, 'group');
    if (g.kind !== 'group') return;
    assert.equal(g.hosts.reduce((s, h) => s + h.bytes, 0), 64 * GiB);
    assert.ok(Math.abs(g.hosts[0]!.bytes - (64 * GiB * 40) / 68) < 2 && Math.abs(g.hosts[1]!.bytes - (64 * GiB * 28) / 68) < 2);
    assert.equal(hostLine(g.hosts[1]!, g.totalLayers), 'b (worker): layers not known (the GGUF header was not read: the split in bytes), 26.4 GiB in all of 28 GiB free');
  });

  it('the split by layers: the head keeps the first layers and what is its own, the worker the rest; shares follow the room', () => {
    // head room 40 − 4 = 36, worker 28: the layers' 60 GiB split 36:28 → 33.75 / 26.25 GiB → 18 and 14 layers
    const g = placeGroup({ nodes: [node('node-a', 40), node('node-b', 28)], reserveBytes: 0, request: req(64, { layers: LAYERS }) });
    assert.equal(g.kind, 'group');
    if (g.kind !== 'group') return;
    assert.equal(g.totalLayers, 32);
    assert.deepEqual(g.hosts.map((h) => [h.node, h.layers, h.weightBytes! / GiB, h.kvBytes! / GiB, h.ownBytes / GiB, h.bytes / GiB]), [
      ['node-a', { first: 0, count: 18 }, 31.5, 2.25, 4, 37.75],
      ['node-b', { first: 18, count: 14 }, 24.5, 1.75, 0, 26.25],
    ]);
    assert.equal(hostLine(g.hosts[0]!, 32), 'node-a (head): layers 0-17 (18 of 32), weights 31.5 GiB, KV 2.3 GiB, 4 GiB of its own (embeddings and output, prompt cache, overhead), 37.8 GiB in all of 40 GiB free');
    assert.equal(hostLine(g.hosts[1]!, 32), 'node-b (worker): layers 18-31 (14 of 32), weights 24.5 GiB, KV 1.8 GiB, 26.3 GiB in all of 28 GiB free');
  });

  it('layers that do not divide to fit take one more host; at max_hosts the reason says so', () => {
    // 3 layers of 10 GiB over two hosts of 16 GiB: 30 ≤ 32, yet one of them takes two layers (20 GiB)
    const two: GroupLayers = { weightBytes: [10 * GiB, 10 * GiB, 10 * GiB], kvBytes: [0, 0, 0] };
    const nodes = [node('a', 16), node('b', 16), node('c', 16)];
    const g = placeGroup({ nodes, reserveBytes: 0, request: req(30, { layers: two, maxHosts: 3 }) });
    assert.deepEqual(g.kind === 'group' ? g.hosts.map((h) => [h.node, h.layers?.count]) : g, [['a', 1], ['b', 1], ['c', 1]]);
    const u = placeGroup({ nodes: nodes.slice(0, 2).concat(node('c', 9)), reserveBytes: 0, request: req(30, { layers: two, maxHosts: 3 }) });
    assert.equal(u.kind, 'unplaceable');
    if (u.kind === 'unplaceable') assert.match(u.unplaceable.reason, /group of 3 at most 41 GiB, and its layers do not divide to fit/);
  });

  it('a head may hold no layer (every layer offloaded to the workers): it keeps its own bytes', () => {
    // one layer of 10 GiB, 3 GiB the head alone holds: the head (12 GiB free) keeps its 3, the worker (10 GiB) takes the layer
    const one: GroupLayers = { weightBytes: [10 * GiB], kvBytes: [0] };
    const g = placeGroup({ nodes: [node('a', 12), node('b', 10)], reserveBytes: 0, request: req(13, { layers: one }) });
    assert.equal(g.kind, 'group', JSON.stringify(g));
    if (g.kind !== 'group') return;
    assert.deepEqual(g.hosts.map((h) => [h.node, h.layers?.count, h.bytes / GiB]), [['a', 0, 3], ['b', 1, 10]]);
    assert.equal(hostLine(g.hosts[0]!, 1), 'a (head): no layers of 1, weights 0 B, KV 0 B, 3 GiB of its own (embeddings and output, prompt cache, overhead), 3 GiB in all of 12 GiB free');
  });

  it('groupLayersOf: the tensor table\'s weights per layer and the KV cache per layer; the file over the block count without a table', () => {
    const shape = { fileBytes: 1000, layers: 4, headCountKv: 2, keyLength: 8, valueLength: 8 };
    const kvPerLayer = (4 * 64 * 2 * 16 * 2) / 4;
    assert.deepEqual(groupLayersOf(shape, 64), { weightBytes: [250, 250, 250, 250], kvBytes: [kvPerLayer, kvPerLayer, kvPerLayer, kvPerLayer] });
    const withTable = { ...shape, tensors: { embeddingLength: 16, feedForwardLength: 32, vocabSize: 10, layerBytes: [100, 110, 120, 130], outputBytes: 50 } };
    assert.deepEqual(groupLayersOf(withTable, 64)!.weightBytes, [100, 110, 120, 130]);
    assert.equal(groupLayersOf({ ...shape, layers: 0 }, 64), null);
  });
});
