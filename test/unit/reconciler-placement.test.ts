import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { place, type PlacementNode, type PlacementRequest } from '../../src/reconciler/placement.js';

const GiB = 2 ** 30;
const node = (name: string, gib: number | null, labels: Record<string, string> = {}, extra: Partial<PlacementNode> = {}): PlacementNode => ({
  name,
  labels,
  capacityBytes: gib === null ? null : gib * GiB,
  usedBytes: 0,
  reachable: true,
  ...extra,
});
const req = (model: string, count: number, gib: number | null, extra: Partial<PlacementRequest> = {}): PlacementRequest => ({
  model,
  count,
  memoryBytes: gib === null ? null : gib * GiB,
  nodeSelector: {},
  existingOn: [],
  ...extra,
});

describe('placement', () => {
  const cases: {
    name: string;
    nodes: PlacementNode[];
    requests: PlacementRequest[];
    reserve?: number;
    expect: Record<string, string[] | RegExp>;
  }[] = [
    { name: 'one replica goes to the node with most room', nodes: [node('a', 8), node('b', 16)], requests: [req('m', 1, 4)], expect: { m: ['b'] } },
    { name: 'replicas spread over nodes', nodes: [node('a', 32), node('b', 16)], requests: [req('m', 2, 4)], expect: { m: ['a', 'b'] } },
    { name: 'spread away from nodes already hosting the model', nodes: [node('a', 32), node('b', 16)], requests: [req('m', 1, 4, { existingOn: ['a'] })], expect: { m: ['b'] } },
    { name: 'doubles up when there are fewer nodes than replicas', nodes: [node('a', 32)], requests: [req('m', 2, 4)], expect: { m: ['a', 'a'] } },
    { name: 'reserve is kept free', nodes: [node('a', 8)], requests: [req('m', 1, 7.5)], reserve: 1 * GiB, expect: { m: /needs 7\.5 GiB; largest free 7 GiB on a; 1 node checked/ } },
    { name: 'used memory counts', nodes: [node('a', 16, {}, { usedBytes: 10 * GiB })], requests: [req('m', 1, 8)], expect: { m: /largest free 6 GiB on a/ } },
    {
      name: 'node selector limits candidates and is counted in the reason',
      nodes: [node('a', 64, { zone: 'a' }), node('b', 8, { zone: 'b' }), node('c', 4, { zone: 'b' })],
      requests: [req('m', 1, 10, { nodeSelector: { zone: 'b' } })],
      expect: { m: /needs 10 GiB; largest free 8 GiB on b; 3 nodes checked, 1 excluded by selector/ },
    },
    {
      name: 'unreachable nodes are unknown, never chosen',
      nodes: [node('a', 64, {}, { reachable: false }), node('b', 8)],
      requests: [req('m', 1, 10)],
      expect: { m: /largest free 8 GiB on b; 2 nodes checked, 1 unknown/ },
    },
    { name: 'nodes without known capacity are unknown', nodes: [node('a', null)], requests: [req('m', 1, 1)], expect: { m: /no node with known free memory; 1 node checked, 1 unknown/ } },
    { name: 'unknown memory need is unplaceable with that reason', nodes: [node('a', 64)], requests: [req('m', 1, null)], expect: { m: /memory need unknown/ } },
    { name: 'bigger models are placed first whatever the request order', nodes: [node('a', 10), node('b', 6)], requests: [req('small', 1, 5), req('big', 1, 9)], expect: { big: ['a'], small: ['b'] } },
    { name: 'partial placement says how many fit', nodes: [node('a', 10)], requests: [req('m', 3, 4)], expect: { m: /needs 4 GiB per replica; largest free 2 GiB on a; 1 node checked; placed 2 of 3/ } },
    { name: 'zero replicas places nothing and is fine', nodes: [node('a', 1)], requests: [req('m', 0, 100)], expect: { m: [] } },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const results = place({ nodes: c.nodes, requests: c.requests, reserveBytes: c.reserve ?? 0 });
      for (const [model, want] of Object.entries(c.expect)) {
        const r = results.find((x) => x.model === model)!;
        if (want instanceof RegExp) {
          assert.ok(r.unplaceable, `${model} should be unplaceable`);
          assert.match(r.unplaceable.reason, want);
        } else {
          assert.equal(r.unplaceable, null, r.unplaceable?.reason);
          assert.deepEqual(r.nodes, want);
        }
      }
    });
  }
  it('is a pure function: same input, same output, input untouched', () => {
    const input = { nodes: [node('a', 16), node('b', 16)], requests: [req('x', 2, 4), req('y', 1, 8)], reserveBytes: GiB };
    const snapshot = JSON.stringify(input);
    assert.deepEqual(place(input), place(input));
    assert.equal(JSON.stringify(input), snapshot);
  });
});
