import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { RENDER_SLICE } from '../../src/metrics/model-series.js';
import { createMetrics, type LlmgwMetrics } from '../../src/metrics/registry.js';
import { METRIC_NAMES, MODEL_STATES } from '../../src/metrics/names.js';
import { findSamples, parseExposition, sampleValue, type Sample } from '../../src/metrics/parse.js';
import { STANDALONE, type FleetSnapshot, type ModelView, type NodeView } from '../../src/reconciler/view.js';
import { unplaceableView } from '../harness/fake-fleet-view.js';
import type { ModelSpec } from '../../src/fleet-spec/types.js';
import { modelView, nodeView, snapshot as quietSnapshot } from '../harness/views.js';

function spec(name: string, over: Partial<ModelSpec> = {}): ModelSpec {
  return {
    name,
    file: `models/${name}.yaml`,
    source: `https://example.com/${name}.gguf`,
    sha256: 'a'.repeat(64),
    profile: 'chat',
    scaling: { mode: 'replicas', replicas: 1 },
    aliases: [],
    nodeSelector: {},
    memoryBytes: null,
    maxConcurrency: null,
    routing: 'affinity',
    queue: { max: 64, timeoutMs: 60_000 },
    token: null,
    rollout: null,
    digest: 'd1',
    ...over,
  };
}

const model = (name: string, { digest = 'd1', ...over }: Partial<ModelView> & { digest?: string } = {}): ModelView => modelView(spec(name, { digest }), { ready: 1, ...over });
const node = (name: string, over: Partial<NodeView> = {}): NodeView =>
  nodeView(name, { memory: { totalBytes: 32 * 2 ** 30, availableBytes: 20 * 2 ** 30 }, engines: ['llama-cpp@b5000'], ...over });
const T0 = Date.parse('2025-01-01T00:00:00.000Z');
const snapshot = (over: Partial<FleetSnapshot> = {}): FleetSnapshot => quietSnapshot({ at: T0, lastSyncOk: T0, lastStatusWriteOk: T0 + 10_000, ...over });

async function scrape(m: LlmgwMetrics): Promise<Sample[]> {
  return parseExposition(await m.registry.metrics());
}

const PER_MODEL = [
  'llmgw_model_desired_replicas',
  'llmgw_model_ready_replicas',
  'llmgw_model_consecutive_start_failures',
  'llmgw_model_parked',
  'llmgw_model_unplaceable',
] as const;

const parkedModel = model('new-arch', {
  phase: 'parked',
  desired: 1,
  ready: 0,
  consecutiveFailures: 5,
  lastError: { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: "unknown model architecture: 'zzz'" },
  parked: { since: Date.parse('2025-01-01T00:00:00.000Z'), lastError: { code: 'REPLICA_UNKNOWN_ARCHITECTURE', message: "unknown model architecture: 'zzz'" } },
});
const oversize = model('huge', {
  phase: 'unplaceable',
  ready: 0,
  unplaceable: unplaceableView('needs 14.2 GiB; largest free is 11.8 GiB on cpu-02; 3 nodes checked'),
});

