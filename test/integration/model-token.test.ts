/**
 * Download tokens (models/<model>.yaml `token:`) against real components: a real sshd node (and the
 * local transport) downloading with curl from a gated origin that answers 401 without the bearer
 * token and otherwise redirects to a second origin (a CDN with a signed URL, as Hugging Face does),
 * and the controller reading the GGUF header over HTTP ranges the same way.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { gguf } from '@huggingface/gguf';
import { ShellNodeDriver } from '../../src/nodes/shell-driver.js';
import { openShell } from '../../src/nodes/transport.js';
import { MemoryEstimator, replicaMemory, shapeFromMetadata } from '../../src/reconciler/memory.js';
import { tokenSecrets } from '../../src/serve/secrets.js';
import type { ModelSpec, NodeSpec } from '../../src/fleet-spec/types.js';
import { writeTinyModel, type TinyModelFile } from '../fixtures/gguf.js';
import { localNodeSpec, sshdNodeSpec, startSshd, type SshdInstance } from '../harness/sshd.js';
import { startGatedOrigin, type GatedOrigin } from '../harness/gated-origin.js';
import { tinyProfile } from '../harness/nodes-driver.js';
import { isCode } from '../harness/errors.js';

const TOKEN = `hf_${randomBytes(16).toString('hex')}`;

let work: string;
let sshd: SshdInstance;
let nodeS: NodeSpec;
let nodeL: NodeSpec;
let s: ShellNodeDriver;
let l: ShellNodeDriver;
let tiny: TinyModelFile;
let origin: GatedOrigin;

/** isCode, and the token never shows in the message. */
function isCodeNoToken(code: string, re?: RegExp) {
  return (e: unknown): boolean => {
    isCode(code, re)(e);
    assert.ok(!(e as Error).message.includes(TOKEN), 'the token is in the error message');
    return true;
  };
}

function modelSpec(source: string, token: string | null): ModelSpec {
  return {
    name: 'gated', file: 'models/gated.yaml', source, sha256: tiny.sha256, profile: 'tiny', scaling: { mode: 'replicas', replicas: 1 },
    aliases: [], nodeSelector: {}, memoryBytes: null, maxConcurrency: null, routing: 'affinity', queue: { max: 64, timeoutMs: 60_000 }, token, rollout: null, digest: 'd',
  };
}

before(async () => {
  work = await mkdtemp(join(tmpdir(), 'llmgw-token-'));
  sshd = await startSshd();
  nodeS = sshdNodeSpec(sshd, { name: 'node-s' });
  nodeL = localNodeSpec(join(work, 'local-data'), { name: 'node-l' });
  s = new ShellNodeDriver(nodeS, openShell(nodeS, { secretsDir: sshd.secretsDir }), {});
  l = new ShellNodeDriver(nodeL, openShell(nodeL, { secretsDir: work }), {});
  tiny = await writeTinyModel(join(work, 'tiny.gguf'), { seed: 7 });
  origin = await startGatedOrigin(tiny.path, TOKEN);
});

after(async () => {
  await s?.close();
  await l?.close();
  await origin?.close();
  await sshd?.stop();
  if (work) await rm(work, { recursive: true, force: true });
});

