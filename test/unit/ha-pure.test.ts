/** Table tests of the pure pieces of running several controllers: who may act (node owner records), the published snapshot, and forwarded requests as checked on receipt. */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { allowedDemand, endpointProblem, parsePublished, publishedJson, refusedEndpoints, standbySnapshot } from '../../src/ha/published.js';
import type { FleetSpec, NodeSpec } from '../../src/fleet-spec/types.js';
import { checkRequest, leaseProblem } from '../../src/ha/channel.js';
import { modelView, nodeSpec, nodeView, replicaView, snapshot } from '../harness/views.js';

/** The spec with a local node n1 (ports 9000-9100) and an ssh node n2 on 10.0.0.2. */
function withNode(spec: FleetSpec): FleetSpec {
  const node = (name: string, transport: 'local' | 'ssh', host: string): NodeSpec => nodeSpec(name, { transport, host, ports: { from: 9000, to: 9100 } });
  return { ...spec, nodes: { n1: node('n1', 'local', 'localhost'), n2: node('n2', 'ssh', '10.0.0.2') } };
}
import type { NodeFenceView } from '../../src/nodes/driver.js';
import { ownershipOf } from '../../src/reconciler/ownership.js';
import { STANDALONE, type FleetSnapshot } from '../../src/reconciler/view.js';
import { fakeSpec } from '../harness/fake-fleet-view.js';

const fence = (state: NodeFenceView['state'], over: Partial<NodeFenceView> = {}): NodeFenceView => ({ state, owner: 'other-1', label: 'llmgw on host-b (state dir /srv/b)', epoch: 0, renewedAgoSeconds: 4.2, ttlSeconds: 60, ...over });

describe('ownershipOf: whether this controller acts, from the nodes it reached', () => {
  const cases: { name: string; nodes: Parameters<typeof ownershipOf>[0]; acting: boolean; code?: string; deposed?: boolean; mentions?: string[] }[] = [
    { name: 'no node yet', nodes: [], acting: true },
    { name: 'every node mine', nodes: [{ node: 'a', fence: fence('mine') }, { node: 'b', fence: fence('mine') }], acting: true },
    { name: 'a node not reached (no record seen) does not bar', nodes: [{ node: 'a', fence: fence('mine') }, { node: 'b' }], acting: true },
    { name: 'a node another controller owns', nodes: [{ node: 'a', fence: fence('mine') }, { node: 'b', fence: fence('other') }], acting: false, code: 'NODE_OWNED', deposed: false, mentions: ['node b', 'llmgw on host-b (state dir /srv/b)', 'renewed 4 s ago'] },
    { name: 'a newer epoch of our cluster: step down', nodes: [{ node: 'a', fence: fence('newer-epoch', { epoch: 9, label: 'etcd cluster /llmgw' }) }], acting: false, code: 'NODE_FENCED', deposed: true, mentions: ['node a', 'epoch 9', "leader's epoch 7"] },
    { name: 'a newer epoch wins over another owner (stepping down is the stronger answer)', nodes: [{ node: 'a', fence: fence('other') }, { node: 'b', fence: fence('newer-epoch', { epoch: 8 }) }], acting: false, code: 'NODE_FENCED', deposed: true },
    { name: 'the first node by name names the reason', nodes: [{ node: 'z', fence: fence('other', { label: 'Z' }) }, { node: 'c', fence: fence('other', { label: 'C' }) }], acting: false, code: 'NODE_OWNED', mentions: ['node c', 'C'] },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const o = ownershipOf(c.nodes, 7);
      assert.equal(o.acting, c.acting);
      if (o.acting) return;
      assert.equal(o.reason.code, c.code);
      if (c.deposed !== undefined) assert.equal(o.deposed, c.deposed);
      for (const m of c.mentions ?? []) assert.ok(o.reason.message.includes(m), `${o.reason.message} mentions ${m}`);
    });
  }
});

