/**
 * The whole HA controller, fast: two HaControllers over the fake etcd (test/harness/fake-etcd.ts),
 * fake nodes and a fake clock and timers — election, terms, the term's reconciler acting on the
 * nodes, the published snapshot, and requests a standby forwards through etcd. The leader's etcd
 * connection is cut: it stops acting before its lease can expire, the standby takes over within
 * the lease TTL and a pass, adopts the replica the old leader started (nothing is started twice),
 * and answers a request forwarded by the old leader once that is back as a standby. Never two
 * acting at once, at every step of fake time.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import pino from 'pino';
import { Requests } from '../../src/ha/channel.js';
import { HaController } from '../../src/ha/controller.js';
import { Election } from '../../src/ha/election.js';
import { Reconciler } from '../../src/reconciler/reconciler.js';
import { renderStatus } from '../../src/format/ctl-format.js';
import { statusJson } from '../../src/wire/shape.js';
import { FakeEtcd, type FakeEtcdClient } from '../harness/fake-etcd.js';
import { FakePublished, FakeStateRecord } from '../harness/fake-ha.js';
import { FakeClock, FakeFleetLog, FakeNode, FakeTimers, ticks } from '../harness/fake-node.js';
import { FixedSpec, rng } from '../harness/fixed-spec.js';
import { specOf } from '../harness/reconciler-core.js';

const spec = await specOf((f) => {
  f['fleet.yaml'] = 'park_after_failures: 5\nplacement_reserve: 1GiB\npoll_interval: 1s\nbackoff: { initial: 1s, max: 4s }\n';
  delete f['models/beta.yaml'];
});
const PREFIX = '/llmgw/ha';
const T = { leaseTtlSeconds: 3, renewDeadlineMs: 2_000, retryPeriodMs: 500 };
const POLL_MS = spec.settings.pollIntervalMs;
const silent = pino({ level: 'silent' });

interface Instance {
  readonly id: string;
  readonly client: FakeEtcdClient;
  readonly election: Election;
  readonly ha: HaController;
}

class HaWorld {
  readonly clock = new FakeClock();
  readonly timers = new FakeTimers(this.clock);
  readonly etcd = new FakeEtcd(this.clock);
  readonly log = new FakeFleetLog();
  readonly nodes = new Map(Object.keys(spec.nodes).map((n) => [n, new FakeNode(n, this.clock, this.log, new Set(), 2)]));
  readonly instances: Instance[];
  private replicaSeq = 0;

  /** `seed`: each etcd call of each instance answered after 1–4 ticks, varied (0: one tick each). */
  constructor(ids: readonly string[], seed = 0) {
    const random = rng(seed);
    const time = { now: this.clock.now, timers: this.timers };
    this.instances = ids.map((id) => {
      const client = this.etcd.client(id);
      if (seed !== 0) client.latency = () => 1 + Math.floor(random() * 4);
      const election = new Election(client, { prefix: PREFIX, id, label: `${id}.test`, ...T, clock: this.clock.now, monotonic: this.clock.monotonic, timers: this.timers, logger: silent });
      const stateStore = new FakeStateRecord(election, client, PREFIX);
      const tracker = new FixedSpec(spec);
      const ha = new HaController({
        election,
        published: new FakePublished(election, client, PREFIX),
        requests: new Requests(client, PREFIX, id, time),
        stateStore,
        instance: { id, label: `${id}.test` },
        prefix: PREFIX,
        tracker,
        engineApiKey: 'k'.repeat(16),
        logger: silent,
        time,
        forwardTimeoutMs: 5_000,
        makeReconciler: (t) =>
          new Reconciler({
            tracker,
            status: null,
            driverFor: (n) => this.nodes.get(n.name)!,
            stateStore,
            initialState: t.initialState,
            initialStateProblem: t.initialStateProblem,
            engineApiKey: 'k'.repeat(16),
            logger: silent,
            leader: t.leader,
            control: t.control,
            epoch: () => t.epoch,
            onDeposed: t.onDeposed,
            clock: this.clock.now,
            monotonic: this.clock.monotonic,
            timers: this.timers,
            newReplicaId: (model) => `${model}-${++this.replicaSeq}`,
          }),
      });
      return { id, client, election, ha };
    });
  }

  i(id: string): Instance {
    return this.instances.find((m) => m.id === id)!;
  }
  /** The instances whose controller acts on the fleet now (a term's reconciler, and its view says so). */
  acting(): Instance[] {
    return this.instances.filter((m) => m.ha.reconciler() !== null && m.ha.snapshot().leader);
  }

  /** Fake time passes in steps until `done` holds (or `maxMs`); never two acting at any step. Returns the time it took. */
  async until(done: () => boolean, what: string, maxMs = 20_000, stepMs = 50): Promise<number> {
    const t0 = this.clock.mono;
    for (;;) {
      await ticks(6);
      const acting = this.acting();
      assert.ok(acting.length <= 1, `two instances act at once: ${acting.map((m) => m.id).join(', ')}`);
      if (done()) return this.clock.mono - t0;
      if (this.clock.mono - t0 >= maxMs) assert.fail(`${what}: not after ${maxMs} ms of fake time`);
      this.clock.advance(stepMs);
      this.etcd.expire();
      this.timers.fire();
    }
  }

  /** Waits, in fake time, for a promise the controllers settle. */
  async settle<T>(p: Promise<T>, what: string): Promise<T> {
    let out: { v: T } | { e: unknown } | null = null;
    p.then(
      (v) => (out = { v }),
      (e: unknown) => (out = { e }),
    );
    await this.until(() => out !== null, what);
    const o = out as unknown as { v: T } | { e: unknown };
    if ('e' in o) throw o.e;
    return o.v;
  }

  async stop(): Promise<void> {
    for (const m of this.instances) m.client.restore();
    await this.settle(Promise.all(this.instances.map((m) => m.ha.stop())), 'stopping');
  }
}