describe('metrics: fleet snapshot', () => {
  it('gives every model every series, 0 being a real value', async () => {
    const m = createMetrics({ defaultMetrics: false });
    m.applySnapshot(snapshot({ models: [model('ok'), parkedModel, oversize, model('idle', { phase: 'idle', desired: 0, ready: 0 })] }));
    const s = await scrape(m);

    for (const name of ['ok', 'new-arch', 'huge', 'idle']) {
      for (const metric of PER_MODEL) assert.notEqual(sampleValue(s, metric, { model: name }), undefined, `${metric}{model=${name}}`);
      assert.equal(findSamples(s, 'llmgw_model_info', { model: name }).length, 1);
      assert.deepEqual(findSamples(s, 'llmgw_model_state', { model: name }).map((x) => x.value), [1], 'one state series, at 1');
    }
    // The parked model: ready 0 present, failures 5, parked 1, and its reason code.
    assert.equal(sampleValue(s, 'llmgw_model_desired_replicas', { model: 'new-arch' }), 1);
    assert.equal(sampleValue(s, 'llmgw_model_ready_replicas', { model: 'new-arch' }), 0);
    assert.equal(sampleValue(s, 'llmgw_model_consecutive_start_failures', { model: 'new-arch' }), 5);
    assert.equal(sampleValue(s, 'llmgw_model_parked', { model: 'new-arch' }), 1);
    assert.equal(sampleValue(s, 'llmgw_model_unplaceable', { model: 'new-arch' }), 0);
    assert.equal(sampleValue(s, 'llmgw_model_state', { model: 'new-arch', state: 'parked' }), 1);
    assert.equal(sampleValue(s, 'llmgw_model_state', { model: 'new-arch', state: 'ready' }), undefined);
    assert.equal(sampleValue(s, 'llmgw_model_last_error_info', { model: 'new-arch', code: 'REPLICA_UNKNOWN_ARCHITECTURE' }), 1);
    // The oversize model: unplaceable 1 with the reason.
    assert.equal(sampleValue(s, 'llmgw_model_unplaceable', { model: 'huge' }), 1);
    assert.equal(sampleValue(s, 'llmgw_model_parked', { model: 'huge' }), 0);
    assert.equal(
      sampleValue(s, 'llmgw_model_unplaceable_reason_info', { model: 'huge', code: 'PLACEMENT_NO_ROOM' }),
      1,
    );
    // A healthy model has no error series; an idle one has desired 0.
    assert.equal(findSamples(s, 'llmgw_model_last_error_info', { model: 'ok' }).length, 0);
    assert.equal(findSamples(s, 'llmgw_model_unplaceable_reason_info', { model: 'ok' }).length, 0);
    assert.equal(sampleValue(s, 'llmgw_model_desired_replicas', { model: 'idle' }), 0);
    assert.equal(sampleValue(s, 'llmgw_model_ready_replicas', { model: 'idle' }), 0);
    assert.equal(sampleValue(s, 'llmgw_model_info', { model: 'ok', digest: 'd1', profile: 'chat' }), 1);
  });

  it('keeps a model\'s series through a replica crash and deletes them when the model leaves', async () => {
    const m = createMetrics({ defaultMetrics: false });
    m.applySnapshot(snapshot({ models: [model('a'), model('b')] }));
    // b's replica crashed: ready 0, starting again — every series still there.
    m.applySnapshot(snapshot({ models: [model('a'), model('b', { phase: 'starting', ready: 0, consecutiveFailures: 1, lastError: { code: 'REPLICA_EXITED', message: 'exit 1' } })] }));
    let s = await scrape(m);
    for (const metric of PER_MODEL) assert.notEqual(sampleValue(s, metric, { model: 'b' }), undefined, metric);
    assert.equal(sampleValue(s, 'llmgw_model_ready_replicas', { model: 'b' }), 0);
    assert.equal(sampleValue(s, 'llmgw_model_last_error_info', { model: 'b', code: 'REPLICA_EXITED' }), 1);

    // b is removed from the fleet repo.
    m.applySnapshot(snapshot({ models: [model('a')] }));
    s = await scrape(m);
    assert.deepEqual(s.filter((x) => x.labels['model'] === 'b'), []);
    for (const metric of PER_MODEL) assert.equal(sampleValue(s, metric, { model: 'a' }), metric.endsWith('replicas') ? 1 : 0);
  });

  it('has exactly one info series per model: a digest change replaces it', async () => {
    const m = createMetrics({ defaultMetrics: false });
    m.applySnapshot(snapshot({ models: [model('a', { digest: 'd1' })] }));
    m.applySnapshot(snapshot({ models: [model('a', { digest: 'd2' })] }));
    const info = findSamples(await scrape(m), 'llmgw_model_info', { model: 'a' });
    assert.equal(info.length, 1);
    assert.deepEqual(info[0]?.labels, { model: 'a', digest: 'd2', profile: 'chat' });
  });

  it('clears the unplaceable reason and the parked state when they end', async () => {
    const m = createMetrics({ defaultMetrics: false });
    m.applySnapshot(snapshot({ models: [parkedModel, oversize] }));
    m.applySnapshot(snapshot({ models: [model('new-arch', { digest: 'd2' }), model('huge')] }));
    const s = await scrape(m);
    assert.equal(sampleValue(s, 'llmgw_model_parked', { model: 'new-arch' }), 0);
    assert.equal(sampleValue(s, 'llmgw_model_unplaceable', { model: 'huge' }), 0);
    assert.equal(findSamples(s, 'llmgw_model_last_error_info').length, 0);
    assert.equal(findSamples(s, 'llmgw_model_unplaceable_reason_info').length, 0);
  });

  it('exports nodes: reachable, memory, engine installs and install failures', async () => {
    const m = createMetrics({ defaultMetrics: false });
    m.applySnapshot(
      snapshot({
        nodes: [
          node('cpu-01', { engineInstallFailures: { 'llama-cpp@b6000': 2 } }),
          node('cpu-02', { reachable: false, memory: null, engines: [] }),
        ],
      }),
    );
    let s = await scrape(m);
    assert.equal(sampleValue(s, 'llmgw_node_reachable', { node: 'cpu-01' }), 1);
    assert.equal(sampleValue(s, 'llmgw_node_reachable', { node: 'cpu-02' }), 0);
    assert.equal(sampleValue(s, 'llmgw_node_memory_capacity_bytes', { node: 'cpu-01' }), 32 * 2 ** 30);
    assert.equal(sampleValue(s, 'llmgw_node_memory_available_bytes', { node: 'cpu-01' }), 20 * 2 ** 30);
    assert.equal(sampleValue(s, 'llmgw_node_memory_capacity_bytes', { node: 'cpu-02' }), undefined, 'unknown memory is absent, not 0');
    assert.equal(sampleValue(s, 'llmgw_node_engine_installs', { node: 'cpu-01', engine: 'llama-cpp', version: 'b5000' }), 1);
    assert.equal(sampleValue(s, 'llmgw_node_engine_installs', { node: 'cpu-01', engine: 'llama-cpp', version: 'b6000' }), 0);
    assert.equal(sampleValue(s, 'llmgw_node_engine_install_failures_total', { node: 'cpu-01', engine: 'llama-cpp', version: 'b6000' }), 2);
    assert.equal(sampleValue(s, 'llmgw_node_engine_install_failures_total', { node: 'cpu-01', engine: 'llama-cpp', version: 'b5000' }), 0);

    // A failure reported directly shows at once; the next snapshot that counts it does not double it.
    m.engineInstall('cpu-01', 'llama-cpp', 'b6000', 'error');
    s = await scrape(m);
    assert.equal(sampleValue(s, 'llmgw_node_engine_install_failures_total', { node: 'cpu-01', engine: 'llama-cpp', version: 'b6000' }), 3);
    m.applySnapshot(snapshot({ nodes: [node('cpu-01', { engineInstallFailures: { 'llama-cpp@b6000': 3 } })] }));
    s = await scrape(m);
    assert.equal(sampleValue(s, 'llmgw_node_engine_install_failures_total', { node: 'cpu-01', engine: 'llama-cpp', version: 'b6000' }), 3);
    assert.equal(findSamples(s, 'llmgw_node_reachable', { node: 'cpu-02' }).length, 0, 'a removed node leaves no series');

    // Installed at last.
    m.engineInstall('cpu-01', 'llama-cpp', 'b6000', 'ok');
    s = await scrape(m);
    assert.equal(sampleValue(s, 'llmgw_node_engine_installs', { node: 'cpu-01', engine: 'llama-cpp', version: 'b6000' }), 1);
    // The engine version leaves the node (no longer needed, no failures listed): its series go.
    m.applySnapshot(snapshot({ nodes: [node('cpu-01')] }));
    s = await scrape(m);
    assert.equal(findSamples(s, 'llmgw_node_engine_installs', { version: 'b6000' }).length, 0);
    assert.equal(findSamples(s, 'llmgw_node_engine_install_failures_total', { version: 'b6000' }).length, 0);
  });

  it('exports the control plane: leader, revision, spec, sync and status times, passes', async () => {
    let now = Date.parse('2025-01-01T00:10:00.000Z');
    const m = createMetrics({ defaultMetrics: false, clock: () => now });
    let s = await scrape(m);
    // Before the first snapshot: a standby-looking instance, with the series present.
    assert.equal(sampleValue(s, 'llmgw_leader'), 0);
    assert.equal(sampleValue(s, 'llmgw_leader_changes_total'), 0);
    assert.equal(sampleValue(s, 'llmgw_reconcile_total', { result: 'ok' }), 0);
    assert.equal(sampleValue(s, 'llmgw_reconcile_total', { result: 'error' }), 0);
    assert.equal(sampleValue(s, 'llmgw_git_sync_last_success_timestamp_seconds'), 0);

    // one pass (a fresh snapshot object each time it is published)
    const afterPass = () =>
      snapshot({
        appliedRevision: 'abc',
        specValid: false,
        rejected: { revision: 'def', problems: [] },
        lastPass: { startedAt: Date.parse('2025-01-01T00:00:00.000Z'), durationMs: 1500, result: 'ok', error: null, actions: 2 },
      });
    m.applySnapshot(afterPass());
    // The same pass published twice is counted once.
    m.applySnapshot(afterPass());
    s = await scrape(m);
    assert.equal(sampleValue(s, 'llmgw_leader'), 1);
    assert.equal(sampleValue(s, 'llmgw_leader_changes_total'), 1);
    assert.equal(sampleValue(s, 'llmgw_fleet_revision_info', { revision: 'abc' }), 1);
    assert.equal(sampleValue(s, 'llmgw_spec_valid'), 0);
    assert.equal(sampleValue(s, 'llmgw_spec_rejected_revision_info', { revision: 'def' }), 1);
    assert.equal(sampleValue(s, 'llmgw_git_sync_last_success_timestamp_seconds'), Date.parse('2025-01-01T00:00:00.000Z') / 1000);
    assert.equal(sampleValue(s, 'llmgw_status_write_last_success_timestamp_seconds'), Date.parse('2025-01-01T00:00:10.000Z') / 1000);
    assert.equal(sampleValue(s, 'llmgw_reconcile_total', { result: 'ok' }), 1);
    assert.equal(sampleValue(s, 'llmgw_reconcile_duration_seconds_count'), 1);
    assert.equal(sampleValue(s, 'llmgw_reconcile_duration_seconds_sum'), 1.5);
    assert.equal(sampleValue(s, 'llmgw_reconcile_last_success_timestamp_seconds'), Date.parse('2025-01-01T00:00:01.500Z') / 1000);

    // The rejected revision is fixed: one revision series, no rejected series.
    m.applySnapshot(snapshot({ appliedRevision: 'ghi', specValid: true, rejected: null }));
    s = await scrape(m);
    assert.deepEqual(findSamples(s, 'llmgw_fleet_revision_info').map((x) => x.labels), [{ revision: 'ghi' }]);
    assert.equal(findSamples(s, 'llmgw_spec_rejected_revision_info').length, 0);
    assert.equal(sampleValue(s, 'llmgw_spec_valid'), 1);

    // Explicit passes: counted from passFinished, and snapshots' lastPass no longer.
    m.passFinished('error', 0.25);
    now += 60_000;
    m.passFinished('ok', 0.5);
    m.applySnapshot(snapshot({ lastPass: { startedAt: Date.parse('2025-01-01T00:11:00.000Z'), durationMs: 500, result: 'ok', error: null, actions: 0 } }));
    s = await scrape(m);
    assert.equal(sampleValue(s, 'llmgw_reconcile_total', { result: 'ok' }), 2);
    assert.equal(sampleValue(s, 'llmgw_reconcile_total', { result: 'error' }), 1);
    assert.equal(sampleValue(s, 'llmgw_reconcile_duration_seconds_count'), 3);
    assert.equal(sampleValue(s, 'llmgw_reconcile_last_success_timestamp_seconds'), now / 1000);

    // Losing leadership counts as a change; saying the same again does not.
    m.leaderChanged(false);
    m.leaderChanged(false);
    m.applySnapshot(snapshot({ leader: false }));
    s = await scrape(m);
    assert.equal(sampleValue(s, 'llmgw_leader'), 0);
    assert.equal(sampleValue(s, 'llmgw_leader_changes_total'), 2);
  });

  it('exports exactly the names in names.ts, following Prometheus conventions', async () => {
    const m = createMetrics();
    assert.deepEqual(m.metricNames(), [...METRIC_NAMES]);
    const types = new Map<string, string>();
    for (const line of (await m.registry.metrics()).split('\n')) {
      const t = /^# TYPE (\S+) (\S+)$/.exec(line);
      if (t?.[1] && t[2]) types.set(t[1], t[2]);
    }
    for (const name of METRIC_NAMES) {
      const type = types.get(name);
      assert.ok(type, `${name} is in the scrape`);
      assert.match(name, /^llmgw_[a-z0-9_]+$/);
      if (type === 'counter') assert.match(name, /_total$/, `counter ${name} ends in _total`);
      else assert.doesNotMatch(name, /_total$/, `${type} ${name} does not end in _total`);
      if (type === 'histogram') assert.match(name, /_seconds$/);
      if (/timestamp/.test(name)) assert.match(name, /_timestamp_seconds$/);
      assert.doesNotMatch(name, /_(ms|milliseconds|kb|mb|gb|mib|gib|minutes|hours)(_|$)/, `${name} uses base units`);
    }
    // The default process metrics are there too (unprefixed, as everywhere).
    assert.ok(types.has('process_cpu_user_seconds_total'));
  });
});

