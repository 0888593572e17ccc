/** ControllerShell: the router/admin API over one view and whoever acts now (pure, fake acts). */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { ControllerShell, type ControllerActs } from '../../src/reconciler/controller-shell.js';
import type { FleetSnapshot, ModelView, ReplicaView } from '../../src/reconciler/view.js';

/** Acts that record every call under their name. */
function recording(name: string, calls: string[]): ControllerActs {
  const rec = (what: string): void => void calls.push(`${name}.${what}`);
  return {
    spec: () => (rec('spec'), null),
    demand: async (m, o) => (rec(`demand(${m},${o?.timeoutMs})`), { kind: 'starting' }),
    touch: (m) => rec(`touch(${m})`),
    hold: (m) => (rec(`hold(${m})`), () => rec(`release(${m})`)),
    retry: async (m) => (rec(`retry(${m})`), { model: m, outcome: 'unparked' }),
    overrideRollout: async (m, how, by) => (rec(`rollout(${m},${how},${by})`), { model: m, outcome: how === 'promote' ? 'promoted' : 'aborted', rollout: { phase: 'promoted', stableDigest: 's', canaryDigest: 'c', step: 0, share: 0, since: 0, until: null, verdict: null } }),
    restart: async () => (rec('restart'), []),
    restartDone: () => (rec('restartDone'), true),
    logs: async (id) => (rec(`logs(${id})`), ''),
    requestPass: async (t) => rec(`pass(${t})`),
  };
}

class Shell extends ControllerShell {
  readonly engineApiKey = 'k'.repeat(16);
  acting: ControllerActs;
  constructor(acts: ControllerActs) {
    super();
    this.acting = acts;
    this.setSnapshot(snap([]));
  }
  protected acts(): ControllerActs {
    return this.acting;
  }
  publish(s: FleetSnapshot): void {
    this.setSnapshot(s);
  }
}

const ready = (id: string): ReplicaView => ({ id, model: 'm', node: 'n', endpoint: 'http://n:1', phase: 'ready', digest: 'd', startedAt: 0 });
const snap = (replicas: ReplicaView[]): FleetSnapshot => ({ models: [{ name: 'm', phase: replicas.length ? 'ready' : 'idle', replicas } as unknown as ModelView] }) as unknown as FleetSnapshot;

describe('ControllerShell', () => {
  it('every acting call goes to whoever acts at the time of the call (a leader, then a standby)', async () => {
    const calls: string[] = [];
    const shell = new Shell(recording('leader', calls));
    await shell.demand('m', { timeoutMs: 5 });
    const release = shell.hold('m');
    shell.acting = recording('standby', calls);
    release(); // the release goes where the hold was taken
    shell.touch('m');
    await shell.retry('m');
    await shell.overrideRollout('m', 'abort', 'ops');
    await shell.restart({ all: true });
    shell.restartDone(['x']);
    await shell.logs('x', 1);
    await shell.requestPass('t');
    shell.spec();
    assert.deepEqual(calls, ['leader.demand(m,5)', 'leader.hold(m)', 'leader.release(m)', 'standby.touch(m)', 'standby.retry(m)', 'standby.rollout(m,abort,ops)', 'standby.restart', 'standby.restartDone', 'standby.logs(x)', 'standby.pass(t)', 'standby.spec']);
  });

  it('the view is what was published last: model, ready replicas, listeners, and a wait that ends when one is ready', async () => {
    const shell = new Shell(recording('a', []));
    const seen: number[] = [];
    const off = shell.onSnapshot((s) => seen.push(s.models[0]!.replicas.length));
    assert.equal(shell.model('m')?.phase, 'idle');
    assert.deepEqual(shell.readyReplicas('m'), []);
    const waiting = shell.waitReady('m', { timeoutMs: 5_000 });
    shell.publish(snap([ready('r1')]));
    assert.deepEqual((await waiting).map((r) => r.id), ['r1']);
    assert.deepEqual(shell.readyReplicas('m').map((r) => r.id), ['r1']);
    off();
    shell.publish(snap([]));
    assert.deepEqual(seen, [1]);
    assert.equal(shell.model('nope'), null);
  });
});
