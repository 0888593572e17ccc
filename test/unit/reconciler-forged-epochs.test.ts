/**
 * The reconciler shell over a node's owner record (fake nodes that keep the record as the node
 * script does, fence.ts): a record of our own cluster above etcd's revision is judged after the look
 * that saw it, named in the fence, taken over by the next look, and the leader acts — never deposed;
 * a record a real newer leader wrote meanwhile (its seq moved) is never superseded; etcd's revision
 * unknown: a newer epoch counts as real.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import pino from 'pino';
import type { RefreshResult } from '../../src/git/tracker.js';
import type { Fence, NodeObservation } from '../../src/nodes/driver.js';
import { LlmgwError, type ReasonRef } from '../../src/errors/catalogue.js';
import { Reconciler, type FleetSource } from '../../src/reconciler/reconciler.js';
import type { SupersedeOf } from '../../src/reconciler/node-fleet.js';
import { emptyState } from '../../src/reconciler/state.js';
import { FakeClock, FakeFleetLog, FakeNode, FakeTimers, ticks } from '../harness/fake-node.js';
import { specOf } from '../harness/reconciler-core.js';

const spec = await specOf((f) => {
  f['fleet.yaml'] = 'poll_interval: 1h\n';
  delete f['models/beta.yaml'];
  delete f['nodes/cpu-02.yaml']; // one node, one owner record
});

class FixedSpec implements FleetSource {
  applied = { spec, revision: 'rev1', warnings: [], at: new Date(0) };
  rejected = null;
  lastSyncOk = null;
  lastSyncError = null;
  async refresh(): Promise<RefreshResult> {
    await ticks(1);
    return { outcome: 'unchanged', head: 'rev1', retries: [], error: null };
  }
}

const OWNER = 'etcd:abc/llmgw';
type OwnerRecord = { owner: string; epoch: number; seq: number };

/** A fake node whose look keeps an owner record by the node script's rules (same owner only). */
class FencedNode extends FakeNode {
  constructor(node: string, clock: FakeClock, log: FakeFleetLog, readonly rec: { current: OwnerRecord }, private readonly fence: () => Fence) {
    super(node, clock, log, new Set());
  }
  looks = 0;
  override async observe(): Promise<NodeObservation> {
    this.looks++;
    const obs = await super.observe();
    const f = this.fence();
    const r = this.rec.current;
    const view = { owner: r.owner, label: 'llmgw HA cluster /llmgw', renewedAgoSeconds: 1, ttlSeconds: 60 };
    if (f.epoch < r.epoch) {
      if (f.supersede?.epoch !== r.epoch || f.supersede.seq !== r.seq) return { ...obs, fence: { ...view, state: 'newer-epoch', epoch: r.epoch, seq: r.seq } };
      this.rec.current = { owner: f.owner, epoch: f.epoch, seq: r.seq + 1 };
      return { ...obs, fence: { ...view, state: 'mine', epoch: f.epoch, seq: r.seq + 1, renewedAgoSeconds: 0, tookOverFrom: { owner: r.owner, label: view.label, epoch: r.epoch, renewedAgoSeconds: 1 } } };
    }
    this.rec.current = { owner: f.owner, epoch: f.epoch, seq: r.seq + 1 };
    return { ...obs, fence: { ...view, state: 'mine', epoch: f.epoch, seq: r.seq + 1, renewedAgoSeconds: 0 } };
  }
}

function setup(record: OwnerRecord, bound: () => Promise<number>, between?: (rec: { current: OwnerRecord }) => void) {
  const clock = new FakeClock();
  const log = new FakeFleetLog();
  const rec = { current: record };
  const deposed: ReasonRef[] = [];
  let boundReads = 0;
  const nodes: FencedNode[] = [];
  const r = new Reconciler({
    tracker: new FixedSpec(),
    status: null,
    driverFor: (n, supersede: SupersedeOf) => {
      const fence = (): Fence => {
        const s = supersede();
        return { owner: OWNER, label: 'leader x', epoch: 700, ttlSeconds: 60, ...(s ? { supersede: s } : {}) };
      };
      const node = new FencedNode(n.name, clock, log, rec, fence);
      nodes.push(node);
      return node;
    },
    stateStore: { path: 'memory', save: async () => true },
    initialState: emptyState,
    engineApiKey: 'k',
    logger: pino({ level: 'silent' }),
    clock: clock.now,
    monotonic: clock.monotonic,
    timers: new FakeTimers(clock),
    epoch: () => 700,
    epochBound: async () => {
      boundReads++;
      const b = await bound();
      between?.(rec); // what happens on the node between this judgement and the next look
      return b;
    },
    onDeposed: (reason) => deposed.push(reason),
  });
  return { r, rec, log, deposed, boundReads: () => boundReads, looks: () => nodes.reduce((n, x) => n + x.looks, 0) };
}

