/**
 * Memory estimates from GGUF headers, read where the file is: on the controller, or over a node's
 * shell (NodeDriver.readFileRange, here the local transport running the real script) when a file://
 * source exists only on the node.
 */
import { strict as assert } from 'node:assert';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { MemoryEstimator, type RangeReader } from '../../src/reconciler/memory.js';
import type { NodeFleet } from '../../src/reconciler/node-fleet.js';
import { estimateMemory } from '../../src/reconciler/pass-look.js';
import { ShellNodeDriver } from '../../src/nodes/shell-driver.js';
import { openShell } from '../../src/nodes/transport.js';
import type { FleetSpec, ModelSpec, ProfileSpec } from '../../src/fleet-spec/types.js';
import { writeTinyModel, type TinyModelFile } from '../fixtures/gguf.js';
import { localNodeSpec } from '../harness/sshd.js';
import { startGatedOrigin } from '../harness/gated-origin.js';

let dir: string;
let tiny: TinyModelFile;
let driver: ShellNodeDriver;

const profile = { ctxSize: 512, memoryOverheadBytes: 64 * 2 ** 20, cacheRamBytes: 32 * 2 ** 20 } as ProfileSpec;
const model = (source: string, over: Partial<ModelSpec> = {}): ModelSpec =>
  ({ name: 'm', file: 'models/m.yaml', source, sha256: tiny.sha256, memoryBytes: null, nodeSelector: {}, ...over }) as ModelSpec;

/** The node's file system has the model at `onNode`; the spec names `asNamed` (missing on the controller). */
function nodeWith(asNamed: string, onNode: string, where = 'node-1'): RangeReader & { reads: number } {
  const r = {
    where,
    reads: 0,
    readFileRange: (path: string, offset: number, length: number) => {
      r.reads++;
      return driver.readFileRange(path === asNamed ? onNode : path, offset, length);
    },
  };
  return r;
}

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'llmgw-memory-'));
  tiny = await writeTinyModel(join(dir, 'tiny.gguf'), { seed: 7 });
  const node = localNodeSpec(join(dir, 'data'));
  driver = new ShellNodeDriver(node, openShell(node, { secretsDir: dir }));
});

after(async () => {
  await driver?.close();
  await rm(dir, { recursive: true, force: true });
});

