/**
 * Devices, pure parts: the --list-devices parser, per-replica visibility, the device need split by
 * -ngl, placement by device memory (table), the device-OOM reason (classified from the engine's own
 * lines, not counted, the node avoided and the model placed elsewhere), the spec fields and digest.
 */
import { strict as assert } from 'node:assert';
import { describe, it } from 'node:test';
import { mergeDevices, parseListDevices, parseNvidiaSmiQuery, replicaDeviceSetup, withLiveCudaMemory, type DeviceObservation, type NvidiaGpu } from '../../src/nodes/devices.js';
import { classifyFailure } from '../../src/nodes/failure.js';
import { ShellNodeDriver } from '../../src/nodes/shell-driver.js';
import { LocalShell } from '../../src/nodes/transport.js';
import { localNodeSpec } from '../harness/sshd.js';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { envExports, observeScript, replicaArgv, startReplicaScript } from '../../src/nodes/ops/index.js';
import { allLayers, deviceBytesFor, hostSavedFor, layersFitting, type DeviceNeed } from '../../src/reconciler/memory.js';
import { place, type PlacementNode, type PlacementRequest } from '../../src/reconciler/placement.js';
import { Reasons } from '../../src/errors/catalogue.js';
import { startConcluded } from '../../src/reconciler/outcomes.js';
import { decide } from '../../src/reconciler/pass.js';
import { startLaunched } from '../../src/reconciler/state.js';
import type { ProfileSpec } from '../../src/fleet-spec/types.js';
import { spawnSync } from 'node:child_process';
import { GiB, node, observed, specOf, stateFor } from '../harness/reconciler-core.js';
import { statusFiles, type StatusFleetJson } from '../../src/wire/shape.js';
import type { FleetSnapshot, NodeView } from '../../src/reconciler/view.js';
import { nodeView, snapshot as quietSnapshot } from '../harness/views.js';
import { statusFromBranchFiles } from '../../src/plan/status.js';
import { observedFromPlanStatus } from '../../src/plan/observed.js';

const MiB = 2 ** 20;