describe('the published snapshot', () => {
  const spec = fakeSpec({ models: { alpha: {}, beta: {} } });
  const base = (over: Partial<FleetSnapshot> = {}): FleetSnapshot =>
    snapshot({
      at: 1000,
      lastSyncOk: 900,
      lastStatusWriteOk: 950,
      models: Object.values(spec.models).map((m) => modelView(m, { ready: 1, replicas: [replicaView(`${m.name}-1`, m.name, { node: 'n1', endpoint: 'http://127.0.0.1:9000', digest: m.digest, startedAt: 5 })], memoryBytes: 1024 })),
      nodes: [nodeView('n1', { memory: { totalBytes: 8, availableBytes: 4 }, diskFreeBytes: 100, engines: ['llama@1'], replicas: 2 })],
      lastPass: { startedAt: 990, durationMs: 10, result: 'ok', error: null, actions: 0 },
      ...over,
    });

  it('does not change with what moves on every pass (times, free memory and disk): nothing to write', () => {
    const a = publishedJson(base());
    const b = publishedJson(base({ at: 2000, lastSyncOk: 1900, lastStatusWriteOk: 1950, lastPass: { startedAt: 1990, durationMs: 30, result: 'ok', error: null, actions: 0 }, nodes: [{ ...base().nodes[0]!, memory: { totalBytes: 8, availableBytes: 3 }, diskFreeBytes: 99 }] }));
    assert.equal(a, b);
  });

  it('changes with a phase, a replica or a reason', () => {
    const m0 = base().models[0]!;
    assert.notEqual(publishedJson(base()), publishedJson(base({ models: [{ ...m0, phase: 'parked', parked: { since: 5, lastError: { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: 'kev' } } }, base().models[1]!] })));
    assert.notEqual(publishedJson(base()), publishedJson(base({ models: [{ ...m0, replicas: [] }, base().models[1]!] })));
  });

  it('holds no model spec; a standby attaches its own and leaves out models its spec lacks', () => {
    const json = publishedJson(base());
    assert.ok(!json.includes('"spec"'), 'no spec in the published value');
    const control = { ...STANDALONE, mode: 'etcd' as const, notActing: { code: 'CONTROLLER_STANDBY', message: 'standby' } };
    const own = withNode(fakeSpec({ models: { alpha: {} } }));
    const s = standbySnapshot(parsePublished(json), own, control, 3000);
    assert.equal(s.leader, false);
    assert.deepEqual(s.models.map((m) => m.name), ['alpha']);
    assert.equal(s.models[0]!.spec, own.models.alpha);
    assert.equal(s.models[0]!.replicas[0]!.endpoint, 'http://127.0.0.1:9000');
    assert.equal(s.control.notActing?.code, 'CONTROLLER_STANDBY');
  });

  it('a published endpoint is used only on its node\'s host and in its ports range (a forged snapshot routes nowhere else)', () => {
    const own = withNode(fakeSpec({ models: { alpha: {} } }));
    const control = { ...STANDALONE, mode: 'etcd' as const };
    const m0 = base().models[0]!;
    const r0 = m0.replicas[0]!;
    const forged = [
      { ...r0, id: 'outside-range', endpoint: 'http://127.0.0.1:9999' },
      { ...r0, id: 'other-host', endpoint: 'http://10.9.9.9:9000' },
      { ...r0, id: 'no-node', node: 'ghost' },
      { ...r0, id: 'https', endpoint: 'https://127.0.0.1:9001' },
      { ...r0, id: 'path', endpoint: 'http://127.0.0.1:9001/x' },
      { ...r0, id: 'userinfo', endpoint: 'http://u@127.0.0.1:9001' },
      { ...r0, id: 'garbage', endpoint: 'not a url' },
      { ...r0, id: 'proto', node: '__proto__' },
    ];
    const json = publishedJson(base({ models: [{ ...m0, ready: 9, replicas: [r0, ...forged] }] }));
    const s = standbySnapshot(parsePublished(json), own, control, 1);
    assert.deepEqual(s.models[0]!.replicas.map((r) => r.id), [r0.id]);
    assert.equal(s.models[0]!.ready, 1);
    const refused = refusedEndpoints(parsePublished(json), own);
    assert.deepEqual(refused.map((r) => r.replica), forged.map((r) => r.id));
    assert.match(refused[0]!.why, /outside node n1's ports 9000-9100/);
    assert.equal(endpointProblem({ node: 'n1', endpoint: 'http://127.0.0.1:9100' }, own), null);
    assert.equal(endpointProblem({ node: 'n2', endpoint: 'http://10.0.0.2:9000' }, own), null);
    assert.match(endpointProblem({ node: 'n2', endpoint: 'http://127.0.0.1:9000' }, own)!, /not on node n2's host/);
    // a forwarded demand's answer is held to the same rule (a forged responses/ entry)
    assert.deepEqual(allowedDemand({ kind: 'ready', replicas: [r0, ...forged] }, own), { kind: 'ready', replicas: [r0] });
    assert.deepEqual(allowedDemand({ kind: 'ready', replicas: forged }, own), { kind: 'starting' });
    assert.deepEqual(allowedDemand({ kind: 'ready', replicas: [r0] }, null), { kind: 'starting' });
    assert.deepEqual(allowedDemand({ kind: 'unplaceable', code: 'PLACEMENT_NO_ROOM', reason: 'x' }, own), { kind: 'unplaceable', code: 'PLACEMENT_NO_ROOM', reason: 'x' });
  });

  it('a starting replica without an endpoint yet is shown, not refused; a ready one without an endpoint is refused', () => {
    const own = withNode(fakeSpec({ models: { alpha: {} } }));
    const m0 = base().models[0]!;
    const r0 = m0.replicas[0]!;
    const starting = { ...r0, id: 'starting', endpoint: '', phase: 'starting' as const };
    const bare = { ...r0, id: 'ready-no-endpoint', endpoint: '' };
    const json = publishedJson(base({ models: [{ ...m0, replicas: [r0, starting, bare] }] }));
    const s = standbySnapshot(parsePublished(json), own, { ...STANDALONE, mode: 'etcd' as const }, 1);
    assert.deepEqual(s.models[0]!.replicas.map((r) => r.id), [r0.id, 'starting']);
    assert.deepEqual(refusedEndpoints(parsePublished(json), own).map((r) => [r.replica, r.why]), [['ready-no-endpoint', 'is not a URL']]);
  });

  it('a value this version does not read is no snapshot', () => {
    assert.equal(parsePublished('{"v":2}'), null);
    assert.equal(parsePublished('not json'), null);
    const s = standbySnapshot(null, null, STANDALONE, 1);
    assert.deepEqual(s.models, []);
  });
});

describe('forwarded requests as the leader checks them (checkRequest, then leaseProblem live)', () => {
  const ID = '0b6c2d4e-1f3a-4c5b-8d7e-9f0a1b2c3d4e';
  const KEY = `/llmgw/requests/${ID}`;
  const req = (o: Record<string, unknown> = {}): string => JSON.stringify({ id: ID, kind: 'restart', body: { all: true }, from: 'b', lease: '7587', ...o });
  const cases: Array<{ name: string; value: string; kvLease?: string; key?: string; why: RegExp | null }> = [
    { name: 'an instance\'s request', value: req(), why: null },
    { name: 'not JSON', value: '{restart', why: /not JSON/ },
    { name: 'not an object', value: '"restart"', why: /not an object/ },
    { name: 'an id not its key\'s', value: req(), key: '/llmgw/requests/0b6c2d4e-1f3a-4c5b-8d7e-000000000000', why: /not its key's/ },
    { name: 'no sender', value: req({ from: '' }), why: /no sender instance id/ },
    { name: 'no lease named', value: req({ lease: undefined }), why: /no sender lease/ },
    { name: 'written without a lease (etcdctl put)', value: req(), kvLease: '0', why: /not attached to the sender's lease 7587 \(attached to none\)/ },
    { name: 'attached to another lease', value: req(), kvLease: '9999', why: /attached to 9999/ },
    { name: 'an unknown kind', value: req({ kind: 'exec', body: { cmd: 'rm' } }), why: /unknown kind "exec"/ },
    { name: 'a body that is not an object', value: req({ body: [true] }), why: /body is not an object/ },
    { name: 'an unknown body field', value: req({ body: { all: true, cmd: 'x' } }), why: /unknown body fields cmd/ },
    { name: 'a malformed field', value: req({ kind: 'logs', body: { replica: 'r', lines: 1e9 } }), why: /logs: a malformed body/ },
    { name: 'a rollout override', value: req({ kind: 'rollout', body: { model: 'chat', how: 'abort', by: 'llmgw ctl' } }), why: null },
    { name: 'a rollout override that neither promotes nor aborts', value: req({ kind: 'rollout', body: { model: 'chat', how: 'delete', by: 'x' } }), why: /rollout: a malformed body/ },
    { name: 'a rollout override that says not who', value: req({ kind: 'rollout', body: { model: 'chat', how: 'promote' } }), why: /rollout: a malformed body/ },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const r = checkRequest(c.key ?? KEY, c.value, c.kvLease ?? '7587');
      if (c.why === null) assert.deepEqual(r, { req: JSON.parse(c.value) });
      else assert.ok('why' in r && c.why.test(r.why), JSON.stringify(r));
    });
  }

  it('live: the lease must still exist and hold the request', () => {
    const keys = [KEY];
    assert.equal(leaseProblem({ ttl: 4, keys }, KEY), null);
    assert.match(leaseProblem({ ttl: -1, keys: [] }, KEY)!, /lease no longer exists/);
    assert.match(leaseProblem({ ttl: 0, keys }, KEY)!, /lease no longer exists/);
    assert.match(leaseProblem({ ttl: 4, keys: ['/llmgw/routers/b'] }, KEY)!, /does not hold it/);
  });
});
