/** `llmgw ctl` rendering (pure): relative times, aligned tables, and a controller in trouble. */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import type { ModelJson, ModelsJson, NodesJson, StatusJson } from '../../src/wire/shape.js';
import { Reasons } from '../../src/errors/catalogue.js';
import { controlLines, modelDetail, readyCount, relative, renderNodes, renderReplicas, renderStatus, shortDuration, table } from '../../src/format/ctl-format.js';
import { assertGolden } from '../harness/golden.js';

const AT = '2025-03-01T12:00:00.000Z';
const ago = (s: number): string => new Date(Date.parse(AT) - s * 1000).toISOString();

describe('ctl format helpers', () => {
  test('shortDuration and relative', () => {
    assert.deepEqual([0, 999, 45_000, 60_000, 90_000, 3_600_000, 3_660_000, 86_400_000, 90_000_000].map(shortDuration), ['0s', '0s', '45s', '1m', '1m30s', '1h', '1h1m', '1d', '1d1h']);
    assert.equal(relative(ago(7200), AT), '2h ago');
    assert.equal(relative(new Date(Date.parse(AT) + 40_000).toISOString(), AT), 'in 40s');
    assert.equal(relative(AT, AT), 'just now');
    assert.equal(relative(null, AT), '-');
  });

  test('table: aligned, two spaces apart, no trailing blanks', () => {
    assert.equal(table(['A', 'BB', 'C'], [['xxx', '', 'z'], ['y', 'long-value', '']], '  '), '  A    BB          C\n  xxx              z\n  y    long-value');
  });

  test('readyCount: against what is wanted now', () => {
    assert.equal(readyCount({ ready: 1, desired: 1, phase: 'ready' }), '1/1');
    assert.equal(readyCount({ ready: 0, desired: 1, phase: 'pending' }), '0/1');
    assert.equal(readyCount({ ready: 0, desired: 0, phase: 'idle' }), '0/0 idle');
  });

  test('modelDetail: starting and outdated replicas', () => {
    const m = {
      name: 'm',
      phase: 'starting',
      desired: 1,
      ready: 0,
      scaling: { mode: 'replicas', replicas: 1 },
      consecutiveFailures: 0,
      lastError: null,
      parked: null,
      unplaceable: null,
      nextAttemptAt: null,
      replicas: [{ id: 'm-1', model: 'm', node: 'n', endpoint: '', phase: 'starting', digest: 'd', outdated: false, startedAt: AT }],
    } as unknown as ModelJson;
    assert.equal(modelDetail(m, AT), 'starting 1 replica');
    const outdated = { ...m, phase: 'ready', ready: 1, replicas: [{ ...m.replicas[0]!, phase: 'ready', outdated: true }] } as ModelJson;
    assert.equal(modelDetail(outdated, AT), 'replicas on an older definition are being replaced');
  });
});

