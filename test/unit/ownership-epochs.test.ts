/**
 * The ownership decision against etcd's revision (pure): a newer epoch of our own cluster on a node is
 * a newer leader only when etcd could have made it; one above etcd's revision (a restore, a forgery) is
 * named to be superseded and the term goes on. And what a takeover leaves to show, and for how long.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import type { NodeFenceView } from '../../src/nodes/driver.js';
import { forgeriesShown, needsBound, ownershipOf, takenOver, TAKEOVER_SHOWN_MS, type NodeFence } from '../../src/reconciler/ownership.js';

const OWNER = 'etcd:abc/llmgw';
const ours = (state: NodeFenceView['state'], epoch: number, seq = 4, over: Partial<NodeFenceView> = {}): NodeFenceView => ({
  state, owner: OWNER, label: 'llmgw HA cluster /llmgw', epoch, renewedAgoSeconds: 2, ttlSeconds: 60, seq, ...over,
});
const other: NodeFenceView = { state: 'other', owner: 'ctl-b', label: 'llmgw on host-b', epoch: 0, renewedAgoSeconds: 3, ttlSeconds: 60, seq: 9 };

describe('ownershipOf with etcd\'s revision as the bound', () => {
  const OWN = 700;
  const cases: { name: string; nodes: NodeFence[]; bound: number | null; acting: boolean; code?: string; deposed?: boolean; own?: number; supersede?: { node: string; epoch: number; seq: number }[]; mentions?: string[] }[] = [
    { name: 'every node mine: acting, bound or not', nodes: [{ node: 'a', fence: ours('mine', OWN) }], bound: 800, acting: true },
    { name: 'a newer epoch within the bound: a newer leader, step down', nodes: [{ node: 'a', fence: ours('newer-epoch', 750) }], bound: 800, acting: false, code: 'NODE_FENCED', deposed: true, mentions: ['epoch 750', "leader's epoch 700", "within etcd's revision 800"] },
    { name: 'a newer epoch equal to the bound is real (a leader key created at the last revision)', nodes: [{ node: 'a', fence: ours('newer-epoch', 800) }], bound: 800, acting: false, code: 'NODE_FENCED', deposed: true },
    { name: 'bound unknown (etcd not read): every newer epoch counts as real', nodes: [{ node: 'a', fence: ours('newer-epoch', 999_999_999_999) }], bound: null, acting: false, code: 'NODE_FENCED', deposed: true },
    {
      name: 'an epoch above the bound (etcd restored, or forged): not deposed, the record named by epoch and seq',
      nodes: [{ node: 'a', fence: ours('newer-epoch', 5120, 37) }], bound: 800, acting: false, code: 'NODE_EPOCH_FORGED', deposed: false,
      supersede: [{ node: 'a', epoch: 5120, seq: 37 }], mentions: ['node a', 'epoch 5120', "etcd's revision 800", '(epoch 700)', 'restored'],
    },
    {
      name: 'several nodes above the bound: all named, the first by name tells',
      nodes: [{ node: 'z', fence: ours('newer-epoch', 9000, 2) }, { node: 'b', fence: ours('newer-epoch', 5120, 37) }, { node: 'c', fence: ours('mine', OWN) }], bound: 800, acting: false, code: 'NODE_EPOCH_FORGED',
      supersede: [{ node: 'b', epoch: 5120, seq: 37 }, { node: 'z', epoch: 9000, seq: 2 }], mentions: ['node b (and z)'],
    },
    {
      name: 'one real newer epoch anywhere wins over forged ones: step down, supersede nothing',
      nodes: [{ node: 'a', fence: ours('newer-epoch', 5120) }, { node: 'b', fence: ours('newer-epoch', 750) }], bound: 800, acting: false, code: 'NODE_FENCED', deposed: true, mentions: ['node b'],
    },
    {
      name: 'a forged epoch comes before another owner (the takeover is ours to do; NODE_OWNED waits for it)',
      nodes: [{ node: 'a', fence: other }, { node: 'b', fence: ours('newer-epoch', 5120) }], bound: 800, acting: false, code: 'NODE_EPOCH_FORGED', supersede: [{ node: 'b', epoch: 5120, seq: 4 }],
    },
    { name: 'a lone controller (epoch 0, bound 0): any higher epoch of its own owner is not its own', nodes: [{ node: 'a', fence: ours('newer-epoch', 3, 8) }], bound: 0, own: 0, acting: false, code: 'NODE_EPOCH_FORGED', supersede: [{ node: 'a', epoch: 3, seq: 8 }] },
    { name: 'a record without its seq (an older node script) is never superseded', nodes: [{ node: 'a', fence: ours('newer-epoch', 5120, 4, { seq: undefined }) }], bound: 800, acting: false, code: 'NODE_FENCED', deposed: true },
    { name: 'another owner only: NODE_OWNED as before', nodes: [{ node: 'a', fence: other }], bound: 800, acting: false, code: 'NODE_OWNED', deposed: false },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const o = ownershipOf(c.nodes, c.own ?? OWN, c.bound);
      assert.equal(o.acting, c.acting);
      if (o.acting) return;
      assert.equal(o.reason.code, c.code);
      if (c.deposed !== undefined) assert.equal(o.deposed, c.deposed);
      assert.deepEqual('supersede' in o ? o.supersede : undefined, c.supersede);
      for (const m of c.mentions ?? []) assert.ok(o.reason.message.includes(m), `${o.reason.message} mentions ${m}`);
    });
  }

  it('needsBound: only a newer epoch makes the decision read etcd', () => {
    assert.equal(needsBound([{ node: 'a', fence: ours('mine', OWN) }, { node: 'b', fence: other }, { node: 'c' }]), false);
    assert.equal(needsBound([{ node: 'a', fence: ours('newer-epoch', 750) }]), true);
  });
});

describe('takenOver: what a look that superseded a record reports', () => {
  it('a record of our own owner taken over is a NODE_EPOCH_FORGED reason; another owner\'s expired record is not', () => {
    const nodes: NodeFence[] = [
      { node: 'b', fence: ours('mine', 700, 38, { tookOverFrom: { owner: OWNER, label: 'llmgw HA cluster /llmgw (leader: x)', epoch: 5120, renewedAgoSeconds: 30 } }) },
      { node: 'a', fence: ours('mine', 700, 5, { tookOverFrom: { owner: 'ctl-b', label: 'llmgw on host-b', epoch: 0, renewedAgoSeconds: 90 } }) },
      { node: 'c', fence: ours('mine', 700) },
      { node: 'd' },
    ];
    const r = takenOver(nodes, 700);
    assert.equal(r.length, 1);
    assert.equal(r[0]!.code, 'NODE_EPOCH_FORGED');
    assert.match(r[0]!.message, /^node b: took over its owner record of epoch 5120 .*at epoch 700$/);
  });
});

describe('forgeriesShown: a takeover is shown for TAKEOVER_SHOWN_MS', () => {
  const r = (m: string) => ({ code: 'NODE_EPOCH_FORGED', message: m });
  it('adds what is seen now, keeps earlier ones within the window, drops older ones, one entry per message', () => {
    const t0 = 1_000_000;
    let kept = forgeriesShown([], [r('node a')], t0);
    assert.deepEqual(kept.map((k) => k.reason.message), ['node a']);
    kept = forgeriesShown(kept, [r('node b'), r('node a')], t0 + 1000);
    assert.deepEqual(kept.map((k) => [k.reason.message, k.at]), [['node a', t0 + 1000], ['node b', t0 + 1000]]);
    kept = forgeriesShown(kept, [], t0 + 1000 + TAKEOVER_SHOWN_MS - 1);
    assert.equal(kept.length, 2);
    assert.deepEqual(forgeriesShown(kept, [], t0 + 1000 + TAKEOVER_SHOWN_MS), []);
  });
});