const alphaReady = (m: Instance): boolean => m.ha.model('alpha')?.phase === 'ready';

describe('HaController over the fake etcd, with fake nodes and a fake clock', () => {
  for (const seed of [0, 7, 42, 1234]) {
    it(`one leader acts, a standby forwards to it; the leader cut from etcd: the standby takes over within lease + a pass, nothing started twice (etcd latency seed ${seed})`, async () => {
      const started = Date.now();
      const w = new HaWorld(['a', 'b'], seed);
      await w.settle(Promise.all(w.instances.map((m) => m.ha.start())), 'starting');

      // one leader, acting on the nodes: alpha's replica started and ready
      await w.until(() => w.acting().length === 1 && alphaReady(w.acting()[0]!), 'a leader with alpha ready');
      const first = w.acting()[0]!;
      const standby = w.instances.find((m) => m !== first)!;
      assert.equal(w.log.startsOf('alpha').length, 1);
      const replica = w.log.startsOf('alpha')[0]!.id;

      // the standby routes from the published snapshot and says who leads
      await w.until(() => alphaReady(standby) && standby.ha.snapshot().control.leader?.id === first.id, 'the standby sees the published snapshot');
      assert.equal(standby.ha.snapshot().leader, false);
      assert.equal(standby.ha.snapshot().control.notActing?.code, 'CONTROLLER_STANDBY');

      // a request forwarded by the standby, run by the leader's reconciler and answered through etcd
      assert.equal(await w.settle(standby.ha.logs(replica, 10), 'logs forwarded by the standby'), `log of ${replica}\n`);

      // the leader's etcd connection is cut: it stops acting on its own; the standby takes over
      first.client.cut();
      const took = await w.until(() => w.acting().length === 1 && w.acting()[0] === standby && alphaReady(standby) && standby.ha.snapshot().lastPass !== null, 'the standby acting');
      assert.ok(took <= T.leaseTtlSeconds * 1000 + POLL_MS + 500, `took over after ${took} ms of fake time (lease ${T.leaseTtlSeconds} s, pass every ${POLL_MS} ms)`);
      assert.equal(first.ha.reconciler(), null, 'the cut-off leader ended its term');
      // the new leader adopted the replica the old one started: nothing started twice
      await w.until(() => (standby.ha.snapshot().lastPass?.startedAt ?? 0) > w.clock.now() - POLL_MS / 2, 'a pass of the new leader');
      assert.deepEqual(w.log.startsOf('alpha').map((s) => s.id), [replica]);
      assert.deepEqual(standby.ha.model('alpha')?.replicas.map((r) => r.id), [replica]);

      // back in touch, the old leader is a standby, and its forwarded request is answered by the new one
      first.client.restore();
      await w.until(() => first.ha.snapshot().control.leader?.id === standby.id, 'the old leader sees the new one');
      assert.equal(first.ha.snapshot().leader, false);
      assert.equal(await w.settle(first.ha.logs(replica, 10), 'logs forwarded by the old leader'), `log of ${replica}\n`);
      assert.deepEqual(w.log.startsOf('alpha').map((s) => s.id), [replica], 'nothing started twice');

      await w.stop();
      const ms = Date.now() - started;
      assert.ok(ms < 2_000, `the whole failover took ${ms} ms of real time`);
    });
  }

  it('a forged leader key seen by the election is in the control view of /admin/v1/status and in ctl status, on every instance that saw it', async () => {
    const w = new HaWorld(['a', 'b']);
    await w.settle(Promise.all(w.instances.map((m) => m.ha.start())), 'starting');
    await w.until(() => w.acting().length === 1, 'a leader');
    const leader = w.acting()[0]!;
    w.etcd.forge(`${PREFIX}/leader`, { value: JSON.stringify({ id: 'mallory', label: 'forged', since: 1 }), createRevision: 999_999_999_999, modRevision: w.etcd.revision, lease: '0' });
    await w.until(() => leader.ha.snapshot().control.etcd?.keyProblem?.code === 'LEADER_KEY_FORGED', 'the forgery in the leader\'s control view');
    await w.until(() => w.acting().length === 1, 'a leader again');
    const status = statusJson(leader.ha.snapshot());
    assert.equal(status.control.etcd?.keyProblem?.code, 'LEADER_KEY_FORGED');
    assert.ok(status.control.etcd?.keyProblem?.hint.length, 'with its hint');
    assert.match(status.control.etcd!.keyProblem!.at, /^\d{4}-\d\d-\d\dT/);
    const text = renderStatus(status, { at: status.at, revision: status.revision, models: [], total: 0, next: null });
    assert.match(text, /^leader key +PROBLEM .*\[LEADER_KEY_FORGED\]$/m);
    for (const m of w.instances) assert.ok(m.ha.snapshot().control.leader?.id !== 'mallory', `${m.id} follows the forged key`);
    await w.stop();
  });
});
