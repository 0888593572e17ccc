/** May a new replica restore an old one's slot files (#38 item 3)? Only where node, build, model file and every cache-shaping flag match (pure table). */
import { strict as assert } from 'node:assert';
import { describe, test } from 'node:test';
import type { EngineVersionSpec } from '../../src/fleet-spec/types.js';
import { mayRestoreSlots, slotIdentityOf, type SlotIdentityField } from '../../src/engine-api/slot-restore.js';

const engine = (version = 'b6000', url = 'https://example.test/llama-b6000.zip'): EngineVersionSpec => ({ engine: 'llama', version, install: { method: 'artifact', url, sha256: 'a'.repeat(64), binary: 'llama-server', fetch: 'node' } });
const profile = (extraArgs: string[] = [], ctxSize = 4096, parallel = 2) => ({ ctxSize, parallel, extraArgs });
const model = (sha = '1'.repeat(64)) => ({ sha256: sha });
const base = () => slotIdentityOf('n1', engine(), model(), profile());

describe('mayRestoreSlots', () => {
  const cases: { name: string; neu: ReturnType<typeof base>; field: SlotIdentityField | null }[] = [
    { name: 'a restart: everything the same', neu: base(), field: null },
    { name: 'a scale-up on the same node', neu: slotIdentityOf('n1', engine(), model(), profile()), field: null },
    { name: 'flags that do not shape the cache differ (threads, batch)', neu: slotIdentityOf('n1', engine(), model(), profile(['-t', '4', '--batch-size', '256'])), field: null },
    { name: 'flags spelt the other way (the same values)', neu: slotIdentityOf('n1', engine(), model(), profile([])), field: null },
    { name: 'another node', neu: slotIdentityOf('n2', engine(), model(), profile()), field: 'node' },
    { name: 'another engine version', neu: slotIdentityOf('n1', engine('b6001'), model(), profile()), field: 'build' },
    { name: 'the same version installed from another artifact', neu: slotIdentityOf('n1', engine('b6000', 'https://example.test/other.zip'), model(), profile()), field: 'build' },
    { name: 'another model file', neu: slotIdentityOf('n1', engine(), model('2'.repeat(64)), profile()), field: 'modelFile' },
    { name: 'another context size', neu: slotIdentityOf('n1', engine(), model(), profile([], 8192)), field: 'ctxSize' },
    { name: 'another slot count', neu: slotIdentityOf('n1', engine(), model(), profile([], 4096, 4)), field: 'parallel' },
    { name: 'flash-attention on', neu: slotIdentityOf('n1', engine(), model(), profile(['-fa', 'on'])), field: 'flashAttn' },
    { name: 'flash-attention as a bare switch', neu: slotIdentityOf('n1', engine(), model(), profile(['--flash-attn'])), field: 'flashAttn' },
    { name: 'unified KV', neu: slotIdentityOf('n1', engine(), model(), profile(['-kvu'])), field: 'kvUnified' },
    { name: 'K cache type', neu: slotIdentityOf('n1', engine(), model(), profile(['-ctk', 'q8_0'])), field: 'cacheTypeK' },
    { name: 'V cache type (--x=v form)', neu: slotIdentityOf('n1', engine(), model(), profile(['--cache-type-v=q4_0'])), field: 'cacheTypeV' },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const d = mayRestoreSlots(base(), c.neu);
      if (c.field === null) assert.deepEqual(d, { restore: true });
      else {
        assert.equal(d.restore, false);
        if (d.restore) return;
        assert.equal(d.field, c.field);
        assert.match(d.why, new RegExp(`\\(${c.field}: .+ → .+\\): warmed by replay$`));
      }
    });
  }

  test('the first field that differs is named, with both values', () => {
    const d = mayRestoreSlots(base(), slotIdentityOf('n1', engine(), model(), profile(['-ctk', 'q8_0', '-ctv', 'q8_0'], 2048)));
    assert.deepEqual(d.restore ? null : [d.field, d.old, d.new], ['ctxSize', '4096', '2048']);
    const e = mayRestoreSlots(base(), slotIdentityOf('n1', engine(), model(), profile(['-ctk', 'Q8_0'])));
    assert.deepEqual(e.restore ? null : [e.field, e.old, e.new], ['cacheTypeK', 'default', 'q8_0']);
  });

  test('the last of a repeated flag wins, as llama-server parses them', () => {
    const a = slotIdentityOf('n1', engine(), model(), profile(['-fa', 'on', '--flash-attn', 'off', '-kvu', '--no-kv-unified', '-ctk', 'q8_0', '--cache-type-k', 'f16']));
    assert.deepEqual([a.flashAttn, a.kvUnified, a.cacheTypeK], ['off', 'off', 'f16']);
    assert.deepEqual(mayRestoreSlots(a, slotIdentityOf('n1', engine(), model(), profile(['--flash-attn=off', '-no-kvu', '-ctk', 'f16']))), { restore: true });
  });
});