describe('memory estimates', () => {
  test('a memory: override wins; a file on the controller: file size + KV cache + the prompt cache + the profile overhead', async () => {
    const est = new MemoryEstimator();
    assert.deepEqual(await est.estimate(model(`file://${tiny.path}`, { memoryBytes: 123 }), profile), { bytes: 123 });
    const e = await est.estimate(model(`file://${tiny.path}`), profile);
    assert.ok('bytes' in e, JSON.stringify(e));
    assert.ok(e.bytes > tiny.bytes + profile.memoryOverheadBytes + profile.cacheRamBytes, `${e.bytes} should exceed the file (${tiny.bytes}) plus the overhead and the prompt cache`);
    const without = await new MemoryEstimator().estimate(model(`file://${tiny.path}`), { ...profile, cacheRamBytes: 0 });
    assert.ok('bytes' in without);
    assert.equal(e.bytes - without.bytes, profile.cacheRamBytes, 'cache_ram is added to the need');
  });

  test('a file:// source only on the node: the header is read there, and the estimate is the same as from the file itself', async () => {
    const local = await new MemoryEstimator().estimate(model(`file://${tiny.path}`), profile);
    const missing = join(dir, 'only-on-the-node', 'tiny.gguf');
    const absent = nodeWith(missing, join(dir, 'nope.gguf'), 'node-0');
    const node = nodeWith(missing, tiny.path);
    const est = new MemoryEstimator();
    const remote = await est.estimate(model(`file://${missing}`), profile, () => [absent, node]);
    assert.deepEqual(remote, local);
    assert.ok(absent.reads >= 1 && node.reads >= 1);
    // cached by checksum and source: no second read
    const reads = node.reads;
    assert.deepEqual(await est.estimate(model(`file://${missing}`), profile, () => [absent, node]), local);
    assert.equal(node.reads, reads);
  });

  test('an http source behind a redirect (as hf:// sources are): HEAD and range reads follow it; the same estimate as the file', async () => {
    const origin = await startGatedOrigin(tiny.path, null);
    try {
      const local = await new MemoryEstimator().estimate(model(`file://${tiny.path}`), profile);
      assert.deepEqual(await new MemoryEstimator().estimate(model(origin.url), profile), local);
      assert.ok(origin.hubSeen.some((x) => x.method === 'HEAD') && origin.cdnSeen.some((x) => x.method === 'GET'), JSON.stringify([origin.hubSeen, origin.cdnSeen]));
    } finally {
      await origin.close();
    }
  });

  test('known(): what estimate() would answer, without a read — an override, a header read already, an http failure not due again; undefined when it takes a read', async () => {
    const est = new MemoryEstimator();
    const m = model(`file://${tiny.path}`);
    assert.deepEqual(est.known(model(`file://${tiny.path}`, { memoryBytes: 123 }), profile), { bytes: 123 });
    assert.equal(est.known(m, profile), undefined);
    const e = await est.estimate(m, profile);
    assert.deepEqual(est.known(m, profile), e);
    assert.deepEqual(est.known(m, { ...profile, cacheRamBytes: 0 }), await new MemoryEstimator().estimate(m, { ...profile, cacheRamBytes: 0 }), 'the header read, the profile applied anew');
    assert.deepEqual(est.known(model(`file://${tiny.path}`, { memoryBytes: 5 }), { ...profile, gpuLayers: 'all' } as ProfileSpec), await est.estimate(model(`file://${tiny.path}`, { memoryBytes: 5 }), { ...profile, gpuLayers: 'all' } as ProfileSpec), 'an override with gpu_layers: the header read for the device need');
    const refused = model('http://127.0.0.1:1/m.gguf');
    const failed = await est.estimate(refused, profile);
    assert.ok('error' in failed, JSON.stringify(failed));
    assert.deepEqual(est.known(refused, profile), failed);
    const missing = model(`file://${join(dir, 'never.gguf')}`);
    assert.ok('error' in (await est.estimate(missing, profile, () => [])));
    assert.equal(est.known(missing, profile), undefined, 'a file:// source is tried again on the next pass');
    assert.equal(est.reads, 3);
  });

  test('a pass\'s look: every model\'s need; the same look again while every estimate is unchanged, a new one when one changes', async () => {
    const chat = { ...profile, name: 'chat' } as ProfileSpec;
    const specWith = (models: ModelSpec[]): FleetSpec => ({ models: Object.fromEntries(models.map((m) => [m.name, m])), profiles: { chat } }) as unknown as FleetSpec;
    const spec = specWith([
      model(`file://${tiny.path}`, { name: 'read', profile: 'chat' }),
      model(`file://${tiny.path}`, { name: 'fixed', profile: 'chat', memoryBytes: 123 }),
      model(`file://${join(dir, 'gone.gguf')}`, { name: 'gone', profile: 'chat', file: 'models/gone.yaml' }),
    ]);
    const nodes = { rangeReaders: () => [] } as unknown as NodeFleet;
    const est = new MemoryEstimator();
    const first = await estimateMemory(spec, est, nodes, async () => undefined);
    const read = await new MemoryEstimator().estimate(spec.models.read!, chat);
    assert.deepEqual(first.needs, { fixed: 123, gone: null, read: 'bytes' in read ? read.bytes : NaN });
    assert.deepEqual(Object.keys(first.errors), ['gone']);
    assert.match(first.errors.gone!, /memory need unknown/);
    // a file:// source that is not there is read again on every pass (a fresh error): a new look, equal
    const again = await estimateMemory(spec, est, nodes, async () => undefined);
    assert.notEqual(again, first);
    assert.deepEqual(again, first);
    const known = specWith([spec.models.read!, spec.models.fixed!]);
    const a = await estimateMemory(known, est, nodes, async () => undefined);
    assert.equal(await estimateMemory(known, est, nodes, async () => undefined), a, 'every estimate known and unchanged: the same look');
    const other = await estimateMemory(known, new MemoryEstimator(), nodes, async () => undefined);
    assert.notEqual(other, a, 'another estimator: its own look');
    assert.deepEqual(other, a);
  });

  test('nowhere: the reason names the controller and each node tried, and how to get past it', async () => {
    const missing = join(dir, 'nowhere.gguf');
    const e = await new MemoryEstimator().estimate(model(`file://${missing}`), profile, () => [nodeWith(missing, join(dir, 'also-missing.gguf'))]);
    assert.ok('error' in e);
    assert.match(e.error, /memory need unknown/);
    assert.match(e.error, /not on the controller; node-1: .*no such file on the node/);
    assert.match(e.error, /set memory: in models\/m\.yaml/);
    const none = await new MemoryEstimator().estimate(model(`file://${missing}`), profile, () => []);
    assert.ok('error' in none && /no reachable node/.test(none.error), JSON.stringify(none));
  });
});