describe('metrics: router series follow the desired models', () => {
  it('the request counter exists at 0 from the snapshot that lists a model; histograms and gauges from its first request; all leave with it (not while a request is in flight)', async () => {
    const m = createMetrics({ defaultMetrics: false });
    m.applySnapshot(snapshot({ models: [model('a'), model('b')] }));
    let s = await scrape(m);
    for (const name of ['a', 'b']) {
      assert.equal(sampleValue(s, 'llmgw_router_requests_total', { model: name, code: '200' }), 0, name);
      // Sized by traffic, not by the catalogue: nothing else for a model that had no request.
      for (const series of ['llmgw_router_request_duration_seconds_bucket', 'llmgw_router_time_to_first_token_seconds_count', 'llmgw_router_in_flight_requests', 'llmgw_router_queue_wait_seconds_count', 'llmgw_router_prompt_tokens_total']) {
        assert.equal(findSamples(s, series, { model: name }).length, 0, `${series} of ${name}`);
      }
    }
    m.router.request('a', 200, 0.05, '');
    s = await scrape(m);
    assert.equal(sampleValue(s, 'llmgw_router_request_duration_seconds_count', { model: 'a' }), 1, 'a has had a request');
    assert.equal(sampleValue(s, 'llmgw_router_request_duration_seconds_bucket', { model: 'a', le: '+Inf' }), 1);
    m.router.request('a', 503, 0.01, 'MODEL_PARKED');
    m.router.upstreamError('a', 'UPSTREAM_CONNECT');
    m.router.inFlight('b', 1);
    m.applySnapshot(snapshot({ models: [] }));
    s = await scrape(m);
    assert.equal(findSamples(s, 'llmgw_router_requests_total', { model: 'a' }).length, 0, 'a left the desired state');
    assert.equal(findSamples(s, 'llmgw_router_request_duration_seconds_count', { model: 'a' }).length, 0);
    assert.equal(findSamples(s, 'llmgw_router_upstream_errors_total', { model: 'a' }).length, 0);
    assert.equal(sampleValue(s, 'llmgw_router_in_flight_requests', { model: 'b' }), 1, 'b still has a request in flight');
    m.router.request('b', 200, 0.2, '');
    m.router.inFlight('b', -1);
    m.applySnapshot(snapshot({ models: [] }));
    s = await scrape(m);
    assert.equal(findSamples(s, 'llmgw_router_in_flight_requests', { model: 'b' }).length, 0);
    assert.equal(findSamples(s, 'llmgw_router_requests_total', { model: 'b' }).length, 0);
  });
});