describe('ctl status: a controller in trouble', () => {
  test('rejected revision with its problems, failed sync with hint, unreachable node, failed pass, not the leader (golden)', () => {
    const status: StatusJson = {
      at: AT,
      leader: false,
      control: {
        mode: 'etcd',
        instance: { id: 'ctl-b-1a2b3c4d', label: 'llmgw on ctl-b (state dir /var/lib/llmgw)' },
        leader: null,
        notActing: { code: 'LEADER_UNAVAILABLE', message: 'etcd is not reachable from this instance: etcd did not answer (14 UNAVAILABLE)', hint: Reasons.LEADER_UNAVAILABLE.hint },
        etcd: {
          reachable: false,
          error: { code: 'ETCD_UNAVAILABLE', message: 'etcd did not answer (14 UNAVAILABLE)', hint: Reasons.ETCD_UNAVAILABLE.hint },
          keyProblem: { code: 'LEADER_KEY_FORGED', message: 'the leader key at revision 812 was not written by a leader of this etcd (attached to no lease): removed, not followed', hint: Reasons.LEADER_KEY_FORGED.hint, at: ago(120) },
        },
        forgedEpochs: [],
      },
      revision: '3f2a9c1e0b7d55aa',
      spec: {
        valid: false,
        rejected: {
          revision: '9e8d7c6b5a4f3e2d',
          code: 'SPEC_REJECTED',
          hint: Reasons.SPEC_REJECTED.hint,
          problems: [
            { file: 'models/chat.yaml', line: 4, col: 10, path: '/profile', code: 'SPEC_DANGLING_REF', message: 'profile "fast" does not exist', hint: Reasons.SPEC_DANGLING_REF.hint },
            { file: 'fleet.yaml', line: null, col: null, path: '', code: 'SPEC_SCHEMA', message: 'unknown field "pol_interval"', hint: Reasons.SPEC_SCHEMA.hint },
          ],
        },
      },
      sync: { lastOk: ago(600), error: { code: 'GIT_UNREACHABLE', message: 'connect ECONNREFUSED 10.0.0.9:443', hint: Reasons.GIT_UNREACHABLE.hint } },
      statusWrite: { lastOk: null },
      stateError: null,
      lastPass: { startedAt: ago(5), durationMs: 30_250, result: 'error', actions: 0, error: { code: 'NODE_TIMEOUT', message: 'observing node node-2 took longer than 30000 ms', hint: Reasons.NODE_TIMEOUT.hint } },
      models: { total: 0, desired: 0, ready: 0, byPhase: { parked: 0, unplaceable: 0, failing: 0, starting: 0, pending: 0, degraded: 0, ready: 0, idle: 0 } },
      nodes: { total: 2, reachable: 1, unreachable: [{ name: 'node-2', error: { code: 'NODE_UNREACHABLE', message: 'connect ETIMEDOUT', hint: Reasons.NODE_UNREACHABLE.hint } }] },
    };
    const models: ModelsJson = { at: AT, revision: status.revision, models: [], total: 0, next: null };
    const text = renderStatus(status, models);
    assertGolden('ctl-status-troubled.txt', text);
    assert.match(text, /REJECTED revision 9e8d7c6b5a4f: 2 problems; revision 3f2a9c1e0b7d stays in force/);
    assert.match(text, /models\/chat\.yaml:4: profile "fast" does not exist \[SPEC_DANGLING_REF\]/);
    assert.match(text, /git sync +FAILED: connect ECONNREFUSED 10\.0\.0\.9:443 \[GIT_UNREACHABLE\]; last ok 10m ago/);
    assert.match(text, /^controller +standby \(llmgw on ctl-b \(state dir \/var\/lib\/llmgw\)\); leader: NONE$/m);
    assert.match(text, /^not acting +etcd is not reachable from this instance: .* \[LEADER_UNAVAILABLE\]$/m);
    assert.match(text, /^etcd +UNREACHABLE: etcd did not answer \(14 UNAVAILABLE\) \[ETCD_UNAVAILABLE\]$/m);
    assert.match(text, /^leader key +PROBLEM 2m ago: the leader key at revision 812 was not written by a leader of this etcd .* \[LEADER_KEY_FORGED\]$/m);
    assert.match(text, /^ +hint: The etcd leader key held a value/m);
    // each of these lines is a problem to act on, hints included: the status page shows them in red
    const lines = controlLines(status, AT);
    assert.deepEqual(lines.filter(([, , problem]) => !problem), []);
    assert.deepEqual(lines.filter(([k]) => k !== '').map(([k]) => k), ['controller', 'not acting', 'etcd', 'leader key']);
  });

  test('a leader that passed over forged epochs: each one a FORGED EPOCH line with its code and hint, the leader line unchanged', () => {
    const forged = [
      { code: 'STATUS_EPOCH_FORGED', message: 'status branch commit 0123456789ab carries Llmgw-Epoch 999999999999, above etcd\'s revision 812', hint: Reasons.STATUS_EPOCH_FORGED.hint },
      { code: 'NODE_EPOCH_FORGED', message: 'node node-1: took over its owner record of epoch 5120', hint: Reasons.NODE_EPOCH_FORGED.hint },
    ];
    const status: StatusJson = {
      at: AT,
      leader: true,
      control: {
        mode: 'etcd',
        instance: { id: 'ctl-a-1', label: 'llmgw on ctl-a' },
        leader: { id: 'ctl-a-1', label: 'llmgw on ctl-a', since: ago(60), epoch: 812, self: true },
        notActing: null,
        etcd: { reachable: true, error: null, keyProblem: null },
        forgedEpochs: forged,
      },
      revision: null,
      spec: { valid: true, rejected: null },
      sync: { lastOk: ago(1), error: null },
      statusWrite: { lastOk: ago(1) },
      stateError: null,
      lastPass: null,
      models: { total: 0, desired: 0, ready: 0, byPhase: { parked: 0, unplaceable: 0, failing: 0, starting: 0, pending: 0, degraded: 0, ready: 0, idle: 0 } },
      nodes: { total: 1, reachable: 1, unreachable: [] },
    };
    const text = renderStatus(status, { at: AT, revision: null, models: [], total: 0, next: null });
    assert.match(text, /^controller +LEADER of the etcd cluster, epoch 812/m);
    assert.match(text, /^FORGED EPOCH +status branch commit 0123456789ab carries Llmgw-Epoch 999999999999, above etcd's revision 812 \[STATUS_EPOCH_FORGED\]$/m);
    assert.match(text, /^FORGED EPOCH +node node-1: took over its owner record of epoch 5120 \[NODE_EPOCH_FORGED\]$/m);
    assert.equal(text.split('\n').filter((l) => /^ +hint: A (status-branch commit|node's owner record)/.test(l)).length, 2, text);
    // the page marks the forged epochs and their hints, not the leader line
    assert.deepEqual(controlLines(status, AT).map(([k, , problem]) => [k, problem === true]), [['controller', false], ['FORGED EPOCH', true], ['', true], ['FORGED EPOCH', true], ['', true]]);
    assert.doesNotMatch(text, /not acting/);
  });

  test('nodes: an unreachable node shows its error, install failures and the hint', () => {
    const nodes: NodesJson = {
      at: AT,
      nodes: [
        { name: 'gpu-1', transport: 'ssh', labels: {}, reachable: false, error: { code: 'NODE_HOST_KEY_MISMATCH', message: 'host key changed', hint: Reasons.NODE_HOST_KEY_MISMATCH.hint }, memory: null, diskFreeBytes: null, capacity: null, engines: [], engineInstallFailures: { 'llama.cpp@b1': 3 }, replicas: 0 },
      ],
    };
    const text = renderNodes(nodes);
    assert.match(text, /gpu-1 +ssh +NO +- +0 +- +host key changed \[NODE_HOST_KEY_MISMATCH\]; llama\.cpp@b1: 3 install failures/);
    assert.match(text, /\nhint: NODE_HOST_KEY_MISMATCH: The node presented a host key/);
    assert.equal(renderNodes({ at: AT, nodes: [] }), 'no nodes in the fleet spec');
    assert.equal(renderReplicas({ at: AT, replicas: [] }), 'no replicas');
  });
});