describe('--list-devices', () => {
  it('parses the devices ggml lists, ignores the rest', () => {
    const out = 'ggml_vulkan: Found 1 Vulkan devices:\nAvailable devices:\n  Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits) (2048 MiB, 2048 MiB free)\n  CUDA1: NVIDIA GeForce RTX 4090 (24076 MiB, 23750 MiB free)\n';
    assert.deepEqual(parseListDevices(out), [
      { name: 'Vulkan0', description: 'llvmpipe (LLVM 15.0.6, 256 bits)', totalBytes: 2048 * MiB, freeBytes: 2048 * MiB },
      { name: 'CUDA1', description: 'NVIDIA GeForce RTX 4090', totalBytes: 24076 * MiB, freeBytes: 23750 * MiB },
    ]);
    assert.deepEqual(parseListDevices('Available devices:\n  (none)\n'), []);
    assert.deepEqual(mergeDevices([[{ name: 'Vulkan1', description: 'b', totalBytes: 1, freeBytes: 1 }], [{ name: 'Vulkan0', description: 'a', totalBytes: 2, freeBytes: 2 }, { name: 'Vulkan1', description: 'c', totalBytes: 3, freeBytes: 3 }]]).map((d) => `${d.name}:${d.description}`), ['Vulkan0:a', 'Vulkan1:b']);
  });

  it('visibility: the chosen device is the replica\'s device 0; the node env\'s list maps indices; no device: nothing visible', () => {
    assert.deepEqual(replicaDeviceSetup(['Vulkan1'], {}), { env: { GGML_VK_VISIBLE_DEVICES: '1', CUDA_VISIBLE_DEVICES: '' }, deviceArgs: ['Vulkan0'] });
    assert.deepEqual(replicaDeviceSetup(['Vulkan0'], { GGML_VK_VISIBLE_DEVICES: '0' }).env.GGML_VK_VISIBLE_DEVICES, '0');
    assert.throws(() => replicaDeviceSetup(['ROCm0'], {}), /no known visibility variable/);
    assert.deepEqual(replicaDeviceSetup(['Vulkan1'], { GGML_VK_VISIBLE_DEVICES: '2,5' }).env.GGML_VK_VISIBLE_DEVICES, '5');
    assert.deepEqual(replicaDeviceSetup(['CUDA0', 'CUDA2'], {}), { env: { GGML_VK_VISIBLE_DEVICES: '', CUDA_VISIBLE_DEVICES: '0,2' }, deviceArgs: ['CUDA0', 'CUDA1'] });
    assert.deepEqual(replicaDeviceSetup([], { GGML_VK_VISIBLE_DEVICES: '0' }).env, { GGML_VK_VISIBLE_DEVICES: '', CUDA_VISIBLE_DEVICES: '' });
  });

  it('argv: --device/-ngl only for a replica on a device; env is quoted and names checked; the scripts parse', () => {
    const profile = { name: 'p', ctxSize: 512, parallel: 1, threads: null, batchSize: null, embeddings: false, extraArgs: [], cacheRamBytes: 0, splitMode: 'layer', mainGpu: 0 } as unknown as ProfileSpec;
    const base = { id: 'r', model: 'm', digest: 'd', modelPath: '/m.gguf', binary: '/e/llama-server', profile, apiKey: 'k' };
    assert.ok(!replicaArgv(base, '127.0.0.1', 1).includes('--device'));
    assert.deepEqual(replicaArgv({ ...base, devices: ['Vulkan1'], gpuLayers: 7 }, '127.0.0.1', 1).slice(-8), ['--device', 'Vulkan0', '-ngl', '7', '-sm', 'layer', '-mg', '0']);
    const hostile = "0'; echo pwned; '$(id)";
    const sh = spawnSync('sh', ['-c', `${envExports({ GGML_VK_VISIBLE_DEVICES: hostile })} printf '%s' "$GGML_VK_VISIBLE_DEVICES"`], { encoding: 'utf8' });
    assert.equal(sh.stdout, hostile, 'the value arrives verbatim, nothing runs');
    for (const k of ['LD_PRELOAD', 'IFS', 'PATH', 'LLAMA_API_KEY', 'lower']) assert.throws(() => envExports({ [k]: 'x' }), /not allowed/, k);
    for (const script of [
      observeScript('/d', 'n', 10, null, { GGML_VK_VISIBLE_DEVICES: '0' }),
      startReplicaScript({ dataDir: '/d', id: 'r', port: 20000, argv: ['/e/llama-server'], stateHead: '{"a":1', env: { GGML_VK_VISIBLE_DEVICES: '0', CUDA_VISIBLE_DEVICES: '' } }),
    ]) assert.equal(spawnSync('sh', ['-n'], { input: script }).status, 0);
  });
});

