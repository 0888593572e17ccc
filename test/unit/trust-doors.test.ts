import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { decodeUtf8 } from '../../src/fleet-spec/yaml.js';
import { Reasons } from '../../src/errors/catalogue.js';
import { startReplicaScript } from '../../src/nodes/ops/replica-start.js';
import { LlmgwError, reasonOf } from '../../src/errors/catalogue.js';
import { redactUrls } from '../../src/util/redact-url.js';
import { modelJson, statusFiles } from '../../src/wire/shape.js';
import { publishedJson } from '../../src/ha/published.js';
import { fakeSpec } from '../harness/fake-fleet-view.js';
import { dirFiles } from '../../src/fleet-spec/dir-files.js';
import { loadFleetSpec } from '../../src/fleet-spec/load.js';
import { minimalFleet, tempFleet } from '../harness/fleet.js';
import { modelView, snapshot } from '../harness/views.js';
import { operatorSecretEnv, operatorSecretFile, SecretFileError } from '../../src/serve/state-secrets.js';

describe('trust: the smaller doors', () => {
  it('the UTF-8 check is not quadratic: a bad byte near the end of a 256 KiB file is found at once', () => {
    const size = 256 * 1024;
    const bytes = new Uint8Array(size).fill(0x61);
    for (let i = 100; i < size; i += 100) bytes[i] = 0x0a;
    bytes[size - 10] = 0xff;
    const t0 = performance.now();
    const r = decodeUtf8('models/a.yaml', bytes);
    const ms = performance.now() - t0;
    assert.ok('problem' in r);
    assert.equal(r.problem.code, 'SPEC_NOT_UTF8');
    assert.match(r.problem.message, new RegExp(`offset ${size - 10}\\b`));
    assert.equal(r.problem.line, Math.floor((size - 10) / 100) + 1);
    // linear is a millisecond or so; quadratic (256 Ki × 256 Ki steps) would be minutes: 5 s tells them apart on any load
    assert.ok(ms < 5_000, `took ${ms.toFixed(0)} ms`);
  });

  it('the UTF-8 check reports the same offset as a byte-by-byte scan (random small inputs)', () => {
    const scan = (b: Uint8Array): number => {
      let offset = 0;
      for (let i = 1; i <= b.length; i++) {
        try {
          new TextDecoder('utf-8', { fatal: true }).decode(b.subarray(0, i), { stream: true });
          offset = i;
        } catch {
          break;
        }
      }
      return offset;
    };
    const pool = [0x61, 0x0a, 0xc3, 0xa9, 0xe2, 0x82, 0xac, 0xf0, 0x9f, 0x98, 0x80, 0xff, 0x28];
    let seed = 7;
    const rnd = (): number => (seed = (seed * 1103515245 + 12345) % 2 ** 31) % pool.length;
    for (let n = 0; n < 300; n++) {
      const b = new Uint8Array(1 + (n % 40)).map(() => pool[rnd()]!);
      const r = decodeUtf8('models/a.yaml', b);
      if ('text' in r) continue;
      assert.match(r.problem.message, new RegExp(`offset ${scan(b)}\\)`), `bytes ${[...b].join(',')}`);
    }
  });

  it('operator secrets shorter than 16 characters are refused with SECRET_TOO_SHORT naming the secret and its source', () => {
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-secret-'));
    try {
      const file = join(dir, 'admin-token');
      writeFileSync(file, 'x\n');
      assert.throws(
        () => operatorSecretFile(file, 'admin token'),
        (e: unknown) => e instanceof SecretFileError && e.code === 'SECRET_TOO_SHORT' && e.path === file && /admin token/.test(e.message) && e.message.includes(file) && /at least 16/.test(e.message),
      );
      writeFileSync(file, '123456789012345\n');
      assert.throws(() => operatorSecretFile(file, 'webhook secret'), (e: unknown) => e instanceof SecretFileError && e.code === 'SECRET_TOO_SHORT' && /webhook secret/.test(e.message) && /15 characters/.test(e.message));
      writeFileSync(file, '1234567890123456\n');
      assert.equal(operatorSecretFile(file, 'webhook secret'), '1234567890123456');
      assert.throws(
        () => operatorSecretEnv('LLMGW_ADMIN_TOKEN', 'short', 'admin token'),
        (e: unknown) => e instanceof SecretFileError && e.code === 'SECRET_TOO_SHORT' && e.message.includes('$LLMGW_ADMIN_TOKEN'),
      );
      assert.equal(operatorSecretEnv('LLMGW_ADMIN_TOKEN', ' abcdefghijklmnopq ', 'admin token'), 'abcdefghijklmnopq');
      assert.ok(Reasons.SECRET_TOO_SHORT.hint.includes('16'));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('the start script refuses an empty engine key: nothing is launched, the replica dir is gone', () => {
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-start-'));
    try {
      const marker = join(dir, 'launched');
      const script = startReplicaScript({ dataDir: dir, id: 'r1', port: 39_517, argv: ['/bin/sh', '-c', `touch ${marker}`], stateHead: '{}' });
      for (const stdin of ['\n', '']) {
        const r = spawnSync('sh', ['-c', script], { input: stdin, encoding: 'utf8' });
        assert.equal(r.status, 3, r.stderr);
        assert.match(r.stderr, /llmgw-error: SECRET_INVALID no engine API key/);
        assert.equal(existsSync(marker), false, 'a replica was launched without a key');
        assert.deepEqual(readdirSync(join(dir, 'replicas')).filter((n) => !n.startsWith('.')), []);
      }
      // with a key it launches (the same script, so the refusal above is the key's doing)
      const ok = spawnSync('sh', ['-c', script], { input: 'k'.repeat(32) + '\n', encoding: 'utf8' });
      assert.equal(ok.status, 0, ok.stderr);
      for (let i = 0; i < 100 && !existsSync(marker); i++) spawnSync('sleep', ['0.05']);
      assert.ok(existsSync(marker));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('URL credentials are redacted in text: query values and user info, every URL in a message', () => {
    assert.equal(redactUrls('download of https://b.s3.amazonaws.com/m.gguf?X-Amz-Credential=AKIA1234&X-Amz-Signature=deadbeef failed (exit 22)'), 'download of https://b.s3.amazonaws.com/m.gguf?X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED failed (exit 22)');
    assert.equal(redactUrls('HEAD http://u:p@h:8/x?sig=1 and https://a/b'), 'HEAD http://REDACTED@h:8/x?sig=REDACTED and https://a/b');
    assert.equal(redactUrls('hf://org/repo/x.gguf and file:///a?b'), 'hf://org/repo/x.gguf and file:///a?b');
  });

  it('a presigned source never shows in the admin API / status branch / etcd snapshot / error messages', () => {
    const SIG = 'Zm9yZ2VkLXNpZ25hdHVyZS0xMjM0';
    const source = `https://cdn.example.com/m.gguf?X-Amz-Signature=${SIG}&X-Amz-Expires=3600`;
    const base = fakeSpec({ models: { alpha: {} } });
    const spec = { ...base.models.alpha!, source };
    const err = new LlmgwError('MODEL_DOWNLOAD_FAILED', `node n1: download of ${source} failed (exit 22): 403`, { node: 'n1', source });
    assert.ok(!err.message.includes(SIG) && !JSON.stringify(err.detail).includes(SIG));
    assert.ok(!reasonOf(new Error(`HEAD ${source} answered 403`)).message.includes(SIG));
    const m = modelView(spec, { phase: 'failing', consecutiveFailures: 1, lastError: reasonOf(err) });
    const snap = snapshot({ appliedRevision: 'r1', models: [m] });
    const outputs = { admin: JSON.stringify(modelJson(m, 'r1', 0)), status: JSON.stringify(statusFiles(snap, null)), etcd: publishedJson(snap) };
    for (const [where, text] of Object.entries(outputs)) {
      assert.ok(!text.includes(SIG), `${where} carries the signature: ${text}`);
    }
    assert.match(outputs.admin, /X-Amz-Signature=REDACTED/);
  });

  it('validate refuses a source URL with user info (SPEC_INVALID_VALUE at its file and line, the password not echoed) and accepts token: with an http:// source on loopback', async () => {
    const files = minimalFleet();
    files['models/alpha.yaml'] = files['models/alpha.yaml']!.replace(/^source: .*$/m, 'source: https://bob:hunter2-secret@example.com/a.gguf');
    const f = tempFleet(files);
    try {
      const r = await loadFleetSpec(dirFiles(f.dir), null);
      assert.ok(!r.ok);
      const p = r.problems.find((q) => q.path === '/source');
      assert.ok(p && p.code === 'SPEC_INVALID_VALUE' && p.file === 'models/alpha.yaml' && p.line !== null, JSON.stringify(r.problems));
      assert.ok(!JSON.stringify(r.problems).includes('hunter2'));
    } finally {
      f.cleanup();
    }
    const loop = minimalFleet();
    loop['models/alpha.yaml'] = loop['models/alpha.yaml']!.replace(/^source: .*$/m, 'source: http://127.0.0.1:9/a.gguf') + 'token: hf-token\n';
    const g = tempFleet(loop);
    try {
      const r = await loadFleetSpec(dirFiles(g.dir), null);
      assert.ok(r.ok, JSON.stringify(!r.ok && r.problems));
    } finally {
      g.cleanup();
    }
  });
});