describe('the per-model series between passes (scrape text reused while no model changed)', () => {
  const body = async (m: LlmgwMetrics): Promise<string> => (await m.scrape()).body;
  const modelLines = (text: string): string[] => text.split('\n').filter((l) => l.startsWith('llmgw_model_')).sort();

  it('a steady pass (equal models, new objects) leaves them as they were; a changed, added or removed model shows at the next scrape', async () => {
    const m = createMetrics({ defaultMetrics: false });
    try {
      m.applySnapshot(snapshot({ models: [model('a'), model('b')] }));
      const first = modelLines(await body(m));
      assert.ok(first.length >= 2 * (PER_MODEL.length + 1), `${first.length} model lines`);
      m.applySnapshot(snapshot({ models: [model('a'), model('b')], lastSyncOk: Date.parse('2025-01-01T00:01:00.000Z') }));
      const steady = await body(m);
      assert.deepEqual(modelLines(steady), first);
      assert.match(steady, /^llmgw_git_sync_last_success_timestamp_seconds 1735689660$/m, 'the rest of the fleet series follow the pass');

      m.applySnapshot(snapshot({ models: [model('a'), model('b', { phase: 'failing', ready: 0, consecutiveFailures: 2, lastError: { code: 'REPLICA_EXITED', message: 'x' } })] }));
      const changed = parseExposition(await body(m));
      assert.equal(sampleValue(changed, 'llmgw_model_state', { model: 'b', state: 'failing' }), 1);
      assert.equal(sampleValue(changed, 'llmgw_model_state', { model: 'b', state: 'ready' }), undefined);
      assert.equal(sampleValue(changed, 'llmgw_model_consecutive_start_failures', { model: 'b' }), 2);
      assert.equal(sampleValue(changed, 'llmgw_model_last_error_info', { model: 'b', code: 'REPLICA_EXITED' }), 1);

      m.applySnapshot(snapshot({ models: [model('a', { digest: 'd2' }), model('c')] }));
      const moved = parseExposition(await body(m));
      assert.deepEqual(findSamples(moved, 'llmgw_model_ready_replicas').map((s) => s.labels.model).sort(), ['a', 'c']);
      assert.equal(sampleValue(moved, 'llmgw_model_info', { model: 'a', digest: 'd2', profile: 'chat' }), 1);
      assert.equal(sampleValue(moved, 'llmgw_model_info', { model: 'a', digest: 'd1', profile: 'chat' }), undefined);
      assert.equal(findSamples(moved, 'llmgw_model_last_error_info').length, 0);
    } finally {
      m.close();
    }
  });
});