describe('nvidia-smi --query-gpu=index,name,memory.total,memory.used,memory.free --format=csv,noheader,nounits', () => {
  const gpu = (index: number, name: string, total: number | null, used: number | null, free: number | null): NvidiaGpu => ({
    index, name, totalBytes: total === null ? null : total * MiB, usedBytes: used === null ? null : used * MiB, freeBytes: free === null ? null : free * MiB,
  });
  const table: [string, string, NvidiaGpu[]][] = [
    ['one GPU', '0, NVIDIA GeForce RTX 4090, 24564, 818, 23353\n', [gpu(0, 'NVIDIA GeForce RTX 4090', 24564, 818, 23353)]],
    ['several GPUs, mixed models, CRLF and surrounding blanks', '0, NVIDIA A100-SXM4-80GB, 81920, 0, 81050\r\n1, NVIDIA A100-SXM4-80GB, 81920, 40960, 40090\r\n  2 , Tesla T4 , 15360 , 5 , 14923 \n\n', [
      gpu(0, 'NVIDIA A100-SXM4-80GB', 81920, 0, 81050), gpu(1, 'NVIDIA A100-SXM4-80GB', 81920, 40960, 40090), gpu(2, 'Tesla T4', 15360, 5, 14923),
    ]],
    ['[N/A] and [Not Supported] fields are unknown, not zero', '0, NVIDIA GH200 480GB, [N/A], [N/A], [N/A]\n1, NVIDIA L4, 23034, [Not Supported], 22700\n', [
      gpu(0, 'NVIDIA GH200 480GB', null, null, null), gpu(1, 'NVIDIA L4', 23034, null, 22700),
    ]],
    ['a comma in a name does not shift the figures', '3, Weird, Inc. GPU, 1024, 24, 1000\n', [gpu(3, 'Weird, Inc. GPU', 1024, 24, 1000)]],
    ['no driver: nvidia-smi\'s message is not a GPU', "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running.\n", []],
    ['garbage', 'Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.54\nindex, name, memory.total [MiB], memory.used [MiB], memory.free [MiB]\nx, y, 1, 2, 3\n0, , 1, 2, 3\n0, A, 1, 2\n0, A, 1 MiB, 2, 3\n-1, A, 1, 2, 3\n', []],
    ['empty', '', []],
  ];
  for (const [what, text, want] of table) it(what, () => assert.deepEqual(parseNvidiaSmiQuery(text), want));

  const cuda = (name: string, description: string, total: number, free: number): DeviceObservation => ({ name, description, totalBytes: total * MiB, freeBytes: free * MiB });
  it('CUDA<i> takes GPU i\'s free memory (live); other backends, unknown figures and other GPUs keep what llama-server listed', () => {
    const listed = [cuda('CUDA0', 'NVIDIA GeForce RTX 4090', 24076, 23750), cuda('CUDA1', 'Tesla T4', 14930, 14800), cuda('Vulkan0', 'NVIDIA GeForce RTX 4090', 24076, 23750)];
    const gpus = [gpu(0, 'NVIDIA GeForce RTX 4090', 24564, 10000, 14000), gpu(1, 'Tesla T4', 15360, null, null)];
    assert.deepEqual(withLiveCudaMemory(listed, gpus).map((d) => d.freeBytes / MiB), [14000, 14800, 23750]);
    assert.deepEqual(withLiveCudaMemory(listed, []), listed);
  });
  it('matched by index through the node env\'s CUDA_VISIBLE_DEVICES; a different name (enumeration order differs, a virtual device) is not matched; free capped at total', () => {
    const gpus = [gpu(0, 'Tesla T4', 15360, 0, 15000), gpu(1, 'NVIDIA L4', 23034, 0, 22000), gpu(2, 'NVIDIA L4', 23034, 3000, 20000)];
    const l4 = cuda('CUDA0', 'NVIDIA L4', 22478, 22400);
    assert.equal(withLiveCudaMemory([l4], gpus, { CUDA_VISIBLE_DEVICES: '2' })[0]!.freeBytes, 20000 * MiB, 'CUDA0 is GPU 2 when only 2 is visible');
    assert.equal(withLiveCudaMemory([l4], gpus)[0]!.freeBytes, 22400 * MiB, 'CUDA0 is not the T4 at index 0: kept');
    assert.equal(withLiveCudaMemory([l4], gpus, { CUDA_VISIBLE_DEVICES: 'GPU-8f6e2c1a' })[0]!.freeBytes, 22400 * MiB, 'a UUID cannot be matched by index: kept');
    assert.equal(withLiveCudaMemory([cuda('CUDA1', 'NVIDIA L4 (dev p1/v1)', 11239, 11000)], gpus)[0]!.freeBytes, 11000 * MiB, 'a virtual device: kept');
    assert.equal(withLiveCudaMemory([cuda('CUDA1', 'NVIDIA L4', 20000, 19000)], gpus)[0]!.freeBytes, 20000 * MiB, 'capped at the listed total');
  });

  // The observation script on this machine (local transport), with stand-ins for the two binaries this
  // machine has no GPU for: they print what a CUDA node's would. What is under test is the script's
  // wiring (the section, the exact query, no section without nvidia-smi, errors ignored) and the parse.
  it('the node observation runs nvidia-smi where present and takes CUDA0\'s free memory from it; absent or failing: the engine\'s figure', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'llmgw-nvsmi-'));
    const bin = join(dir, 'bin');
    const data = join(dir, 'data');
    const engineDir = join(data, 'engines', 'llama', 'b1');
    mkdirSync(bin, { recursive: true });
    mkdirSync(engineDir, { recursive: true });
    const exe = (path: string, text: string) => { writeFileSync(path, text); chmodSync(path, 0o755); };
    exe(join(engineDir, 'llama-server'), '#!/bin/sh\n[ "$1" = --list-devices ] || exit 2\nprintf \'Available devices:\\n  CUDA0: NVIDIA L4 (22478 MiB, 22400 MiB free)\\n\'\n');
    writeFileSync(join(engineDir, '.complete'), `${join(engineDir, 'llama-server')}\n`);
    const smiArgs = join(dir, 'smi-args');
    const smi = (body: string) => exe(join(bin, 'nvidia-smi'), `#!/bin/sh\nprintf '%s\\n' "$@" > '${smiArgs}'\n${body}\n`);
    const oldPath = process.env['PATH'];
    process.env['PATH'] = `${bin}:${oldPath ?? '/usr/bin:/bin'}`;
    const driver = new ShellNodeDriver(localNodeSpec(data, { name: 'gpu-local' }), new LocalShell('gpu-local'), {});
    const free = async () => (await driver.observe()).devices?.map((d) => `${d.name} ${d.freeBytes / MiB}`);
    try {
      smi("printf '0, NVIDIA L4, 23034, 3000, 20000\\n'");
      assert.deepEqual(await free(), ['CUDA0 20000'], 'live from nvidia-smi');
      assert.deepEqual(readFileSync(smiArgs, 'utf8').trim().split('\n'), ['--query-gpu=index,name,memory.total,memory.used,memory.free', '--format=csv,noheader,nounits']);
      smi("echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"; echo boom >&2; exit 9");
      assert.deepEqual(await free(), ['CUDA0 22400'], 'nvidia-smi failing: the engine\'s figure, no error');
      rmSync(join(bin, 'nvidia-smi'));
      assert.deepEqual(await free(), ['CUDA0 22400'], 'no nvidia-smi: the engine\'s figure');
    } finally {
      process.env['PATH'] = oldPath;
      await driver.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

// 3 repeating layers of 10 MiB (weights + KV), output layer 4 MiB, compute 2 MiB
const need: DeviceNeed = { perLayer: [10 * MiB, 10 * MiB, 10 * MiB], outputBytes: 4 * MiB, computeBytes: 2 * MiB, hostPerLayer: [10 * MiB, 10 * MiB, 10 * MiB] };

describe('device need by -ngl (llama.cpp: the output layer is offloaded first)', () => {
  it('sizes', () => {
    assert.equal(allLayers(need), 4);
    assert.equal(deviceBytesFor(need, 0), 0);
    assert.equal(deviceBytesFor(need, 1), 6 * MiB, 'output + compute');
    assert.equal(deviceBytesFor(need, 2), 16 * MiB);
    assert.equal(deviceBytesFor(need, 4), 36 * MiB);
    assert.equal(deviceBytesFor(need, 99), 36 * MiB);
    assert.equal(hostSavedFor(need, 4), 34 * MiB);
    assert.equal(layersFitting(need, 20 * MiB), 2);
    assert.equal(layersFitting(need, 5 * MiB), 0);
  });
});

describe('placement by device memory', () => {
  const gpuNode = (name: string, devices: [string, number, number][], capacity = 64 * GiB): PlacementNode => ({
    name, labels: {}, capacityBytes: capacity, usedBytes: 0, reachable: true, devices: devices.map(([n, c, u]) => ({ name: n, capacityBytes: c, usedBytes: u })),
  });
  const req = (over: Partial<PlacementRequest> & { gpuLayers?: 'all' | 'auto' | number; allowed?: string[] } = {}): PlacementRequest => ({
    model: 'm', count: 1, memoryBytes: 1 * GiB, nodeSelector: {}, existingOn: [], device: { need, gpuLayers: over.gpuLayers ?? 'all', allowed: over.allowed ?? [], split: [] }, ...over,
  });
  const table: { name: string; nodes: PlacementNode[]; req: PlacementRequest; nodesOut: string[]; devices?: unknown; reason?: RegExp }[] = [
    { name: 'all layers: the device with the most free room', nodes: [gpuNode('a', [['Vulkan0', 40 * MiB, 10 * MiB], ['Vulkan1', 40 * MiB, 0]])], req: req(), nodesOut: ['a'], devices: [{ devices: ['Vulkan1'], gpuLayers: 'all' }] },
    { name: 'no device fits: unplaceable with device numbers', nodes: [gpuNode('a', [['Vulkan0', 30 * MiB, 0]]), gpuNode('b', [])], req: req(), nodesOut: [], reason: /^needs 36 MiB on a GPU; largest free 30 MiB on a\/Vulkan0; 2 nodes checked$/ },
    { name: 'host memory short: the RAM reason', nodes: [gpuNode('a', [['Vulkan0', 40 * MiB, 0]], 512 * 2 ** 20)], req: req(), nodesOut: [], reason: /^needs 1 GiB; largest free 512 MiB on a/ },
    { name: 'auto: as many layers as fit', nodes: [gpuNode('a', [['Vulkan0', 20 * MiB, 0]])], req: req({ gpuLayers: 'auto' }), nodesOut: ['a'], devices: [{ devices: ['Vulkan0'], gpuLayers: 2 }] },
    { name: 'auto with no room: placed on the host only', nodes: [gpuNode('a', [['Vulkan0', 20 * MiB, 18 * MiB]])], req: req({ gpuLayers: 'auto' }), nodesOut: ['a'], devices: [{ devices: [], gpuLayers: 0 }] },
    { name: 'a device llmgw cannot pin (no visibility variable for its backend) is not offered', nodes: [gpuNode('a', [['ROCm0', 99 * MiB, 0]])], req: req(), nodesOut: [], reason: /no node with a usable device/ },
    { name: 'devices: [CUDA] skips the Vulkan device', nodes: [gpuNode('a', [['Vulkan0', 99 * MiB, 0]]), gpuNode('b', [['CUDA0', 40 * MiB, 0]])], req: req({ allowed: ['CUDA'] }), nodesOut: ['b'], devices: [{ devices: ['CUDA0'], gpuLayers: 'all' }] },
    { name: 'two replicas, one device: the second does not fit', nodes: [gpuNode('a', [['Vulkan0', 50 * MiB, 0]])], req: req({ count: 2 }), nodesOut: ['a'], reason: /^needs 36 MiB on a GPU per replica; largest free 14 MiB on a\/Vulkan0; 1 node checked; placed 1 of 2$/ },
  ];
  for (const t of table) {
    it(t.name, () => {
      const [r] = place({ nodes: t.nodes, requests: [t.req], reserveBytes: 0 });
      assert.deepEqual(r!.nodes, t.nodesOut);
      if (t.devices) assert.deepEqual(r!.devices, t.devices);
      if (t.reason) assert.match(r!.unplaceable?.reason ?? '', t.reason);
      else assert.equal(r!.unplaceable, null);
    });
  }
});

describe('out of device memory', () => {
  it('the engine\'s own lines (Vulkan, CUDA, llama.cpp) classify as REPLICA_DEVICE_OUT_OF_MEMORY, before the host rule', () => {
    for (const line of [
      'ggml_vulkan: Device memory allocation of size 1073741824 failed.\nggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory',
      'ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9216.00 MiB on device 0: cudaMalloc failed: out of memory',
      'llama_model_load: error loading model: unable to allocate Vulkan0 buffer',
    ]) assert.equal(classifyFailure(line).code, 'REPLICA_DEVICE_OUT_OF_MEMORY', line);
    assert.equal(classifyFailure('std::bad_alloc').code, 'REPLICA_OUT_OF_MEMORY');
    assert.equal(Reasons.REPLICA_DEVICE_OUT_OF_MEMORY.countsTowardParking, false);
    assert.equal(Reasons.REPLICA_DEVICE_OUT_OF_MEMORY.avoidsNode, true);
  });

  it('a device OOM at start: not counted, the node avoided, the next pass places the model on the other GPU node', async () => {
    const spec = await specOf((f) => {
      delete f['models/beta.yaml'];
      delete f['models/gamma.yaml'];
      f['profiles/chat.yaml'] = 'engine: llama-cpp@b6500\nctx_size: 4096\nparallel: 2\ngpu_layers: all\n';
    });
    const S = spec.settings;
    const launched = startLaunched(stateFor(spec), 'a1', { model: 'alpha', node: 'cpu-01', digest: spec.models.alpha!.digest, startedAt: 0 });
    const oom = { code: 'REPLICA_DEVICE_OUT_OF_MEMORY', message: 'ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory' };
    const failed = startConcluded(launched, 'a1', { kind: 'failed', error: oom }, 0, S).state;
    assert.equal(failed.models.alpha!.health.consecutiveFailures, 0, 'not counted toward parking');
    assert.equal(failed.models.alpha!.health.parked, null);
    const gpu = (name: string) => ({ ...node(name), devices: [{ name: 'Vulkan0', totalBytes: 2048 * MiB }] });
    const d = decide({
      state: failed, spec, nodes: [gpu('cpu-01'), gpu('cpu-02')], memory: { alpha: 1 * GiB }, deviceNeeds: { alpha: need }, memoryErrors: {},
      running: new Set(), stopping: new Set(), now: S.backoff.initialMs, newReplicaId: () => 'a2',
    });
    const startsOut = d.actions.filter((a) => a.kind === 'start');
    assert.deepEqual(startsOut.map((a) => `${a.node}:${a.kind === 'start' ? (a.devices ?? []).join(',') : ''}`), ['cpu-02:Vulkan0']);
  });

  it('the device room replicas take counts in the next placement (two models, one device)', async () => {
    const spec = await specOf((f) => {
      delete f['models/gamma.yaml'];
      f['profiles/chat.yaml'] = 'engine: llama-cpp@b6500\nctx_size: 4096\nparallel: 2\ngpu_layers: all\n';
      f['models/beta.yaml'] = f['models/beta.yaml']!.replace('on_demand: { idle_timeout: 10m }', 'replicas: 1');
    });
    const gpu = (name: string, replicas: ReturnType<typeof observed>[] = []) => ({ ...node(name, replicas), devices: [{ name: 'Vulkan0', totalBytes: 60 * MiB }] });
    const base = { spec, memory: { alpha: 1 * GiB, beta: 1 * GiB }, deviceNeeds: { alpha: need, beta: need }, memoryErrors: {}, running: new Set<string>(), stopping: new Set<string>(), now: 1, newReplicaId: (m: string) => `${m}-new` };
    // alpha runs on cpu-01's device; cpu-02 is gone: beta does not fit beside it
    const a1 = observed(spec, 'a1', 'alpha', 'ready', { devices: ['Vulkan0'], gpuLayers: 'all' });
    const held = decide({ ...base, state: stateFor(spec), nodes: [gpu('cpu-01', [a1]), { ...gpu('cpu-02'), reachable: false }] });
    assert.deepEqual(held.actions.filter((a) => a.kind === 'start'), []);
    assert.match(held.unplaceable.beta!.reason, /^needs 36 MiB on a GPU; largest free 24 MiB on cpu-01\/Vulkan0/);
    // alpha removed from the spec: this pass stops it, and its device room goes to beta
    const without = await specOf((f) => {
      delete f['models/gamma.yaml'];
      delete f['models/alpha.yaml'];
      delete f['access/keys.yaml'];
      f['profiles/chat.yaml'] = 'engine: llama-cpp@b6500\nctx_size: 4096\nparallel: 2\ngpu_layers: all\n';
      f['models/beta.yaml'] = f['models/beta.yaml']!.replace('on_demand: { idle_timeout: 10m }', 'replicas: 1');
    });
    const a1old = { ...a1, digest: 'old' };
    // A stopping replica holds its device room until its process is gone (#23): the stop first …
    const stopping = decide({ ...base, spec: without, state: stateFor(without), nodes: [gpu('cpu-01', [a1old]), { ...gpu('cpu-02'), reachable: false }], memory: { beta: 1 * GiB }, deviceNeeds: { alpha: need, beta: need } });
    assert.deepEqual(stopping.actions.map((a) => `${a.kind} ${a.model}@${a.node}`), ['stop alpha@cpu-01']);
    // … then, with alpha gone from the node, beta takes its device room.
    const freed = decide({ ...base, spec: without, state: stateFor(without), nodes: [gpu('cpu-01'), { ...gpu('cpu-02'), reachable: false }], memory: { beta: 1 * GiB }, deviceNeeds: { alpha: need, beta: need } });
    assert.deepEqual(freed.actions.map((a) => `${a.kind} ${a.model}@${a.node}${a.kind === 'start' ? ` ${(a.devices ?? []).join(',')}` : ''}`), ['start beta@cpu-01 Vulkan0']);
  });
});

describe('spec: device fields', () => {
  it('profiles, nodes: parsed; gpu fields are part of the digest only where set; bad env names are refused', async () => {
    const plain = await specOf();
    const same = await specOf((f) => {
      f['nodes/cpu-01.yaml'] += 'env: { GGML_VK_VISIBLE_DEVICES: "0" }\ncapacity: { memory: 16GiB, devices: { Vulkan0: 1GiB } }\n';
      f['nodes/cpu-01.yaml'] = f['nodes/cpu-01.yaml']!.replace('capacity: { memory: 16GiB }\n', '');
    });
    assert.equal(same.models.alpha!.digest, plain.models.alpha!.digest, 'node env and device budgets do not change a model\'s definition');
    assert.deepEqual(same.nodes['cpu-01']!.env, { GGML_VK_VISIBLE_DEVICES: '0' });
    assert.deepEqual(same.nodes['cpu-01']!.deviceMemory, { Vulkan0: 2 ** 30 });
    const gpu = await specOf((f) => {
      f['profiles/chat.yaml'] += 'gpu_layers: all\ndevices: [Vulkan]\nsplit_mode: layer\ntensor_split: [3, 1]\nmain_gpu: 0\n';
    });
    const p = gpu.profiles.chat!;
    assert.deepEqual([p.gpuLayers, p.devices, p.splitMode, p.tensorSplit, p.mainGpu, p.deviceCount], ['all', ['Vulkan'], 'layer', [3, 1], 0, 2]);
    assert.notEqual(gpu.models.alpha!.digest, plain.models.alpha!.digest, 'offloading changes how the engine runs');
    const auto = await specOf((f) => void (f['profiles/chat.yaml'] += 'gpu_layers: 12\n'));
    assert.equal(auto.profiles.chat!.gpuLayers, 12);
  });
});

describe('plan: device fit', () => {
  it('a GPU model that fits no device is unplaceable in the plan with device numbers; one that fits lands on the device node', async () => {
    const { simulateMerge } = await import('../../src/plan/simulate.js');
    const head = await specOf((f) => {
      delete f['models/beta.yaml'];
      delete f['models/gamma.yaml'];
      f['profiles/chat.yaml'] = 'engine: llama-cpp@b6500\nctx_size: 4096\nparallel: 2\ngpu_layers: all\n';
    });
    const observedFleet = (vramMiB: number) => ({
      source: 'test', writtenAt: null, appliedRevision: null, models: {},
      nodes: {
        'cpu-01': { name: 'cpu-01', reachable: true, memoryTotalBytes: 64 * GiB, engines: [], devices: [{ name: 'Vulkan0', totalBytes: vramMiB * MiB }] },
        'cpu-02': { name: 'cpu-02', reachable: true, memoryTotalBytes: 64 * GiB, engines: [], devices: [] },
      },
    });
    const input = { base: null, head, memory: { alpha: 1 * GiB }, deviceNeeds: { alpha: need }, unparks: new Set<string>(), changed: new Set(['alpha']), now: 1 };
    const tight = simulateMerge({ ...input, observed: observedFleet(30) });
    assert.match(tight.models.alpha!.unplaceable ?? '', /^needs 36 MiB on a GPU; largest free 30 MiB on cpu-01\/Vulkan0; 2 nodes checked/);
    const roomy = simulateMerge({ ...input, observed: observedFleet(2048) });
    assert.deepEqual(roomy.models.alpha!.starts, ['cpu-01']);
    assert.equal(roomy.models.alpha!.unplaceable, null);
  });
});

describe('status branch: device capacity', () => {
  const deviceNode = (name: string, devices: NonNullable<NodeView['devices']>): NodeView =>
    nodeView(name, { memory: { totalBytes: 64 * GiB, availableBytes: 60 * GiB }, diskFreeBytes: 9 * GiB, devices });
  const snapshot = (vram: number, free: number, reserved: number): FleetSnapshot =>
    quietSnapshot({
      at: 1, lastSyncOk: 1, lastStatusWriteOk: 1,
      nodes: [
        deviceNode('cpu-01', [{ name: 'Vulkan0', description: 'llvmpipe (LLVM 15.0.6, 256 bits)', totalBytes: vram, freeBytes: free, capacityBytes: vram, reservedBytes: reserved }]),
        deviceNode('cpu-02', []),
      ],
    });

  it('fleet.json: each node\'s devices as capacity only (name, total, what placement offers); free and reserved never, so they move no commit', () => {
    const files = statusFiles(snapshot(2048 * MiB, 2000 * MiB, 10 * MiB), null);
    const fleet = JSON.parse(files['fleet.json']!) as StatusFleetJson;
    assert.deepEqual(fleet.nodes.map((n) => [n.name, n.devices]), [
      ['cpu-01', [{ name: 'Vulkan0', totalBytes: 2048 * MiB, capacityBytes: 2048 * MiB }]],
      ['cpu-02', []],
    ]);
    assert.equal(statusFiles(snapshot(2048 * MiB, 1500 * MiB, 300 * MiB), null)['fleet.json'], files['fleet.json'], 'free and reserved device memory changed: the file did not');
    assert.notEqual(statusFiles(snapshot(4096 * MiB, 1500 * MiB, 300 * MiB), null)['fleet.json'], files['fleet.json'], 'a different device: the file changed');
  });

  it('llmgw plan\'s device fit reads the devices from the status branch\'s fleet.json', async () => {
    const { simulateMerge } = await import('../../src/plan/simulate.js');
    const head = await specOf((f) => {
      delete f['models/beta.yaml'];
      delete f['models/gamma.yaml'];
      f['profiles/chat.yaml'] = 'engine: llama-cpp@b6500\nctx_size: 4096\nparallel: 2\ngpu_layers: all\n';
    });
    const fromBranch = (vramMiB: number) => {
      const status = statusFromBranchFiles(statusFiles(snapshot(vramMiB * MiB, vramMiB * MiB, 0), null), 'llmgw/status');
      assert.deepEqual(status.nodes['cpu-01']!.devices, [{ name: 'Vulkan0', totalBytes: vramMiB * MiB }]);
      return observedFromPlanStatus(status, { source: 'status branch llmgw/status', writtenAt: null, appliedRevision: 'rev1' });
    };
    const input = { base: null, head, memory: { alpha: 1 * GiB }, deviceNeeds: { alpha: need }, unparks: new Set<string>(), changed: new Set(['alpha']), now: 1 };
    const tight = simulateMerge({ ...input, observed: fromBranch(30) });
    assert.match(tight.models.alpha!.unplaceable ?? '', /^needs 36 MiB on a GPU; largest free 30 MiB on cpu-01\/Vulkan0; 2 nodes checked/);
    const roomy = simulateMerge({ ...input, observed: fromBranch(2048) });
    assert.deepEqual(roomy.models.alpha!.starts, ['cpu-01']);
    assert.equal(roomy.models.alpha!.unplaceable, null);
    // a status branch written before devices were known (no devices in fleet.json): no device to fit on
    const old = JSON.parse(statusFiles(snapshot(2048 * MiB, 0, 0), null)['fleet.json']!) as { nodes: Record<string, unknown>[] };
    for (const n of old.nodes) delete n['devices'];
    const none = simulateMerge({ ...input, observed: observedFromPlanStatus(statusFromBranchFiles({ 'fleet.json': JSON.stringify(old) }, 'old'), { source: 'old', writtenAt: null, appliedRevision: null }) });
    assert.match(none.models.alpha!.unplaceable ?? '', /no node with a usable device/);
  });
});

describe('eviction frees device room', () => {
  it('an on-demand GPU model takes the device of an idle one (evicted), not only its host memory', async () => {
    const spec = await specOf((f) => {
      delete f['models/gamma.yaml'];
      delete f['access/keys.yaml'];
      f['profiles/chat.yaml'] = 'engine: llama-cpp@b6500\nctx_size: 4096\nparallel: 2\ngpu_layers: all\n';
      f['models/alpha.yaml'] = f['models/alpha.yaml']!.replace('replicas: 1', 'on_demand: { idle_timeout: 10m }');
    });
    const idle = observed(spec, 'b1', 'beta', 'ready', { devices: ['Vulkan0'], gpuLayers: 'all' });
    const gpu = { ...node('cpu-01', [idle]), devices: [{ name: 'Vulkan0', totalBytes: 60 * MiB }] };
    const d = decide({
      state: stateFor(spec, { demand: { alpha: 100, beta: 10 } }), spec, nodes: [gpu, { ...node('cpu-02'), reachable: false }],
      memory: { alpha: 1 * GiB, beta: 1 * GiB }, deviceNeeds: { alpha: need, beta: need }, memoryErrors: {},
      running: new Set(), stopping: new Set(), now: 200, newReplicaId: () => 'a1',
    });
    // The victim drains and stops first; the newcomer starts in the pass after it is gone (#23).
    assert.deepEqual(d.actions.map((a) => `${a.kind} ${a.model}@${a.node}${a.kind === 'stop' ? ` ${a.reason}` : ` ${(a.devices ?? []).join(',')}`}`), ['stop beta@cpu-01 evicted']);
    const after = decide({
      state: stateFor(spec, { demand: { alpha: 100, beta: 10 } }), spec, nodes: [{ ...gpu, replicas: [] }, { ...node('cpu-02'), reachable: false }],
      memory: { alpha: 1 * GiB, beta: 1 * GiB }, deviceNeeds: { alpha: need, beta: need }, memoryErrors: {},
      running: new Set(), stopping: new Set(), now: 300, newReplicaId: () => 'a1',
    });
    assert.deepEqual(after.actions.map((a) => `${a.kind} ${a.model}@${a.node} ${a.kind === 'start' ? (a.devices ?? []).join(',') : ''}`), ['start alpha@cpu-01 Vulkan0']);
  });
});
