import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { join } from 'node:path';
import { dirFiles } from '../../src/fleet-spec/dir-files.js';
import { loadFleetSpec } from '../../src/fleet-spec/load.js';
import { minimalFleet, tempFleet } from '../harness/fleet.js';
import { repoRoot } from '../harness/paths.js';
import { buildCase, invalidCases } from '../fixtures/invalid-fleets.js';

describe('fleet spec loading', () => {
  it('loads the minimal fleet into a frozen, typed spec with defaults applied', async () => {
    const f = tempFleet(minimalFleet());
    try {
      const r = await loadFleetSpec(dirFiles(f.dir), null);
      assert.ok(r.ok, JSON.stringify(!r.ok && r.problems));
      const spec = r.spec;
      assert.ok(Object.isFrozen(spec) && Object.isFrozen(spec.models) && Object.isFrozen(spec.models.alpha));
      assert.equal(spec.settings.parkAfterFailures, 5);
      assert.equal(spec.settings.backoff.initialMs, 10_000);
      assert.equal(spec.settings.backoff.maxMs, 300_000);
      assert.equal(spec.settings.statusBranch, 'llmgw/status');
      assert.equal(spec.settings.placementReserveBytes, 2 ** 30);
      assert.equal(spec.nodes['cpu-01']!.port, 22);
      assert.equal(spec.nodes['cpu-01']!.capacity.memoryBytes, 16 * 2 ** 30);
      assert.deepEqual(spec.models.beta!.scaling, { mode: 'on_demand', idleTimeoutMs: 600_000, maxReplicas: 1 });
      assert.deepEqual(spec.models.alpha!.scaling, { mode: 'replicas', replicas: 1 });
      assert.equal(spec.modelNames['gpt-alpha'], 'alpha');
      assert.equal(spec.profiles.chat!.startTimeoutMs, 120_000);
      assert.match(spec.models.alpha!.digest, /^[0-9a-f]{64}$/);
      // routing, queue and the prompt cache take their defaults
      assert.equal(spec.models.alpha!.routing, 'affinity');
      assert.deepEqual(spec.settings.queue, { max: 64, timeoutMs: 60_000 });
      assert.deepEqual(spec.models.alpha!.queue, { max: 64, timeoutMs: 60_000 });
      assert.equal(spec.profiles.chat!.cacheRamBytes, 2 ** 30);
      assert.deepEqual(spec.profiles.chat!.warmup, { prefixes: 8, maxTokens: 16_384, timeoutMs: 10_000 });
    } finally {
      f.cleanup();
    }
  });

  it('routing, queue (a model\'s own fields over fleet.yaml\'s) and cache_ram are read', async () => {
    const files = minimalFleet();
    files['fleet.yaml'] = (files['fleet.yaml'] ?? '') + 'queue: { max: 10, timeout: 5s }\n';
    files['models/alpha.yaml'] += 'routing: least_busy\nqueue: { timeout: 2m }\n';
    files['models/beta.yaml'] += 'queue: { max: 0 }\n';
    files['profiles/chat.yaml'] += 'cache_ram: 256MiB\n';
    files['profiles/chat.yaml'] += 'reranking: true\n';
    const f = tempFleet(files);
    try {
      const r = await loadFleetSpec(dirFiles(f.dir), null);
      assert.ok(r.ok, JSON.stringify(!r.ok && r.problems));
      assert.equal(r.spec.models.alpha!.routing, 'least_busy');
      assert.deepEqual(r.spec.models.alpha!.queue, { max: 10, timeoutMs: 120_000 });
      assert.deepEqual(r.spec.models.beta!.queue, { max: 0, timeoutMs: 5_000 });
      assert.equal(r.spec.profiles.chat!.cacheRamBytes, 256 * 2 ** 20);
      assert.equal(r.spec.profiles.chat!.reranking, true);
    } finally {
      f.cleanup();
    }
  });

  it('a profile\'s warmup is read, and changing it changes no model\'s definition digest (it rolls nothing out)', async () => {
    const files = minimalFleet();
    const f0 = tempFleet(files);
    const f = tempFleet({ ...files, 'profiles/chat.yaml': files['profiles/chat.yaml'] + 'warmup: { prefixes: 16, max_tokens: 65536, timeout: 30s }\n' });
    const off = tempFleet({ ...files, 'profiles/chat.yaml': files['profiles/chat.yaml'] + 'warmup: { prefixes: 0 }\n' });
    try {
      const [a, b, c] = await Promise.all([loadFleetSpec(dirFiles(f0.dir), null), loadFleetSpec(dirFiles(f.dir), null), loadFleetSpec(dirFiles(off.dir), null)]);
      assert.ok(a.ok && b.ok && c.ok, JSON.stringify([a, b, c].map((x) => !x.ok && x.problems)));
      assert.deepEqual(b.spec.profiles.chat!.warmup, { prefixes: 16, maxTokens: 65_536, timeoutMs: 30_000 });
      assert.deepEqual(c.spec.profiles.chat!.warmup, { prefixes: 0, maxTokens: 16_384, timeoutMs: 10_000 });
      for (const m of Object.keys(a.spec.models)) assert.equal(b.spec.models[m]!.digest, a.spec.models[m]!.digest, m);
    } finally {
      f0.cleanup();
      f.cleanup();
      off.cleanup();
    }
  });

  it('refuses an unknown routing, a negative queue and --cache-ram in extra_args', async () => {
    const files = minimalFleet();
    files['models/alpha.yaml'] += 'routing: random\nqueue: { max: -1 }\n';
    files['profiles/chat.yaml'] += 'extra_args: [--cache-ram, "100"]\n';
    const f = tempFleet(files);
    try {
      const r = await loadFleetSpec(dirFiles(f.dir), null);
      assert.ok(!r.ok);
      const paths = r.problems.map((p) => `${p.file}:${p.path}`);
      assert.ok(paths.includes('models/alpha.yaml:/routing'), paths.join(' '));
      assert.ok(paths.includes('models/alpha.yaml:/queue/max'), paths.join(' '));
      assert.ok(paths.includes('profiles/chat.yaml:/extra_args/0'), paths.join(' '));
    } finally {
      f.cleanup();
    }
  });

  it('reads access/keys.yaml limits: per key, per key × model (by alias too) and the models: caps', async () => {
    const files = minimalFleet();
    files['access/keys.yaml'] += [
      '    limits: { requests_per_minute: 60, tokens_per_minute: 10000 }',
      '    model_limits:',
      '      gpt-alpha: { concurrency: 2, requests_per_minute: 10 }',
      'models:',
      '  alpha:',
      '    limits: { requests_per_minute: 5 }',
      '',
    ].join('\n');
    const f = tempFleet(files);
    try {
      const r = await loadFleetSpec(dirFiles(f.dir), null);
      assert.ok(r.ok, JSON.stringify(!r.ok && r.problems));
      const key = r.spec.access.keys[0]!;
      assert.deepEqual(key.limits, { requestsPerMinute: 60, tokensPerMinute: 10000, concurrency: null });
      assert.deepEqual(key.modelLimits, { alpha: { requestsPerMinute: 10, tokensPerMinute: null, concurrency: 2 } });
      assert.deepEqual(r.spec.access.modelLimits, { alpha: { requestsPerMinute: 5, tokensPerMinute: null, concurrency: null } });
      assert.equal(r.spec.profiles.chat!.reranking, false);
    } finally {
      f.cleanup();
    }
  });

  it('reads access/keys.yaml trusted: and isolate_cache: (both false unless set; anything but a boolean refused)', async () => {
    const files = minimalFleet();
    files['access/keys.yaml'] += ['    trusted: true', '  - name: tenant', `    sha256: ${'c'.repeat(64)}`, '    isolate_cache: true', ''].join('\n');
    const f = tempFleet(files);
    try {
      const r = await loadFleetSpec(dirFiles(f.dir), null);
      assert.ok(r.ok, JSON.stringify(!r.ok && r.problems));
      assert.deepEqual(r.spec.access.keys.map((k) => [k.name, k.trusted, k.isolateCache]), [['team', true, false], ['tenant', false, true]]);
    } finally {
      f.cleanup();
    }
    const bad = minimalFleet();
    bad['access/keys.yaml'] += '    trusted: "yes"\n';
    const g = tempFleet(bad);
    try {
      const r = await loadFleetSpec(dirFiles(g.dir), null);
      assert.ok(!r.ok && r.problems.some((p) => p.code === 'SPEC_SCHEMA' && p.path.includes('trusted')), JSON.stringify(!r.ok && r.problems));
    } finally {
      g.cleanup();
    }
  });

  it('validates the example fleet repo', async () => {
    const r = await loadFleetSpec(dirFiles(join(repoRoot, 'example-fleet-repo')), null);
    assert.ok(r.ok, JSON.stringify(!r.ok && r.problems, null, 2));
    assert.equal(Object.keys(r.spec.nodes).length, 3);
    assert.equal(Object.keys(r.spec.engines['llama-cpp']!.versions).length, 2);
    // its 7B chat model's rollout: a shared check from checks/ and one of its own, a two-step canary
    const rollout = r.spec.models['qwen2.5-7b-instruct']!.rollout!;
    assert.deepEqual(rollout.checks.map((c) => [c.name, c.file]), [['arithmetic', 'checks/arithmetic.yaml'], ['answers-in-json', 'models/qwen2.5-7b-instruct.yaml']]);
    assert.deepEqual(rollout.canary?.steps, [0.1, 0.5], 'the example runs a two-step canary (the controller runs canary steps)');
    assert.deepEqual(r.warnings, []);
  });

  it('reports every problem at once', async () => {
    const files = minimalFleet();
    files['models/alpha.yaml'] = files['models/alpha.yaml']!.replace('profile: chat', 'profile: nope');
    files['models/beta.yaml'] = files['models/beta.yaml']!.replace('memory: 6GiB', 'memory: lots');
    files['nodes/cpu-01.yaml'] += 'port: 99999\n';
    const f = tempFleet(files);
    try {
      const r = await loadFleetSpec(dirFiles(f.dir), null);
      assert.equal(r.ok, false);
      if (r.ok) return;
      assert.deepEqual(
        r.problems.map((p) => `${p.file}:${p.line}:${p.code}`),
        ['models/alpha.yaml:4:SPEC_DANGLING_REF', 'models/beta.yaml:5:SPEC_SCHEMA', 'nodes/cpu-01.yaml:6:SPEC_SCHEMA'],
      );
    } finally {
      f.cleanup();
    }
  });

  it('a model\'s download token is read as the secret\'s name and is not part of its definition (digest)', async () => {
    const plain = tempFleet(minimalFleet());
    const files = minimalFleet();
    files['models/alpha.yaml'] += 'token: hf-token\n';
    const withToken = tempFleet(files);
    try {
      const a = await loadFleetSpec(dirFiles(plain.dir), null);
      const b = await loadFleetSpec(dirFiles(withToken.dir), null);
      assert.ok(a.ok && b.ok, JSON.stringify([!a.ok && a.problems, !b.ok && b.problems]));
      assert.equal(a.spec.models.alpha!.token, null);
      assert.equal(b.spec.models.alpha!.token, 'hf-token');
      assert.equal(b.spec.models.alpha!.digest, a.spec.models.alpha!.digest);
    } finally {
      plain.cleanup();
      withToken.cleanup();
    }
  });

  for (const c of invalidCases) {
    it(`rejects: ${c.name}`, async () => {
      const f = tempFleet(buildCase(c));
      try {
        c.setup?.(f.dir);
        const r = await loadFleetSpec(dirFiles(f.dir), null);
        assert.equal(r.ok, false, 'expected the fleet to be rejected');
        if (r.ok) return;
        assert.equal(r.problems.length, 1, `expected one problem, got:\n${r.problems.map((p) => `${p.file}:${p.line} ${p.code} ${p.message}`).join('\n')}`);
        const p = r.problems[0]!;
        assert.equal(p.code, c.expect.code, p.message);
        assert.equal(p.file, c.expect.file);
        assert.equal(p.line ?? 0, c.expect.line, `line of: ${p.message}`);
        if (c.expect.field) assert.equal(p.path, c.expect.field);
        if (c.expect.text) assert.match(p.message, c.expect.text);
        assert.ok(p.hint.length > 10, 'every problem carries a hint');
      } finally {
        f.cleanup();
      }
    });
  }
});
