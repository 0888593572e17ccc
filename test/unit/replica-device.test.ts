/**
 * GPU use shown (#37 item 8), pure: a replica on a device carries its devices, its layers there (K of
 * M: llama-server's own count where its log says it, else the -ngl asked) and the device bytes
 * placement reserves for it, from the look to the snapshot, and each surface derives its shape and
 * words from that: the admin API's JSON, the standby's published snapshot, `ctl replicas`,
 * `ctl status` and the status page's view.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { parseOffloaded } from '../../src/nodes/ops/observe.js';
import { replicaDeviceBytes, replicaDeviceView } from '../../src/reconciler/device-use.js';
import { allLayers, deviceBytesFor, type DeviceNeed } from '../../src/reconciler/memory.js';
import { buildSnapshot } from '../../src/reconciler/summarize.js';
import { healthByModel } from '../../src/reconciler/state.js';
import type { ReplicaObservation } from '../../src/nodes/driver.js';
import { parsePublished, publishedJson, standbySnapshot } from '../../src/ha/published.js';
import { modelJson, modelsJson, replicasJson, statusJson } from '../../src/wire/shape.js';
import { modelDevicesText, renderReplicas, renderStatus, replicaDeviceText } from '../../src/format/ctl-format.js';
import { pageView } from '../../src/ui/view.js';
import { observed, specOf, stateFor } from '../harness/reconciler-core.js';

const MIB = 2 ** 20;
/** 8 repeating layers of 2 MiB, a 1 MiB output layer, 3 MiB of compute buffers: M = 9. */
const NEED: DeviceNeed = { perLayer: Array(8).fill(2 * MIB), outputBytes: MIB, computeBytes: 3 * MIB, hostPerLayer: Array(8).fill(2 * MIB) };
type Obs = Pick<ReplicaObservation, 'devices' | 'gpuLayers' | 'offloaded' | 'state'>;

