/**
 * definitionDigest builds its canonical JSON from a per-profile part computed once; it must hash
 * exactly what canonicalJson gives for the whole definition (the digest decides restarts: a changed
 * digest would restart every replica of a fleet on upgrade). spec-digest.test.ts checks which
 * fields move the digest; this checks the assembly.
 */
import { strict as assert } from 'node:assert';
import { createHash } from 'node:crypto';
import { describe, it } from 'node:test';
import { canonicalJson, definitionDigest, definitionOf } from '../../src/fleet-spec/digest.js';
import type { EngineVersionSpec, ProfileSpec } from '../../src/fleet-spec/types.js';

/** The definition through canonicalJson as a whole, as the digest was first computed. */
function reference(source: string, sha256: string, profile: ProfileSpec, engine: EngineVersionSpec): string {
  return createHash('sha256').update(canonicalJson(definitionOf(source, sha256, profile, engine))).digest('hex');
}

const plain: ProfileSpec = {
  name: 'chat', file: 'profiles/chat.yaml', engine: 'llama-cpp', engineVersion: 'b1', ctxSize: 4096, threads: null, parallel: 2, batchSize: null,
  embeddings: false, reranking: false, extraArgs: [], memoryOverheadBytes: 0, cacheRamBytes: 0, startTimeoutMs: 60_000, gpuLayers: null,
  devices: [], splitMode: null, tensorSplit: [], mainGpu: null, deviceCount: 1,
};
const profiles: ProfileSpec[] = [
  plain,
  { ...plain, threads: 8, batchSize: 512, embeddings: true, reranking: true, extraArgs: ['--flash-attn', '--rope-scaling=yarn', 'a"quote'], cacheRamBytes: 3 * 2 ** 20 + 1 },
  { ...plain, gpuLayers: 'all', devices: ['Vulkan0', 'Vulkan1'], splitMode: 'row', tensorSplit: [3, 1], mainGpu: 1, deviceCount: 2 },
  { ...plain, gpuLayers: 0 },
];
const engines: EngineVersionSpec[] = [
  { engine: 'llama-cpp', version: 'b1', install: { method: 'path', path: '/opt/llama/llama-server' } },
  { engine: 'llama-cpp', version: 'b2', install: { method: 'artifact', url: 'https://example.invalid/x.tar.gz', sha256: 'a'.repeat(64), binary: 'bin/llama-server', fetch: 'node' } },
  { engine: 'llama-cpp', version: 'b3', install: { method: 'build', git: 'https://example.invalid/llama.cpp', ref: 'b3', cmakeFlags: ['-DGGML_VULKAN=ON'], target: 'llama-server' } },
];
const sources = ['hf://org/m-GGUF/m-q4_k_m.gguf', 'https://models.example.invalid/a b/"q".gguf', 'file:///srv/models/ünïcode.gguf'];

describe('definitionDigest', () => {
  it('is the sha256 of canonicalJson of the whole definition, for every profile, engine and source', () => {
    let n = 0;
    for (const p of profiles) for (const e of engines) for (const s of sources) {
      for (const sha of ['B'.repeat(64), 'c'.repeat(64)]) {
        // twice: the second call takes the profile's part from the cache
        assert.equal(definitionDigest(s, sha, p, e), reference(s, sha, p, e), `${p.name} ${JSON.stringify(p.gpuLayers)} ${e.version} ${s}`);
        assert.equal(definitionDigest(s, sha, p, e), reference(s, sha, p, e));
        n++;
      }
    }
    assert.equal(n, profiles.length * engines.length * sources.length * 2);
  });

  it('with placement spread rpc: the canonical JSON with placement in it, and a digest of its own; none: the digest without it', () => {
    for (const p of profiles) for (const e of engines) {
      const s = sources[0]!;
      const sha = 'c'.repeat(64);
      const rpc = createHash('sha256').update(canonicalJson(definitionOf(s, sha, p, e, 'rpc'))).digest('hex');
      assert.equal(definitionDigest(s, sha, p, e, 'rpc'), rpc);
      assert.notEqual(rpc, reference(s, sha, p, e));
      assert.equal(definitionDigest(s, sha, p, e, 'none'), reference(s, sha, p, e));
    }
  });
});