describe('the per-model text (written by model-series.ts, in slices)', () => {
  const modelPart = (text: string): string[] => text.split('\n').filter((l) => /^(# (HELP|TYPE) )?llmgw_model_/.test(l));
  const fleetOf = (n: number): ModelView[] =>
    Array.from({ length: n }, (_, i) => {
      const kinds = [model(`m-${i}`), { ...parkedModel, name: `parked-${i}` }, { ...oversize, name: `huge-${i}` }, model(`f-${i}`, { phase: 'failing', ready: 0, consecutiveFailures: 2, lastError: { code: 'REPLICA_EXITED', message: 'a "quoted" \\ line\nbreak' } })];
      return kinds[i % kinds.length]!;
    });

  it('is the text prom-client renders for the same models, line for line and in order', async () => {
    const m = createMetrics({ defaultMetrics: false });
    try {
      for (const models of [[], fleetOf(3), fleetOf(RENDER_SLICE * 2 + 7)]) {
        m.applySnapshot(snapshot({ models }));
        const ours = modelPart((await m.scrape()).body);
        assert.ok(ours.length >= models.length * (PER_MODEL.length + 1), `${ours.length} lines for ${models.length} models`);
        assert.deepEqual(ours, modelPart(await m.registry.metrics()));
      }
    } finally {
      m.close();
    }
  });

  it('gives the event loop a turn while it renders many models', async () => {
    const m = createMetrics({ defaultMetrics: false });
    try {
      m.applySnapshot(snapshot({ models: fleetOf(RENDER_SLICE * 3) }));
      let turned = false;
      setImmediate(() => (turned = true));
      await m.scrape(); // unsliced, its continuation (a microtask) would run before any setImmediate
      assert.ok(turned, 'a setImmediate queued before the scrape ran before it finished');
    } finally {
      m.close();
    }
  });
});

describe('llmgw_forged_epochs', () => {
  it('both codes from the start at 0; counts the snapshot\'s forged epochs per code; back to 0 when they go', async () => {
    const m = createMetrics({ defaultMetrics: false });
    let s = await scrape(m);
    assert.equal(sampleValue(s, 'llmgw_forged_epochs', { code: 'STATUS_EPOCH_FORGED' }), 0);
    assert.equal(sampleValue(s, 'llmgw_forged_epochs', { code: 'NODE_EPOCH_FORGED' }), 0);
    const forgedEpochs = [
      { code: 'STATUS_EPOCH_FORGED', message: 'status branch commit 0123 carries Llmgw-Epoch 999999999999' },
      { code: 'NODE_EPOCH_FORGED', message: 'node a: took over' },
      { code: 'NODE_EPOCH_FORGED', message: 'node b: took over' },
    ];
    m.applySnapshot(snapshot({ control: { ...STANDALONE, forgedEpochs } }));
    s = await scrape(m);
    assert.equal(sampleValue(s, 'llmgw_forged_epochs', { code: 'STATUS_EPOCH_FORGED' }), 1);
    assert.equal(sampleValue(s, 'llmgw_forged_epochs', { code: 'NODE_EPOCH_FORGED' }), 2);
    m.applySnapshot(snapshot());
    s = await scrape(m);
    assert.equal(sampleValue(s, 'llmgw_forged_epochs', { code: 'STATUS_EPOCH_FORGED' }), 0);
    assert.equal(sampleValue(s, 'llmgw_forged_epochs', { code: 'NODE_EPOCH_FORGED' }), 0);
  });
});

describe('llmgw_etcd_write_refused', () => {
  it('with --etcd: state and published at 0; 1 while the snapshot says that record\'s write was refused (ETCD_VALUE_TOO_LARGE); absent alone', async () => {
    const m = createMetrics({ defaultMetrics: false });
    const etcd = (error: { code: string; message: string } | null) => ({ ...STANDALONE, mode: 'etcd' as const, etcd: { prefix: '/llmgw', reachable: true, error, keyProblem: null } });
    m.applySnapshot(snapshot());
    let s = await scrape(m);
    assert.equal(sampleValue(s, 'llmgw_etcd_write_refused', { record: 'state' }), undefined);
    m.applySnapshot(snapshot({ control: etcd(null) }));
    s = await scrape(m);
    assert.equal(sampleValue(s, 'llmgw_etcd_write_refused', { record: 'state' }), 0);
    assert.equal(sampleValue(s, 'llmgw_etcd_write_refused', { record: 'published' }), 0);
    const tooLarge = { code: 'ETCD_VALUE_TOO_LARGE', message: 'the value of /llmgw/published/models/m is 600000 bytes' };
    m.applySnapshot(snapshot({ control: etcd(tooLarge), stateError: tooLarge }));
    s = await scrape(m);
    assert.equal(sampleValue(s, 'llmgw_etcd_write_refused', { record: 'state' }), 1);
    assert.equal(sampleValue(s, 'llmgw_etcd_write_refused', { record: 'published' }), 1);
    // another etcd failure is not a refusal by size
    m.applySnapshot(snapshot({ control: etcd({ code: 'ETCD_FAILED', message: 'x' }) }));
    s = await scrape(m);
    assert.equal(sampleValue(s, 'llmgw_etcd_write_refused', { record: 'state' }), 0);
    assert.equal(sampleValue(s, 'llmgw_etcd_write_refused', { record: 'published' }), 0);
  });
});