/** The first pass, then what it asked for (the pass that takes the record over). */
async function twoPasses(r: Reconciler): Promise<void> {
  await r.start();
  for (let i = 0; i < 50; i++) await ticks(1);
  await r.requestPass('test');
}

describe('reconciler shell: an owner record above etcd\'s revision', () => {
  it('is judged after the look, named in the fence, taken over by the next look; the leader acts and shows it, never deposed', async () => {
    const s = setup({ owner: OWNER, epoch: 5120, seq: 37 }, async () => 800);
    await twoPasses(s.r);
    assert.deepEqual(s.deposed, []);
    assert.equal(s.boundReads(), 1, 'etcd\'s revision is read once, when a look showed the newer epoch');
    assert.equal(s.rec.current.epoch, 700);
    assert.equal(s.rec.current.seq >= 38, true);
    const snap = s.r.snapshot();
    assert.equal(snap.leader, true);
    assert.equal(snap.control.notActing, null);
    assert.deepEqual(snap.control.forgedEpochs?.map((f) => f.code), ['NODE_EPOCH_FORGED']);
    assert.match(snap.control.forgedEpochs![0]!.message, /took over its owner record of epoch 5120/);
    assert.ok(s.log.starts.length > 0, 'it acts: replicas are started');
  });

  it('a record a real newer leader wrote after the judgement (its seq moved) is not superseded: NODE_FENCED, deposed, nothing started', async () => {
    const s = setup({ owner: OWNER, epoch: 5120, seq: 37 }, async () => 800, (rec) => {
      rec.current = { owner: OWNER, epoch: 790, seq: 38 };
    });
    await twoPasses(s.r);
    assert.deepEqual(s.rec.current, { owner: OWNER, epoch: 790, seq: 38 }, 'left as the newer leader wrote it');
    // (each pass says so again: here no HA shell stops the reconciler on the first)
    assert.ok(s.deposed.length > 0 && s.deposed.every((d) => d.code === 'NODE_FENCED'), JSON.stringify(s.deposed));
    assert.equal(s.r.snapshot().control.notActing?.code, 'NODE_FENCED');
    assert.equal(s.log.starts.length, 0);
  });

  it('a record rewritten after every judgement (a forger, another cluster of the same id) asks one pass at once, then waits for the poll: no loop of passes', async () => {
    let k = 0;
    const s = setup({ owner: OWNER, epoch: 5120, seq: 37 }, async () => 800, (rec) => {
      k++;
      rec.current = { owner: OWNER, epoch: 5120 + k, seq: 37 + k };
    });
    await s.r.start();
    for (let i = 0; i < 200; i++) await ticks(1);
    assert.equal(s.looks(), 2, 'the first pass and the one it asked for');
    assert.deepEqual(s.deposed, []);
    assert.equal(s.r.snapshot().control.notActing?.code, 'NODE_EPOCH_FORGED');
    assert.equal(s.log.starts.length, 0);
  });

  it('etcd\'s revision unreadable: the newer epoch counts as real (NODE_FENCED), the record is left alone', async () => {
    const s = setup({ owner: OWNER, epoch: 5120, seq: 37 }, async () => {
      throw new LlmgwError('ETCD_UNAVAILABLE', 'etcd did not answer');
    });
    await twoPasses(s.r);
    assert.deepEqual(s.rec.current, { owner: OWNER, epoch: 5120, seq: 37 });
    assert.equal(s.deposed[0]?.code, 'NODE_FENCED');
    assert.equal(s.log.starts.length, 0);
  });
});
