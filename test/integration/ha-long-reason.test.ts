/**
 * One long, hostile engine error under HA (#37 item 2, #36 item 6): two real `llmgw serve` instances
 * on a real etcd, one sshd node. Model `bad` runs on an engine `path:` wrapper that prints
 * llama.cpp's `unknown model architecture: '…'` with 700 KiB of architecture name and an OSC 52
 * clipboard write in it, then exits 1; model `kev` fails as llama-server fails on an unknown
 * architecture. Both park; etcd's state record shows both parked (the save was not refused); no
 * ETCD_VALUE_TOO_LARGE is logged; `bad`'s reason is at most 2 KiB; a view-stream client gets a
 * `view` frame; `ctl status` and `ctl events` print no ESC byte, and neither does the serve log; a
 * SIGKILL of the leader keeps both parked. And
 * (#37 item 6) `ctl logs --lines 10000` of a 3 MB replica log through the standby answers within
 * 5 s, at most 1 MiB, saying it was truncated.
 */
import { strict as assert } from 'node:assert';
import { appendFileSync, chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { Etcd3 } from 'etcd3';
import { REASON_MAX_BYTES } from '../../src/errors/catalogue.js';
import { runCli } from '../harness/cli.js';
import { modelYaml, startTestFleet, type TestFleet } from '../harness/controller.js';
import { startEtcd, type EtcdInstance } from '../harness/etcd.js';
import { agreedLeader, spawnServe, type ServeProc, procsDiag } from '../harness/serve-proc.js';
import { until } from '../harness/wait.js';

const LEASE_S = 4;
const HA = (endpoint: string): string[] => ['--etcd', endpoint, '--lease-ttl', `${LEASE_S}s`, '--renew-deadline', '3s', '--retry-period', '1s'];
const ARCH_BYTES = 700 * 1024;

interface ModelJson {
  name: string;
  phase: string;
  lastError: { code: string; message: string } | null;
  parked: { lastError: { code: string; message: string } } | null;
}

let etcd: EtcdInstance;
let fleet: TestFleet;
let procs: ServeProc[] = [];
let client: Etcd3;
let wrapperDir = '';

const diag = (): string => procsDiag(procs, 3000);

async function models(p: ServeProc): Promise<Record<string, ModelJson>> {
  const r = await p.admin<{ models: ModelJson[] }>('/models');
  return Object.fromEntries(r.models.map((m) => [m.name, m]));
}

before(async () => {
  [etcd, fleet] = await Promise.all([startEtcd(), startTestFleet({ nodes: 1 })]);
  client = new Etcd3({ hosts: etcd.endpoint });
  // the wrapper answers --version as llama-server does, and fails every start with the long line
  wrapperDir = mkdtempSync(join(tmpdir(), 'llmgw-wrapper-'));
  const wrapper = join(wrapperDir, 'bad-engine.sh');
  writeFileSync(wrapper, [
    '#!/bin/sh',
    `for a in "$@"; do [ "$a" = --version ] && exec ${fleet.engineBinary} --version; done`,
    `big=$(head -c ${ARCH_BYTES} /dev/zero | tr '\\0' A)`,
    `printf "0.00.018.295 E llama_model_load: error loading model: unknown model architecture: '\\033]52;c;ZXZpbA==\\007%s'\\n" "$big"`,
    'exit 1',
    '',
  ].join('\n'));
  chmodSync(wrapper, 0o755);
  const files: Record<string, string | null> = fleet.baseFiles();
  delete files['models/huge.yaml'];
  files['fleet.yaml'] = ['poll_interval: 1h', 'park_after_failures: 3', 'backoff: { initial: 100ms, max: 400ms }', 'placement_reserve: 256MiB', 'stop_grace: 2s', ''].join('\n');
  files['engines/wrapped.yaml'] = ['versions:', '  test:', `    path: ${wrapper}`, ''].join('\n');
  files['profiles/wrapped.yaml'] = ['engine: wrapped@test', 'ctx_size: 256', 'threads: 1', 'parallel: 1', 'memory_overhead: 64MiB', 'start_timeout: 60s', ''].join('\n');
  files['models/bad.yaml'] = modelYaml(fleet.models.good, ['replicas: 1']).replace('profile: tiny', 'profile: wrapped');
  await fleet.push(files, 'fleet: a model whose engine prints a 700 KiB hostile reason, and one failing as usual');
  procs = await Promise.all(['a', 'b'].map((name) => spawnServe({ name, fleet, args: HA(etcd.endpoint) })));
});

after(async () => {
  await Promise.all(procs.map((p) => p.sigkill()));
  client?.close();
  await fleet?.cleanup();
  await etcd?.stop();
  if (wrapperDir) rmSync(wrapperDir, { recursive: true, force: true });
});

describe('a 700 KiB engine error with a terminal escape, under HA on etcd', { timeout: 300_000 }, () => {
  it('both models park, etcd holds both parked, the reason is ≤ 2 KiB and printable, nothing refused', async () => {
    await until('both models parked on both instances', 180_000, async () => {
      for (const p of procs) {
        const m = await models(p).catch(() => ({}) as Record<string, ModelJson>);
        if (m['bad']?.phase !== 'parked' || m['kev']?.phase !== 'parked') return false;
      }
      return true;
    }, { diag });
    const m = await models(procs[0]!);
    const reason = m['bad']!.parked!.lastError;
    assert.equal(reason.code, 'REPLICA_UNKNOWN_ARCHITECTURE');
    assert.ok(Buffer.byteLength(reason.message) <= REASON_MAX_BYTES, `${Buffer.byteLength(reason.message)} bytes`);
    assert.match(reason.message, /unknown model architecture: '\uFFFD\]52;c;ZXZpbA==\uFFFDA+… \(\d+ bytes cut\)$/);
    assert.equal(m['kev']!.parked!.lastError.code, 'REPLICA_UNKNOWN_ARCHITECTURE');

    for (const name of ['bad', 'kev']) {
      const text = await client.get(`/llmgw/state/models/${name}`).string();
      assert.ok(text !== null, `no state entry for ${name} in etcd`);
      const e = JSON.parse(text) as { health?: { parked?: { lastError: { message: string } } | null } };
      assert.ok(e.health?.parked, `${name} is not parked in etcd: ${text.slice(0, 300)}`);
      assert.ok(Buffer.byteLength(text) < 8 * 1024, `${name}'s entry is ${Buffer.byteLength(text)} bytes`);
    }
    for (const p of procs) {
      assert.doesNotMatch(p.out(), /ETCD_VALUE_TOO_LARGE|ETCD_VALUE_TRUNCATED/, `${p.name} logged a refused or cut etcd write`);
      assert.ok(!p.out().includes('\x1b'), `${p.name}'s log carries an ESC byte`);
    }
  });

  it('a view-stream client gets a view frame; ctl status and ctl events print the reason with no ESC byte', async () => {
    const ac = new AbortController();
    const res = await fetch(`http://127.0.0.1:${procs[1]!.adminPort}/admin/v1/view/stream`, { signal: ac.signal });
    assert.equal(res.status, 200);
    let text = '';
    const reader = res.body!.getReader();
    const dec = new TextDecoder();
    while (!/^event: view$/m.test(text)) {
      const { value, done } = await reader.read();
      if (done) break;
      text += dec.decode(value, { stream: true });
    }
    ac.abort();
    assert.match(text, /^event: view$/m, `the stream ended without a view frame: ${text.slice(0, 300)}`);

    for (const p of procs) {
      const server = `http://127.0.0.1:${p.adminPort}`;
      const status = await runCli(['ctl', 'status', '--server', server]);
      assert.equal(status.code, 0, status.stderr);
      assert.match(status.stdout, /bad/);
      assert.match(status.stdout, /unknown model architecture: '\uFFFD\]52;c;ZXZpbA==\uFFFDA+/);
      assert.ok(!status.stdout.includes('\x1b') && !status.stderr.includes('\x1b'), 'ctl status printed an ESC byte');
      const events = await runCli(['ctl', 'events', '--model', 'bad', '--server', server]);
      assert.equal(events.code, 0, events.stderr);
      assert.match(events.stdout, /unknown model architecture/);
      assert.ok(!events.stdout.includes('\x1b') && !events.stderr.includes('\x1b'), 'ctl events printed an ESC byte');
    }
  });

  it('ctl logs --lines 10000 of a 3 MB replica log through the standby: within 5 s, at most 1 MiB, saying it was truncated', async () => {
    let id = '';
    await until('good ready', 120_000, async () => {
      const r = (await models(procs[0]!))['good'] as unknown as { phase: string; replicas: { id: string; phase: string }[] } | undefined;
      id = r?.replicas.find((x) => x.phase === 'ready')?.id ?? '';
      return id !== '';
    }, { diag });
    const line = (i: number): string => `${String(i).padStart(5, '0')} srv  log_server_r: request: POST /v1/chat/completions 127.0.0.1 200 ${'x'.repeat(222)}\n`;
    appendFileSync(join(fleet.nodes[0]!.dataDir, 'replicas', id, 'log'), Array.from({ length: 10_000 }, (_, i) => line(i)).join(''));
    const leader = (await agreedLeader(procs))!.proc;
    const standby = procs.find((p) => p !== leader)!;
    const t0 = performance.now();
    const r = await runCli(['ctl', 'logs', id, '--lines', '10000', '--server', `http://127.0.0.1:${standby.adminPort}`]);
    const ms = performance.now() - t0;
    assert.equal(r.code, 0, r.stderr);
    assert.ok(ms < 5_000, `${Math.round(ms)} ms`);
    assert.match(r.stdout, /\[llmgw: truncated: the first \d+ of \d+ bytes are left out/);
    assert.ok(Buffer.byteLength(r.stdout) <= 1024 * 1024 + 1024, `${Buffer.byteLength(r.stdout)} bytes`);
    assert.ok(r.stdout.includes(line(9_999).trim()), 'the newest line kept');
  });

  it('a SIGKILL of the leader keeps both parked', async () => {
    let leader: ServeProc | null = null;
    await until('one leader', 30_000, async () => (leader = (await agreedLeader(procs))?.proc ?? null) !== null, { diag });
    const epoch = (await agreedLeader(procs))!.epoch;
    const killedAt = Date.now();
    await leader!.sigkill();
    const rest = procs.filter((p) => p !== leader);
    await until('a new leader with a pass', (LEASE_S + 30) * 1000, async () => (await agreedLeader(rest, { epochAbove: epoch, passAfter: killedAt }).catch(() => null)) !== null, { diag });
    const m = await models(rest[0]!);
    assert.equal(m['bad']!.phase, 'parked');
    assert.equal(m['kev']!.phase, 'parked');
    assert.ok(Buffer.byteLength(m['bad']!.parked!.lastError.message) <= REASON_MAX_BYTES);
  });
});
