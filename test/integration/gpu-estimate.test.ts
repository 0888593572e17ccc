/**
 * Device-memory estimate versus what llama-server allocated, on Mesa's lavapipe Vulkan device: for
 * three tiny models of different shapes (layers, width, feed-forward, f32/f16) and two context sizes,
 * llmgw's device need from the GGUF header (deviceNeedOf: offloaded layers' weights + their KV cache +
 * the compute-buffer estimate) is within 15 % of the sum of the "Vulkan0 … buffer size" lines of the
 * replica's own load log (-lv 4), with every layer offloaded and with part of them (-ngl N).
 *
 * The CUDA variant (the same cases with @node-llama-cpp/linux-x64-cuda's libggml-cuda.so, device CUDA0,
 * "CUDA0 … buffer size" lines) runs where `nvidia-smi -L` lists a GPU; elsewhere it is reported as
 * skipped with the reason, never counted as a pass.
 */
import { strict as assert } from 'node:assert';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { gguf } from '@huggingface/gguf';
import { allLayers, deviceBytesFor, deviceNeedOf, shapeOfHeader } from '../../src/reconciler/memory.js';
import type { ProfileSpec } from '../../src/fleet-spec/types.js';
import { writeTinyModel, type TinyModelFile, type TinyModelOptions } from '../fixtures/gguf.js';
import { startLlamaServer } from '../harness/llama-server.js';
import { GPU_BACKENDS, gpuEngineArtifact, listedDevice, reportedDeviceBytes, VULKAN, type EngineArtifact, type GpuBackend } from '../harness/gpu-engine.js';

const MIB = 2 ** 20;
const SHAPES: Record<string, TinyModelOptions> = {
  'narrow-3': { layers: 3, seed: 11 },
  'wide-8': { layers: 8, embeddingLength: 256, seed: 12 },
  'ffn-2-f16': { layers: 2, embeddingLength: 512, feedForwardLength: 2048, tensorType: 'f16', seed: 13 },
};

let dir: string;
const arts = new Map<string, EngineArtifact>();
const models: Record<string, TinyModelFile> = {};

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'llmgw-gpu-estimate-'));
  for (const [name, o] of Object.entries(SHAPES)) models[name] = await writeTinyModel(join(dir, `${name}.gguf`), o);
}, { timeout: 5 * 60_000 });

after(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** The backend's artifact, made (and its device checked as listed) once. */
async function artifactOf(backend: GpuBackend): Promise<EngineArtifact> {
  let art = arts.get(backend.name);
  if (!art) {
    art = await gpuEngineArtifact(dir, backend);
    listedDevice(art, backend);
    arts.set(backend.name, art);
  }
  return art;
}

function estimateSuite(backend: GpuBackend): void {
  const dev = backend.device;
  const why = backend.unavailable();
  // Vulkan must run here; another backend without its device: each case skipped with the reason
  const skip = why !== null && backend !== VULKAN ? why : null;
  describe(`device need estimate vs llama-server on ${backend.label}`, { timeout: 10 * 60_000 }, () => {
    before(async () => {
      if (skip !== null) return;
      assert.equal(why, null, `the ${backend.label} device tests need the device here: ${why}`);
      await artifactOf(backend);
    }, { timeout: 20 * 60_000 });
    for (const name of Object.keys(SHAPES)) {
      for (const [ctx, ngl] of [[256, 'all'], [1024, 'all'], [1024, 2]] as const) {
        test(`${name}, ctx ${ctx}, -ngl ${ngl}: within 15 %`, skip !== null ? { skip } : {}, async () => {
          const m = models[name]!;
          const shape = shapeOfHeader(await gguf(m.path, { allowLocalFile: true }), m.bytes);
          const need = deviceNeedOf(shape, { ctxSize: ctx, batchSize: null } as ProfileSpec);
          assert.ok(need, 'the tensor table gives a device need');
          const n = ngl === 'all' ? allLayers(need) : ngl;
          const estimate = deviceBytesFor(need, n);
          const srv = await startLlamaServer({
            dir: (await artifactOf(backend)).dir, model: m.path, testDefaults: false,
            env: { ...backend.env },
            args: ['--threads', '1', '--ctx-size', String(ctx), '--parallel', '1', '--device', dev, '-ngl', String(ngl), '-lv', '4', '--no-webui'],
            timeoutMs: 120_000,
          });
          try {
            const r = reportedDeviceBytes(srv.log(), dev);
            assert.equal(r.offloaded, `${Math.min(n, allLayers(need))}/${allLayers(need)}`, `offloaded layers as asked: ${r.offloaded}`);
            assert.ok(r.total > 0, `the log reports ${dev} buffers:\n${srv.log().slice(-3000)}`);
            const err = Math.abs(estimate - r.total) / r.total;
            console.log(`# ${name} ctx ${ctx} -ngl ${ngl}: estimate ${(estimate / MIB).toFixed(2)} MiB, reported ${(r.total / MIB).toFixed(2)} MiB (${(err * 100).toFixed(1)} %): ${r.lines.map((l) => l.replace(new RegExp(`^.*?(${dev})`), '$1').trim()).join('; ')}`);
            assert.ok(err <= 0.15, `estimate ${(estimate / MIB).toFixed(2)} MiB vs reported ${(r.total / MIB).toFixed(2)} MiB: ${(err * 100).toFixed(1)} % off\n${r.lines.join('\n')}`);
          } finally {
            await srv.stop();
          }
        });
      }
    }
  });
}

for (const b of GPU_BACKENDS) estimateSuite(b);

describe('the local demo', () => {
  test('includes a GPU model where the engine lists a device (lavapipe, with the env it needs), and says why not where it does not', async () => {
    const { demoDevice, localFleetFiles } = await import('../../src/demo/prepare.js');
    const { llamaServerDir } = await import('../harness/llama-server.js');
    const cpu = demoDevice(join(await llamaServerDir(), 'llama-server'));
    assert.ok('none' in cpu && /no GPU backend library/.test(cpu.none), JSON.stringify(cpu));
    const art = await artifactOf(VULKAN);
    const gpu = demoDevice(join(art.dir, 'llama-server'));
    assert.ok(!('none' in gpu), JSON.stringify(gpu));
    assert.match(gpu.device, /^Vulkan0: llvmpipe/);
    assert.deepEqual(gpu.env, { GGML_VK_VISIBLE_DEVICES: '0' });
    const files = localFleetFiles({ engineBinary: join(art.dir, 'llama-server'), modelsDir: '/m', nodeDir: '/n', demoSha: 'a'.repeat(64), kevSha: 'b'.repeat(64), gpu });
    assert.match(files['nodes/local.yaml']!, /env: \{ GGML_VK_VISIBLE_DEVICES: "0" \}/);
    assert.match(files['profiles/gpu.yaml']!, /gpu_layers: all/);
    assert.match(files['models/demo-gpu.yaml']!, /profile: gpu/);
    const { loadFleetSpec } = await import('../../src/fleet-spec/load.js');
    const { dirFiles } = await import('../../src/fleet-spec/dir-files.js');
    const { tempFleet } = await import('../harness/fleet.js');
    const f = tempFleet(files);
    try {
      const r = await loadFleetSpec(dirFiles(f.dir), 'rev');
      assert.ok(r.ok, JSON.stringify(!r.ok && r.problems));
    } finally {
      f.cleanup();
    }
  });
});
