/**
 * The fence (fence.ts's shell functions, spliced into the operations' scripts) rendered, run under
 * dash and bash over a fixture data dir, and parsed with fence.ts's parsers: a look claims and then
 * renews the owner record and reports it (observe's `fence` section); an action of another owner
 * whose record holds is refused with NODE_OWNED, of a lower epoch of the same owner with
 * NODE_FENCED, and the refusal's `llmgw-fence:` line names the record.
 */
import { strict as assert } from 'node:assert';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { Fence } from '../../src/nodes/driver.js';
import { EXIT_FENCE_REFUSED, fenceError, refusalOf } from '../../src/nodes/fence.js';
import { observeScript, parseObservation } from '../../src/nodes/ops/observe.js';
import { stopReplicaScript } from '../../src/nodes/ops/replica-stop.js';
import { rpcWorkerStartScript, rpcWorkerStopScript } from '../../src/nodes/ops/rpc-worker.js';
import { makeDataDir, run, runOk, SHELLS, writeExe, type DataDir } from '../harness/nodes-ops-fixture.js';

const NONCE = '1122334455667788';
const A: Fence = { owner: "ctl-a'$(id)", label: 'llmgw on a', epoch: 7, ttlSeconds: 600 };
const B: Fence = { owner: 'ctl-b', label: 'llmgw on b', epoch: 9, ttlSeconds: 600 };

let fx: DataDir;
before(() => {
  fx = makeDataDir('fence');
});
after(() => fx.remove());

for (const shell of SHELLS) {
  describe(`ops/fence: ${shell}`, () => {
    let dataDir: string;
    before(() => {
      dataDir = join(fx.root, `data-${shell}`);
      mkdirSync(join(dataDir, 'replicas', 'r-1'), { recursive: true });
      mkdirSync(join(dataDir, 'replicas', 'r-0'));
    });
    const look = (f: Fence) => parseObservation(runOk(shell, observeScript(dataDir, NONCE, 5, f)).stdout, '', NONCE, 'n1').fence;

    it('a look claims an unowned node, then renews its own record', () => {
      const first = look(A);
      assert.deepEqual(first && { state: first.state, owner: first.owner, label: first.label, epoch: first.epoch, ttl: first.ttlSeconds }, { state: 'mine', owner: A.owner, label: A.label, epoch: 7, ttl: 600 });
      const seq1 = Number(readFileSync(join(dataDir, '.locks', 'owner'), 'utf8').trim().split(' ')[6]);
      assert.equal(look(A)?.state, 'mine');
      const seq2 = Number(readFileSync(join(dataDir, '.locks', 'owner'), 'utf8').trim().split(' ')[6]);
      assert.equal(seq2, seq1 + 1, 'the renewal is a write');
    });

    it("another owner's look sees the record and leaves it", () => {
      const v = look(B);
      assert.deepEqual(v && { state: v.state, owner: v.owner, epoch: v.epoch }, { state: 'other', owner: A.owner, epoch: 7 });
      assert.equal(look(A)?.state, 'mine');
    });

    it("another owner's action is refused: NODE_OWNED, the replica left alone", () => {
      const res = run(shell, stopReplicaScript(dataDir, 'r-1', 0, B));
      assert.equal(res.code, EXIT_FENCE_REFUSED, res.stderr);
      const r = refusalOf(res.stderr);
      assert.ok(r);
      assert.deepEqual({ state: r.state, owner: r.owner, label: r.label, epoch: r.epoch }, { state: 'other', owner: A.owner, label: A.label, epoch: 7 });
      assert.equal(fenceError('n1', 'stop replica r-1', B, r).code, 'NODE_OWNED');
    });

    it('a lower epoch of the same owner is refused: NODE_FENCED; the current epoch acts', () => {
      // a stop of a replica that is not there checks nothing; this one is (its dir), so epoch 8 is recorded
      runOk(shell, stopReplicaScript(dataDir, 'r-0', 0, { ...A, epoch: 8 }));
      const res = run(shell, stopReplicaScript(dataDir, 'r-1', 0, A));
      assert.equal(res.code, EXIT_FENCE_REFUSED, res.stderr);
      const r = refusalOf(res.stderr);
      assert.ok(r);
      assert.equal(r.state, 'newer-epoch');
      assert.equal(fenceError('n1', 'stop replica r-1', A, r).code, 'NODE_FENCED');
      runOk(shell, stopReplicaScript(dataDir, 'r-1', 0, { ...A, epoch: 8 }));
    });

    it("an RPC worker's start and stop carry the fence too: another owner's are refused, nothing started or removed", () => {
      const eng = join(dataDir, 'eng');
      mkdirSync(eng, { recursive: true });
      writeExe(join(eng, 'llama-server'), 'exit 0\n');
      writeExe(join(eng, 'rpc-server'), 'sleep 60\n');
      const start = run(shell, rpcWorkerStartScript({ dataDir, id: 'w-1', host: '127.0.0.1', port: 24999, engineBinary: join(eng, 'llama-server'), args: [], stateHead: '{"id":"w-1"', fence: B }));
      assert.equal(start.code, EXIT_FENCE_REFUSED, start.stderr);
      assert.equal(refusalOf(start.stderr)?.state, 'other');
      assert.equal(existsSync(join(dataDir, 'rpc', 'w-1')), false, 'nothing started');
      mkdirSync(join(dataDir, 'rpc', 'w-0'), { recursive: true });
      const stop = run(shell, rpcWorkerStopScript(dataDir, 'w-0', 0, B));
      assert.equal(stop.code, EXIT_FENCE_REFUSED, stop.stderr);
      assert.ok(existsSync(join(dataDir, 'rpc', 'w-0')), 'nothing removed');
      runOk(shell, rpcWorkerStopScript(dataDir, 'w-0', 0, { ...A, epoch: 8 }));
      assert.equal(existsSync(join(dataDir, 'rpc', 'w-0')), false);
    });
  });
}