describe('a replica on a device: devices, K of M, reserved bytes', () => {
  it('derived from what the node recorded and what llama-server reported', () => {
    const table: [string, Obs, DeviceNeed | undefined, readonly number[], ReturnType<typeof replicaDeviceView>][] = [
      ['host only: nothing', { state: 'ready' }, NEED, [], undefined],
      ['host only (devices empty): nothing', { state: 'ready', devices: [] }, NEED, [], undefined],
      ['-ngl all, the log silent: M of M as asked', { state: 'ready', devices: ['Vulkan0'], gpuLayers: 'all' }, NEED, [], { devices: ['Vulkan0'], layers: 9, of: 9, from: 'asked', reservedBytes: 20 * MIB }],
      ['-ngl 3, the log silent: 3 of 9 as asked', { state: 'ready', devices: ['Vulkan0'], gpuLayers: 3 }, NEED, [], { devices: ['Vulkan0'], layers: 3, of: 9, from: 'asked', reservedBytes: deviceBytesFor(NEED, 3) }],
      ['-ngl 99: at most the model\'s 9', { state: 'starting', devices: ['Vulkan0'], gpuLayers: 99 }, NEED, [], { devices: ['Vulkan0'], layers: 9, of: 9, from: 'asked', reservedBytes: 20 * MIB }],
      ['the log says 3/9 where 4 were asked: what llama-server reported', { state: 'ready', devices: ['Vulkan0'], gpuLayers: 4, offloaded: { layers: 3, of: 9 } }, NEED, [], { devices: ['Vulkan0'], layers: 3, of: 9, from: 'reported', reservedBytes: deviceBytesFor(NEED, 4) }],
      ['the need not known yet (its GGUF not read): -ngl all of an unknown count, bytes unknown', { state: 'ready', devices: ['Vulkan0'], gpuLayers: 'all' }, undefined, [], { devices: ['Vulkan0'], layers: null, of: null, from: 'asked', reservedBytes: null }],
      ['the need not known, -ngl 5: 5 of an unknown count', { state: 'ready', devices: ['Vulkan0'], gpuLayers: 5 }, undefined, [], { devices: ['Vulkan0'], layers: 5, of: null, from: 'asked', reservedBytes: null }],
      ['the need not known, the log says 4/4', { state: 'ready', devices: ['Vulkan0'], gpuLayers: 'all', offloaded: { layers: 4, of: 4 } }, undefined, [], { devices: ['Vulkan0'], layers: 4, of: 4, from: 'reported', reservedBytes: null }],
      ['failed: placement reserves nothing for it', { state: 'failed', devices: ['Vulkan0'], gpuLayers: 'all' }, NEED, [], { devices: ['Vulkan0'], layers: 9, of: 9, from: 'asked', reservedBytes: 0 }],
      ['two devices by tensor_split 3,1: the whole reservation, over both', { state: 'ready', devices: ['Vulkan0', 'Vulkan1'], gpuLayers: 'all' }, NEED, [3, 1], { devices: ['Vulkan0', 'Vulkan1'], layers: 9, of: 9, from: 'asked', reservedBytes: 15 * MIB + 5 * MIB }],
    ];
    for (const [what, r, need, split, want] of table) assert.deepEqual(replicaDeviceView(r, need, split), want, what);
    // the reservation is placement's count for it, device by device
    assert.equal(allLayers(NEED), 9);
    assert.deepEqual([...replicaDeviceBytes({ devices: ['Vulkan0', 'Vulkan1'], gpuLayers: 'all' }, NEED, [3, 1])], [['Vulkan0', 15 * MIB], ['Vulkan1', 5 * MIB]]);
  });

  it("llama-server's offload line, and what is not one", () => {
    const table: [string, ReturnType<typeof parseOffloaded>][] = [
      ['load_tensors: offloaded 4/4 layers to GPU', { layers: 4, of: 4 }],
      ['0.00.123.456 I load_tensors: offloaded 3/9 layers to GPU', { layers: 3, of: 9 }],
      ['load_tensors: offloaded 0/9 layers to GPU', { layers: 0, of: 9 }],
      ['load_tensors: offloaded 10/9 layers to GPU', null],
      ['load_tensors: offloaded 0/0 layers to GPU', null],
      ['load_tensors: offloading 3 repeating layers to GPU', null],
      ['', null],
    ];
    for (const [line, want] of table) assert.deepEqual(parseOffloaded(line), want, line);
  });

  it('words: K/M layers (asked where llama-server did not say), the reserved bytes', () => {
    const table: [Parameters<typeof replicaDeviceText>[0], string][] = [
      [{ devices: ['Vulkan0'], layers: 9, layersOf: 9, layersFrom: 'reported', reservedBytes: 20 * MIB }, 'Vulkan0 9/9 layers, 20 MiB reserved'],
      [{ devices: ['Vulkan0'], layers: 3, layersOf: 9, layersFrom: 'asked', reservedBytes: 9 * MIB + MIB / 2 }, 'Vulkan0 3/9 layers (asked), 9.5 MiB reserved'],
      [{ devices: ['CUDA0', 'CUDA1'], layers: null, layersOf: null, layersFrom: 'asked', reservedBytes: null }, 'CUDA0+CUDA1 all/? layers (asked), reserved bytes unknown'],
    ];
    for (const [d, want] of table) assert.equal(replicaDeviceText(d), want);
    assert.equal(modelDevicesText({ replicas: [] }), null);
  });
});