describe('model download tokens', () => {
  test('with the token, an ssh node and a local node download a gated model: the token goes to the gated origin only, on no argv', async () => {
    for (const d of [s, l]) {
      origin.hubSeen.length = 0;
      origin.cdnSeen.length = 0;
      const r = await d.ensureModel(origin.url, tiny.sha256, { secret: 'hf-token', value: TOKEN });
      assert.equal(r.bytes, tiny.bytes, d.node);
      assert.ok(origin.hubSeen.length > 0 && origin.hubSeen.every((x) => x.auth === `Bearer ${TOKEN}`), `${d.node}: ${JSON.stringify(origin.hubSeen)}`);
      assert.ok(origin.cdnSeen.length > 0 && origin.cdnSeen.every((x) => x.auth === null), `${d.node}: the token followed the redirect to another host`);
      assert.ok([...origin.hubSeen, ...origin.cdnSeen].every((x) => !x.tokenInArgv), `${d.node}: the token was in an argv during the download`);
    }
    const models = join(nodeS.dataDir, 'models');
    const left = execFileSync('ls', ['-a', models], { encoding: 'utf8' });
    assert.ok(!left.includes('.part'), left);
  });

  test('without the token, or with a wrong one, the download fails with the origin\'s 401 and names the secret, never the token', async () => {
    const url = origin.url;
    const other = await writeTinyModel(join(work, 'other.gguf'), { seed: 8 }); // not on the node yet
    await assert.rejects(s.ensureModel(url, other.sha256), isCodeNoToken('MODEL_DOWNLOAD_FAILED', /401/));
    await assert.rejects(s.ensureModel(url, other.sha256, { secret: 'hf-token', value: 'hf_wrong' }), isCodeNoToken('MODEL_DOWNLOAD_FAILED', /401[\s\S]*secret 'hf-token'|secret 'hf-token'[\s\S]*401/));
    await assert.rejects(s.ensureModel(url, other.sha256, { secret: 'hf-token', value: 'two words' }), isCodeNoToken('SECRET_INVALID', /secret 'hf-token'/));
  });

  test('a node with wget but no curl refuses a token download (wget would send the token on through the redirect)', async () => {
    // the local node's shell inherits this process's PATH: every tool of /usr/bin and /bin but curl
    const bin = join(work, 'no-curl-bin');
    await mkdir(bin, { recursive: true });
    for (const dir of ['/usr/bin', '/bin']) {
      for (const name of await readdir(dir)) {
        if (name !== 'curl') await symlink(join(dir, name), join(bin, name)).catch(() => undefined);
      }
    }
    const other = await writeTinyModel(join(work, 'wget-only.gguf'), { seed: 9 });
    const path = process.env['PATH'];
    process.env['PATH'] = bin;
    try {
      origin.hubSeen.length = 0;
      await assert.rejects(l.ensureModel(origin.url, other.sha256, { secret: 'hf-token', value: TOKEN }), isCodeNoToken('ENGINE_TOOL_MISSING', /needs curl on the node/));
      assert.equal(origin.hubSeen.length, 0, 'wget was run');
    } finally {
      process.env['PATH'] = path;
    }
  });

  test('the controller reads a gated GGUF header with the token; without it the estimate says the source needs token:', async () => {
    const profile = tinyProfile();
    const { metadata } = await gguf(tiny.path, { allowLocalFile: true });
    const expected = replicaMemory(shapeFromMetadata(metadata as unknown as Record<string, unknown>, tiny.bytes), profile);
    origin.cdnSeen.length = 0;
    const got = await new MemoryEstimator().estimate(modelSpec(origin.url, 'hf-token'), profile, () => [], async () => TOKEN);
    assert.deepEqual(got, { bytes: expected });
    assert.ok(origin.cdnSeen.length > 0 && origin.cdnSeen.every((x) => x.auth === null), 'the token followed the redirect to another host');
    const denied = await new MemoryEstimator().estimate(modelSpec(origin.url, null), profile);
    assert.ok('error' in denied && /answered 401 \(a gated or private source needs token:/.test(denied.error), JSON.stringify(denied));
    const wrong = await new MemoryEstimator().estimate(modelSpec(origin.url, 'hf-token'), profile, () => [], async () => 'hf_wrong');
    assert.ok('error' in wrong && /answered 401 \(to the bearer token/.test(wrong.error) && !wrong.error.includes('hf_wrong'), JSON.stringify(wrong));
  });

  test('secrets are read by name from the secrets dir: trimmed; missing or path-like is SECRET_NOT_FOUND; not one token is SECRET_INVALID', async () => {
    const dir = join(work, 'secrets');
    await mkdir(dir, { recursive: true });
    await writeFile(join(dir, 'hf-token'), `${TOKEN}\n`, { mode: 0o600 });
    await writeFile(join(dir, 'bad'), 'two words\n');
    const read = tokenSecrets(dir);
    assert.equal(await read('hf-token'), TOKEN);
    await assert.rejects(read('nope'), isCodeNoToken('SECRET_NOT_FOUND', /secret 'nope' not found/));
    await assert.rejects(read('../secrets/hf-token'), isCodeNoToken('SECRET_NOT_FOUND', /not a file name/));
    await assert.rejects(read('bad'), isCodeNoToken('SECRET_INVALID', /not a bearer token/));
    assert.equal((await readFile(join(dir, 'hf-token'), 'utf8')).trim(), TOKEN);
  });
});
