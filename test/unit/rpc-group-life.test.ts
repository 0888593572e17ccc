/**
 * #40, the pure parts of an RPC group's life: the pass's group starts (group-start.ts), a group's
 * health as one (group-health.ts: a worker gone fails the head; an unreachable node is unknown),
 * orphaned workers, the record's group read back from JSON, and the head's argv.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import type { FleetSpec, ModelSpec, ProfileSpec } from '../../src/fleet-spec/types.js';
import type { NodeObservation, ReplicaObservation, RpcWorkerObservation } from '../../src/nodes/driver.js';
import { replicaArgv } from '../../src/nodes/ops/replica-start.js';
import { placeGroups } from '../../src/reconciler/group-start.js';
import { groupLayerSplit } from '../../src/reconciler/group-split.js';
import { groupFailure, groupOfWorker, orphanWorkers, withGroupHealth, type GroupNodeLook } from '../../src/reconciler/group-health.js';
import type { PlacementNode } from '../../src/reconciler/placement.js';
import type { GroupMember } from '../../src/reconciler/replica-life.js';
import { replicaFromJson } from '../../src/reconciler/state-migrate.js';

const MiB = 1024 * 1024;
const model = { name: 'big', digest: 'd1', profile: 'p', nodeSelector: {}, placement: { spread: 'rpc', maxHosts: 3 } } as unknown as ModelSpec;
const spec = { profiles: { p: { engine: 'llama-cpp', engineVersion: 'b1' } }, settings: { placementReserveBytes: 0 } } as unknown as FleetSpec;
const node = (name: string, freeMiB: number): PlacementNode => ({ name, labels: {}, capacityBytes: freeMiB * MiB, usedBytes: 0, reachable: true });
let ids = 0;
const input = (needMiB: number) => ({ spec, memory: { big: needMiB * MiB }, newReplicaId: () => `big-${++ids}` });

describe('group starts (group-start.ts)', () => {
  it('a replica no node holds alone: a start on the head\'s node carrying its hosts, the workers named after it', () => {
    ids = 0;
    const g = placeGroups(input(1000), { model }, 1, [node('a', 600), node('b', 500), node('c', 100)], []);
    assert.equal(g.unplaceable, null);
    assert.equal(g.starts.length, 1);
    const s = g.starts[0]!;
    assert.deepEqual([s.kind, s.model, s.node, s.replicaId, s.digest], ['start', 'big', 'a', 'big-1', 'd1']);
    assert.deepEqual(s.group.map((h) => [h.node, h.role, h.worker ?? null]), [['a', 'head', null], ['b', 'worker', 'big-1.w1']]);
    assert.equal(s.group.reduce((n, h) => n + h.bytes, 0), 1000 * MiB, 'the hosts\' shares add up to the need');
  });

  it('two replicas: the second group is placed on what the first left', () => {
    ids = 0;
    const g = placeGroups(input(1000), { model }, 2, [node('a', 700), node('b', 700), node('c', 700), node('d', 700)], []);
    assert.equal(g.starts.length, 2);
    const hosts = g.starts.flatMap((s) => s.group.map((h) => h.node));
    assert.equal(new Set(hosts).size, 4, `each node in one group: ${hosts.join(',')}`);
  });

  it('not even a group: unplaceable with the group\'s numbers; the starts placed before it stay', () => {
    ids = 0;
    const none = placeGroups(input(5000), { model }, 1, [node('a', 600), node('b', 500)], []);
    assert.equal(none.starts.length, 0);
    assert.equal(none.unplaceable?.code, 'PLACEMENT_NO_ROOM');
    assert.match(none.unplaceable!.reason, /group of 2 at most/);
    const one = placeGroups(input(1000), { model }, 2, [node('a', 600), node('b', 500)], []);
    assert.equal(one.starts.length, 1);
    assert.ok(one.unplaceable !== null);
  });

  it('a node set aside (avoided) is no host', () => {
    ids = 0;
    const g = placeGroups(input(1000), { model }, 1, [node('a', 600), node('b', 500), node('c', 550)], ['a']);
    assert.deepEqual(g.starts[0]!.group.map((h) => h.node), ['c', 'b'], 'the head the node with the most free');
  });
});

const group: GroupMember[] = [{ node: 'a', role: 'head', bytes: 1 }, { node: 'b', role: 'worker', bytes: 2, worker: 'big-1.w1' }];
const head = (state: ReplicaObservation['state']): ReplicaObservation => ({ id: 'big-1', model: 'big', digest: 'd1', port: 1, pid: 1, startedAt: 0, endpoint: 'http://a:1', state });
const worker = (state: RpcWorkerObservation['state'], id = 'big-1.w1'): RpcWorkerObservation => ({ id, group: 'big', host: '127.0.0.1', port: 2, pid: 2, startedAt: 0, state, ...(state === 'failed' ? { failure: { code: 'RPC_WORKER_EXITED', message: 'rpc-server exited; its last log line: x', logTail: 'x' } } : {}) });
const obs = (replicas: ReplicaObservation[], rpcWorkers?: RpcWorkerObservation[]): NodeObservation => ({ node: 'n', at: 0, memory: { totalBytes: 1, availableBytes: 1 }, cpus: 1, cpuFlags: [], arch: 'x86_64', diskFreeBytes: 1, engines: [], models: [], replicas, ...(rpcWorkers ? { rpcWorkers } : {}) });
const looks = (a: NodeObservation, b: NodeObservation | null, bReachable = true): Map<string, GroupNodeLook> => new Map([['a', { reachable: true, obs: a }], ['b', { reachable: bReachable, obs: b }]]);

describe('a group\'s health as one (group-health.ts)', () => {
  const cases: { name: string; worker: RpcWorkerObservation[] | undefined; reachable?: boolean; failed: boolean; why?: RegExp }[] = [
    { name: 'worker ready', worker: [worker('ready')], failed: false },
    { name: 'worker starting', worker: [worker('starting')], failed: false },
    { name: 'worker failed', worker: [worker('failed')], failed: true, why: /worker on b \(rpc-server big-1\.w1\) exited: rpc-server exited; its last log line: x/ },
    { name: 'worker gone from its node', worker: undefined, failed: true, why: /it is gone from its node/ },
    { name: 'another worker only', worker: [worker('ready', 'big-9.w1')], failed: true },
    { name: 'worker\'s node unreachable: unknown, not gone', worker: undefined, reachable: false, failed: false },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const l = looks(obs([head('ready')]), obs([], c.worker), c.reachable ?? true);
      const f = groupFailure(group, l);
      assert.equal(f !== null, c.failed);
      if (c.why) assert.match(f!.message, c.why);
      const out = withGroupHealth(l, new Map([['big-1', group]]));
      assert.equal(out !== null, c.failed, 'the looks change only where a group failed');
      if (out) {
        const h = out.get('a')!.obs!.replicas[0]!;
        assert.equal(h.state, 'failed');
        assert.equal(h.failure?.code, 'RPC_WORKER_EXITED');
        assert.equal(out.get('b'), l.get('b'), 'the other looks are the same objects');
      }
    });
  }

  it('a head already failed keeps its own reason (its log names the worker)', () => {
    const l = looks(obs([head('failed')]), obs([], []));
    assert.equal(withGroupHealth(l, new Map([['big-1', group]])), null);
  });
});

describe('orphaned workers', () => {
  it('a worker whose group is not in the record is stopped; ours, and ids llmgw did not make, are left', () => {
    assert.equal(groupOfWorker('big-1.w1'), 'big-1');
    assert.equal(groupOfWorker('handmade'), null);
    const l = new Map<string, GroupNodeLook>([
      ['b', { reachable: true, obs: obs([], [worker('ready'), worker('ready', 'gone-7.w1'), worker('ready', 'handmade')]) }],
      ['c', { reachable: false, obs: obs([], [worker('ready', 'gone-8.w1')]) }],
    ]);
    assert.deepEqual(orphanWorkers(l, { 'big-1': { group } }), [{ node: 'b', worker: 'gone-7.w1' }]);
    // the record's group names the worker on another node: that one is not ours either
    assert.deepEqual(orphanWorkers(l, { 'big-1': { group: [group[0]!, { ...group[1]!, node: 'z' }] } }).map((o) => o.worker), ['big-1.w1', 'gone-7.w1']);
  });
});

describe('the record and the head', () => {
  it('a replica\'s group is read back from JSON; a malformed one is dropped, the replica kept', () => {
    const base = { model: 'big', node: 'a', digest: 'd1', startedAt: 5, phase: { kind: 'launching' } };
    assert.deepEqual(replicaFromJson(JSON.parse(JSON.stringify({ ...base, group })))?.group, group);
    const bad = replicaFromJson({ ...base, group: [{ node: 'b', role: 'worker', bytes: 1 }] });
    assert.ok(bad !== null);
    assert.equal(bad.group, undefined);
  });

  it('the head runs with --rpc to its workers, their layers and split, at -lv 4', () => {
    const profile = { name: 'p', ctxSize: 256, parallel: 1, threads: 1, batchSize: null, embeddings: false, reranking: false, cacheRamBytes: 0, extraArgs: [] } as unknown as ProfileSpec;
    const argv = replicaArgv({ id: 'big-1', model: 'big', digest: 'd1', modelPath: '/m.gguf', binary: '/bin/llama-server', profile, apiKey: '', rpc: { endpoints: ['10.0.0.2:5000', '10.0.0.3:5001'], gpuLayers: 21, split: [12, 8] } }, '0.0.0.0', 8080);
    assert.deepEqual(argv.slice(argv.indexOf('--rpc')), ['--rpc', '10.0.0.2:5000,10.0.0.3:5001', '-ngl', '21', '-ts', '12,8', '-lv', '4']);
    const one = replicaArgv({ id: 'big-1', model: 'big', digest: 'd1', modelPath: '/m.gguf', binary: '/bin/llama-server', profile, apiKey: '', rpc: { endpoints: ['10.0.0.2:5000'], gpuLayers: 'all', split: null } }, '0.0.0.0', 8080);
    assert.deepEqual(one.slice(one.indexOf('--rpc')), ['--rpc', '10.0.0.2:5000', '-ngl', 'all', '-lv', '4'], 'one worker: no -ts');
    assert.ok(!replicaArgv({ id: 'x', model: 'x', digest: 'd', modelPath: '/m.gguf', binary: '/b', profile, apiKey: '' }, '0.0.0.0', 1).includes('--rpc'));
  });
});

describe('a group\'s layers at its start (group-split.ts)', () => {
  const g = (...bytes: number[]): GroupMember[] => bytes.map((b, i) => (i === 0 ? { node: 'h', role: 'head', bytes: b } : { node: `w${i}`, role: 'worker', bytes: b, worker: `r.w${i}` }));
  const cases: { name: string; group: GroupMember[]; layers: number | null; want: ReturnType<typeof groupLayerSplit> }[] = [
    { name: 'half and half: the last 16 layers and the output layer offloaded', group: g(600, 600), layers: 32, want: { gpuLayers: 17, split: [16], headLayers: 16 } },
    { name: 'by the shares: 40 % head, 35 % and 25 % workers', group: g(400, 350, 250), layers: 20, want: { gpuLayers: 13, split: [7, 5], headLayers: 8 } },
    { name: 'a head with (almost) no share: every layer on the workers', group: g(1, 999), layers: 8, want: { gpuLayers: 'all', split: [8], headLayers: 0 } },
    { name: 'a worker rounded to none still takes one layer', group: g(990, 10), layers: 8, want: { gpuLayers: 2, split: [1], headLayers: 7 } },
    { name: 'layers not known: every layer on the workers', group: g(600, 600), layers: null, want: { gpuLayers: 'all', split: null, headLayers: null } },
  ];
  for (const c of cases) it(c.name, () => assert.deepEqual(groupLayerSplit(c.group, c.layers), c.want));
});