describe('from the look to every surface', async () => {
  const spec = await specOf((f) => {
    delete f['models/beta.yaml'];
    delete f['models/gamma.yaml'];
  });
  const gpu = observed(spec, 'alpha-1', 'alpha', 'ready', { endpoint: 'http://10.0.0.1:20000', devices: ['Vulkan0'], gpuLayers: 'all', offloaded: { layers: 9, of: 9 } });
  const host = observed(spec, 'alpha-2', 'alpha', 'ready', { endpoint: 'http://10.0.0.2:20000' });
  const obs = (replicas: ReplicaObservation[]) => ({ node: 'x', at: 0, memory: { totalBytes: 64 * 2 ** 30, availableBytes: 64 * 2 ** 30 }, cpus: 1, cpuFlags: [], arch: 'x86_64', diskFreeBytes: 1, engines: [], models: [], replicas });
  const node = (replicas: ReplicaObservation[]) => ({ reachable: true, error: null, obs: obs(replicas), lookedAt: 0, installFailures: {} });
  const snap = buildSnapshot({
    spec, now: 60_000, leader: true, control: { mode: 'standalone', instance: { id: 'l', label: 'l' }, leader: null, notActing: null, etcd: null }, appliedRevision: 'r1', rejected: null,
    lastSyncOk: null, lastSyncError: null, lastStatusWriteOk: null, stateError: null,
    nodes: new Map([['cpu-01', node([gpu])], ['cpu-02', node([host])]]),
    health: healthByModel(stateFor(spec)), desired: { alpha: 2 }, unplaceable: {}, replicas: {}, stopProgress: new Map(), memory: { alpha: 512 * MIB }, deviceNeeds: { alpha: NEED }, lastPass: null,
  });
  const text = 'Vulkan0 9/9 layers, 20 MiB reserved';

  it('the snapshot, the admin API (models, replicas) and a standby', () => {
    const m = snap.models.find((x) => x.name === 'alpha')!;
    assert.deepEqual(m.replicas.map((r) => [r.id, r.device ?? null]), [['alpha-1', { devices: ['Vulkan0'], layers: 9, of: 9, from: 'reported', reservedBytes: 20 * MIB }], ['alpha-2', null]]);
    const want = { devices: ['Vulkan0'], layers: 9, layersOf: 9, layersFrom: 'reported', reservedBytes: 20 * MIB };
    assert.deepEqual(modelJson(m, 'r1', snap.at).replicas.map((r) => r.device ?? null), [want, null]);
    assert.deepEqual(replicasJson(snap).replicas.map((r) => r.device ?? null), [want, null]);
    const standby = standbySnapshot(parsePublished(publishedJson(snap)), spec, snap.control, 1);
    assert.deepEqual(replicasJson(standby).replicas.map((r) => r.device ?? null), [want, null], 'a standby shows what the leader published');
  });

  it('ctl replicas and ctl status', () => {
    const replicas = renderReplicas(replicasJson(snap));
    assert.match(replicas.split('\n')[0]!, /^REPLICA\s+MODEL\s+NODE\s+PHASE\s+AGE\s+DEVICE\s+ENDPOINT$/);
    assert.match(replicas, new RegExp(`^alpha-1 .* ${text}  http://10\\.0\\.0\\.1:20000$`, 'm'));
    assert.match(replicas, /^alpha-2 .* ready +59s +- +http:\/\/10\.0\.0\.2:20000$/m);
    const status = renderStatus(statusJson(snap), modelsJson(snap));
    assert.match(status, /^ {2}MODEL +READY +SCALING +NODES +ON DEVICES$/m);
    assert.match(status, new RegExp(`^ {2}alpha +2/2 +1 replica +cpu-01, cpu-02 +cpu-01 ${text}$`, 'm'));
    // without a replica on a device, no column
    const plain = { ...snap, models: snap.models.map((x) => ({ ...x, replicas: x.replicas.map(({ device: _d, ...r }) => r) })) };
    assert.doesNotMatch(renderReplicas(replicasJson(plain)), /DEVICE/);
    assert.doesNotMatch(renderStatus(statusJson(plain), modelsJson(plain)), /ON DEVICES/);
  });

  it("the status page's view: the replica's device cell, and the node's list", () => {
    const v = pageView(snap, spec);
    const card = v.groups.flatMap((g) => g.models).find((x) => x.name === 'alpha')!;
    assert.deepEqual(card.replicas.map((r) => [r.id, r.device]), [['alpha-1', text], ['alpha-2', null]]);
    // each node lists its replicas with their place on a device (where a device's memory went)
    assert.deepEqual(v.nodes.map((n) => [n.name, n.replicas.map((r) => r.text)]), [['cpu-01', [`alpha (ready, 512 MiB; ${text})`]], ['cpu-02', ['alpha (ready, 512 MiB)']]]);
  });
});
