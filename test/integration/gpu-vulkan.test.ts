/**
 * GPU nodes for real, per ggml backend: two sshd nodes whose engine is the backend's artifact (the
 * cached llama-server + the backend library from npm, served by a local origin, installed by the
 * artifact method). Vulkan runs here on Mesa's lavapipe device, which the nodes' env makes visible
 * (GGML_VK_VISIBLE_DEVICES=0); CUDA (@node-llama-cpp/linux-x64-cuda's libggml-cuda.so, device CUDA0,
 * no env) runs the same cases where `nvidia-smi -L` lists a GPU, and is reported as skipped, with the
 * reason, where it does not. Only the backend differs: the library, the device name, the nodes' env.
 *
 * - inventory: each node shows the device with its memory (from `llama-server --list-devices`);
 * - gpu_layers: all starts with every layer offloaded (the replica's own -lv 4 log) and answers
 *   through the router; its device memory shows as reserved;
 * - a device need beyond the device (a context whose KV cache is larger than 2 GiB; a device larger
 *   than that is given a 2 GiB budget) is unplaceable with device numbers; gpu_layers: auto against a
 *   small device budget starts partly offloaded;
 * - two models on one device: the second is placed only while both fit; stopping the first frees
 *   its device memory for the next pass;
 * - GPU use shown (#37 item 8): each GPU replica's device, its layers there (K of M, as its load log
 *   says) and the device bytes reserved for it, in /admin/v1/models and /admin/v1/replicas (the real
 *   admin app), `ctl replicas` and `ctl status` (the CLI against it) and the status page (Chromium);
 *   the reserved bytes within 15 % of the device buffers the replica's own log reports; at llama-server's
 *   default verbosity (no offload line in its log) the layers asked are shown, marked so;
 * - out of device memory for real (Vulkan): node-1's engine gets a device buffer limit below what
 *   Vulkan0 reports (ggml-vulkan's GGML_VK_FORCE_MAX_BUFFER_SIZE), the start fails with
 *   ErrorOutOfDeviceMemory → REPLICA_DEVICE_OUT_OF_MEMORY, not counted toward parking, and the model is
 *   placed on node-2. ggml-cuda has no such per-process limit, so on CUDA this case is reported as
 *   not run, with why.
 */
import { strict as assert } from 'node:assert';
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import type { AddressInfo } from 'node:net';
import { request } from 'undici';
import { buildRouter } from '../../src/router/app.js';
import { nodesJson, replicasJson, type ModelOneJson, type ReplicasJson } from '../../src/wire/shape.js';
import { renderNodes } from '../../src/format/ctl-format.js';
import { formatBytes } from '../../src/fleet-spec/units.js';
import type { DeviceObservation } from '../../src/nodes/devices.js';
import { chromium, type Browser } from 'playwright-core';
import { buildAdminApp } from '../../src/admin/app.js';
import { runCli } from '../harness/cli.js';
import { freePort } from '../harness/ports.js';
import { repoRoot } from '../harness/paths.js';
import { startTestFleet, type TestController, type TestFleet } from '../harness/controller.js';
import { startThrottledOrigin, type ThrottledOrigin } from '../harness/throttled-origin.js';
import { GPU_BACKENDS, gpuEngineArtifact, listedDevice, reportedDeviceBytes, type EngineArtifact, type GpuBackend } from '../harness/gpu-engine.js';
import { writeTinyModel, type TinyModelFile } from '../fixtures/gguf.js';

const MIB = 2 ** 20;
const GIB = 2 ** 30;
const esc = (x: string): string => x.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
const CHROMIUM = process.env.LLMGW_CHROMIUM ?? '/usr/bin/chromium';

/** What each backend knows that the cases need: the figures the Vulkan cases have always asserted. */
interface BackendCase {
  /** The engine version name in engines/llama-cpp.yaml. */
  readonly version: string;
  /** The device as this machine must list it (Vulkan: lavapipe's fixed 2048 MiB); null: as listed. */
  readonly expect: { readonly totalBytes: number; readonly description: RegExp } | null;
  /** node-1's extra env making its engine refuse device memory the device reports, and the engine's words; or why not. */
  readonly oom: { readonly env: Readonly<Record<string, string>>; readonly reason: RegExp } | { readonly notRun: string };
}
const CASES: Readonly<Record<string, BackendCase>> = {
  vulkan: {
    // ggml-vulkan refuses a buffer above its max size without a device allocation; the engine then logs
    // "alloc_tensor_range: failed to allocate Vulkan0 buffer" and "…unable to allocate Vulkan0 buffer",
    // the last of which can be lost at exit (llama-server's log thread is not drained: nodes/failure.ts)
    version: 'vk',
    expect: { totalBytes: 2048 * MIB, description: /llvmpipe/ },
    oom: { env: { GGML_VK_FORCE_MAX_BUFFER_SIZE: '1048576' }, reason: /ErrorOutOfDeviceMemory|(failed|unable) to allocate Vulkan0 buffer|Device memory allocation/ },
  },
  cuda: {
    version: 'cuda',
    expect: null,
    oom: { notRun: 'not run on CUDA: ggml-cuda has no per-process device memory limit (like Vulkan\'s GGML_VK_FORCE_MAX_BUFFER_SIZE) to make node-1\'s engine refuse memory its device reports while node-2 (the same GPU on this machine) accepts it' },
  },
};

function gpuSuite(backend: GpuBackend): void {
  const c = CASES[backend.name]!;
  const dev = backend.device;
  const why = backend.unavailable();
  // Vulkan must run here (lavapipe is installed for it: its before() fails without); another backend
  // without its device is not run, each case reported as skipped with the reason, never as a pass
  const skip = why !== null && backend.name !== 'vulkan' ? why : null;
  const opts = skip !== null ? { skip } : {};
  let fleet: TestFleet;
  let ctl: TestController;
  let router: FastifyInstance;
  let routerUrl: string;
  let admin: FastifyInstance;
  let adminUrl: string;
  let browser: Browser | null = null;
  let origin: ThrottledOrigin;
  let art: EngineArtifact;
  let listed: DeviceObservation;
  let narrow: TinyModelFile;
  let wide: TinyModelFile;
  let wide2: TinyModelFile;
  const pushed = new Set<string>();
  const envLine = (env: Readonly<Record<string, string>>): string =>
    Object.keys(env).length === 0 ? '' : `env: { ${Object.entries(env).map(([k, v]) => `${k}: ${JSON.stringify(v)}`).join(', ')} }\n`;
  const totalBytes = (): number => c.expect?.totalBytes ?? listed.totalBytes;

  /** The fleet: no base models; both nodes see the device; extra node lines per node. */
  function files(nodeExtra: readonly string[][], models: Record<string, string | null>, profiles: Record<string, string> = {}): Record<string, string | null> {
    const base = fleet.baseFiles();
    const out: Record<string, string | null> = { ...base };
    for (const m of ['good', 'kev', 'huge']) delete out[`models/${m}.yaml`];
    fleet.nodes.forEach((_, i) => {
      const f = `nodes/node-${i + 1}.yaml`;
      out[f] = `${base[f]!}${envLine(backend.env)}${(nodeExtra[i] ?? []).join('\n')}\n`;
    });
    out['engines/llama-cpp.yaml'] = `${base['engines/llama-cpp.yaml']!}  ${c.version}:\n    artifact:\n      url: ${origin.url}\n      sha256: ${art.sha256}\n`;
    const gpu = (extra: string[]): string => [`engine: llama-cpp@${c.version}`, 'ctx_size: 256', 'threads: 1', 'parallel: 1', 'memory_overhead: 64MiB', 'cache_ram: 16MiB', 'start_timeout: 120s', 'extra_args: ["-lv", "4"]', ...extra, ''].join('\n');
    out['profiles/gpu.yaml'] = gpu(['gpu_layers: all']);
    out['profiles/gpu-auto.yaml'] = gpu(['gpu_layers: auto']);
    // llama-server at its default verbosity (no -lv 4): its log says nothing of the layers it offloaded
    out['profiles/gpu-quiet.yaml'] = gpu(['gpu_layers: all']).replace('extra_args: ["-lv", "4"]\n', '');
    out['profiles/gpu-huge-ctx.yaml'] = gpu(['gpu_layers: all']).replace('ctx_size: 256', 'ctx_size: 2097152');
    for (const [p, t] of Object.entries(profiles)) out[`profiles/${p}.yaml`] = t;
    for (const [m, t] of Object.entries(models)) {
      if (t === null && !pushed.has(m)) continue; // null removes a model an earlier push added
      out[`models/${m}.yaml`] = t;
      if (t === null) pushed.delete(m);
      else pushed.add(m);
    }
    return out;
  }

  const modelFile = (m: TinyModelFile, profile: string, extra: string[] = []): string =>
    [`source: file://${m.path}`, `sha256: ${m.sha256}`, `profile: ${profile}`, 'replicas: 1', ...extra, ''].join('\n');

  const model = (name: string) => ctl.reconciler.snapshot().models.find((m) => m.name === name);
  const readyReplica = (name: string) => model(name)?.replicas.find((r) => r.phase === 'ready');
  function replicaLog(node: string, id: string): string {
    const i = Number(node.replace('node-', '')) - 1;
    return readFileSync(join(fleet.nodes[i]!.dataDir, 'replicas', id, 'log'), 'utf8');
  }
  function replicaState(node: string, id: string): { argv: string[]; devices?: string[]; gpuLayers?: unknown } {
    const i = Number(node.replace('node-', '')) - 1;
    return JSON.parse(readFileSync(join(fleet.nodes[i]!.dataDir, 'replicas', id, 'state.json'), 'utf8')) as { argv: string[] };
  }


  /**
   * A ready GPU replica as every surface shows it (#37 item 8): its device, K of M layers as its load
   * log says (the observe reads llama-server's own count) and the device bytes reserved for it, the
   * same in /admin/v1/models, /admin/v1/replicas, `ctl replicas` and `ctl status`; the reserved bytes
   * within 15 % of the device buffers its log reports. Returns the replica's device words.
   */
  async function shownOnDevice(name: string, layers: number, of: number): Promise<string> {
    await ctl.until(`${name} shown on ${dev} with llama-server's count`, 90_000, () => readyReplica(name)?.device?.from === 'reported');
    const r = readyReplica(name)!;
    const want = { devices: [dev], layers, layersOf: of, layersFrom: 'reported' };
    const one = (await (await fetch(`${adminUrl}/admin/v1/models/${name}`)).json()) as ModelOneJson;
    const d = one.model.replicas.find((x) => x.id === r.id)!.device!;
    assert.deepEqual({ devices: d.devices, layers: d.layers, layersOf: d.layersOf, layersFrom: d.layersFrom }, want, JSON.stringify(d));
    const all = (await (await fetch(`${adminUrl}/admin/v1/replicas`)).json()) as ReplicasJson;
    assert.deepEqual(all.replicas.find((x) => x.id === r.id)!.device, d, '/replicas shows what /models shows');
    // the reservation (placement's estimate) against what llama-server allocated on the device
    const reported = reportedDeviceBytes(replicaLog(r.node, r.id), dev);
    assert.equal(reported.offloaded, `${layers}/${of}`);
    assert.ok(reported.total > 0 && d.reservedBytes !== null, `${dev} buffers in the log: ${reported.lines.join('; ')}`);
    const err = Math.abs(d.reservedBytes - reported.total) / reported.total;
    console.log(`# ${name}: ${dev} ${layers}/${of} layers, reserved ${(d.reservedBytes / MIB).toFixed(2)} MiB, reported ${(reported.total / MIB).toFixed(2)} MiB (${(err * 100).toFixed(1)} %)`);
    assert.ok(err <= 0.15, `reserved ${(d.reservedBytes / MIB).toFixed(2)} MiB vs reported ${(reported.total / MIB).toFixed(2)} MiB: ${(err * 100).toFixed(1)} % off\n${reported.lines.join('\n')}`);
    const words = `${dev} ${layers}/${of} layers, ${formatBytes(d.reservedBytes)} reserved`;
    const replicas = await runCli(['ctl', 'replicas', '--server', adminUrl]);
    assert.equal(replicas.code, 0, replicas.stderr);
    assert.match(replicas.stdout, /^REPLICA +MODEL +NODE +PHASE +AGE +DEVICE +ENDPOINT$/m);
    assert.match(replicas.stdout, new RegExp(`^${esc(r.id)} +${name} +${r.node} +ready +\\S+ +${esc(words)} +http`, 'm'));
    const status = await runCli(['ctl', 'status', '--server', adminUrl]);
    assert.equal(status.code, 0, status.stderr);
    assert.match(status.stdout, new RegExp(`^ +${name} +1/1 .* ${r.node} ${esc(words)}$`, 'm'), status.stdout);
    return words;
  }

  describe(`GPU backend ${backend.label}`, () => {
    before(async () => {
      if (skip !== null) return;
      assert.equal(why, null, `the ${backend.label} device tests need the device here: ${why}`);
      fleet = await startTestFleet({ nodes: 2 });
      art = await gpuEngineArtifact(join(fleet.stateDir, '..'), backend);
      listed = listedDevice(art, backend);
      origin = await startThrottledOrigin(art.path, { bytesPerSecond: 2e9, path: `/llama-${c.version}.tar.gz` });
      const dir = join(fleet.stateDir, '..', 'models');
      narrow = await writeTinyModel(join(dir, 'narrow.gguf'), { layers: 3, seed: 21 });
      wide = await writeTinyModel(join(dir, 'wide.gguf'), { layers: 8, embeddingLength: 256, seed: 22 });
      wide2 = await writeTinyModel(join(dir, 'wide2.gguf'), { layers: 8, embeddingLength: 256, seed: 23 });
      await fleet.push(files([], {}), `base fleet on the ${backend.name} engine`);
      ctl = await fleet.startController();
      router = buildRouter({ fleet: ctl.reconciler, auth: { required: false } });
      await router.listen({ host: '127.0.0.1', port: 0 });
      routerUrl = `http://127.0.0.1:${(router.server.address() as AddressInfo).port}`;
      admin = buildAdminApp({ backend: ctl.reconciler, token: null });
      const adminPort = await freePort();
      await admin.listen({ host: '127.0.0.1', port: adminPort });
      adminUrl = `http://127.0.0.1:${adminPort}`;
    }, { timeout: 20 * 60_000 });

    after(async () => {
      await browser?.close().catch(() => undefined);
      await admin?.close();
      await router?.close();
      await origin?.close();
      await fleet?.cleanup();
    });

    describe(`GPU nodes on ${backend.label}`, { timeout: 15 * 60_000 }, () => {
      test(`gpu_layers: all: the inventory shows ${dev} and its memory, every layer is offloaded (its own log), it answers through the router`, opts, async () => {
        await fleet.push(files([], { narrow: modelFile(narrow, 'gpu', ['node_selector: {}']) }), 'narrow on the GPU');
        await ctl.until('narrow ready', 5 * 60_000, () => readyReplica('narrow') !== undefined);
        const r = readyReplica('narrow')!;
        const log = replicaLog(r.node, r.id);
        assert.match(log, /offloaded 4\/4 layers to GPU/, 'all 3 blocks and the output layer on the device');
        assert.match(log, new RegExp(`${dev} model buffer size`));
        assert.match(log, new RegExp(`${dev} KV buffer size`));
        const st = replicaState(r.node, r.id);
        assert.deepEqual(st.devices, [dev]);
        const argv = st.argv.join(' ');
        assert.match(argv, new RegExp(`--device ${dev} -ngl all`));

        // the inventory: both nodes list the device the engine sees, with its memory
        await ctl.until('devices observed', 90_000, () => ctl.reconciler.snapshot().nodes.every((n) => (n.devices ?? []).some((d) => d.name === dev)));
        const nodes = nodesJson(ctl.reconciler.snapshot(), ctl.reconciler.spec());
        const total = totalBytes();
        const description = c.expect?.description ?? new RegExp(`^${esc(listed.description)}$`);
        for (const n of nodes.nodes) {
          const d = n.devices!.find((x) => x.name === dev)!;
          assert.equal(d.totalBytes, total, `${n.name}: the engine reports ${formatBytes(total)}`);
          assert.match(d.description, description);
          assert.equal(d.reservedBytes > 0, n.name === r.node, `${n.name}: device memory reserved where the replica runs (${d.reservedBytes})`);
        }
        const table = renderNodes(nodes);
        assert.match(table, /DEVICES FREE/);
        const t = esc(formatBytes(total));
        assert.match(table, new RegExp(`${dev} ${t} of ${t}|${dev} [\\d.]+ (MiB|GiB) of ${t}`));

        const metrics = (await ctl.metricsApp.inject({ method: 'GET', url: '/metrics' })).body;
        assert.match(metrics, new RegExp(`llmgw_node_device_memory_bytes\\{node="${r.node}",device="${dev}",kind="total"\\} ${total}`));
        assert.match(metrics, new RegExp(`llmgw_node_device_memory_bytes\\{node="${r.node}",device="${dev}",kind="reserved_by_llmgw"\\} [1-9]\\d*`));
        // GPU use shown: the API, ctl and the page say where the replica runs and what it holds there
        const words = await shownOnDevice('narrow', 4, 4);
        if (!existsSync(join(repoRoot, 'dist', 'src', 'ui', 'web', 'app.js'))) {
          const b = spawnSync(process.execPath, [join(repoRoot, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.web.json'], { cwd: repoRoot, encoding: 'utf8' });
          assert.equal(b.status, 0, b.stdout + b.stderr);
        }
        browser = await chromium.launch({ executablePath: CHROMIUM, args: process.getuid?.() === 0 ? ['--no-sandbox'] : [] });
        const page = await (await browser.newContext({ viewport: { width: 1200, height: 900 } })).newPage();
        const pageErrors: string[] = [];
        page.on('pageerror', (e) => pageErrors.push(e.message));
        await page.goto(`${adminUrl}/ui/`);
        const cell = page.locator(`article.model[data-model="narrow"] tr[data-replica="${r.id}"] td.device`);
        await cell.waitFor({ timeout: 30_000 });
        assert.equal(await cell.innerText(), words, 'the page shows the device, K of M layers and the reserved bytes');
        assert.match(await page.locator(`article.model[data-model="narrow"] table thead`).innerText(), /device/);
        assert.deepEqual(pageErrors, []);
        const res = await request(`${routerUrl}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: 'narrow', prompt: 'hello', max_tokens: 3 }) });
        const body = await res.body.text();
        assert.equal(res.statusCode, 200, body);
        assert.ok((JSON.parse(body) as { choices: { text: string }[] }).choices[0]!.text.length > 0);
      });

      test('a device need beyond the device is unplaceable with device numbers', opts, async () => {
        // ctx 2 Mi tokens: the KV cache alone is 3 GiB on the device (the host keeps only what is not
        // offloaded); a device larger than 2 GiB (not lavapipe's) is given a 2 GiB budget for this case
        const budget = totalBytes() > 2 * GIB ? [`capacity: { devices: { ${dev}: 2GiB } }`] : [];
        await fleet.push(files([budget, budget], { narrow: null, huge: modelFile(narrow, 'gpu-huge-ctx') }), 'a context too big for the device');
        await ctl.until('huge unplaceable', 90_000, () => model('huge')?.unplaceable !== null && model('huge')?.unplaceable !== undefined);
        const u = model('huge')!.unplaceable!;
        assert.equal(u.code, 'PLACEMENT_NO_DEVICE_ROOM');
        assert.match(u.reason, new RegExp(`^needs [\\d.]+ GiB on a GPU; largest free 2 GiB on node-[12]/${dev}; 2 nodes checked`));
        assert.equal(ctl.starts.get('huge') ?? 0, 0, 'never started');
      });

      test('gpu_layers: auto against a small device budget starts partly offloaded (layers counted from the log)', opts, async () => {
        // wide: 8 blocks of ~2.8 MiB each (weights + KV at ctx 256) + ~2.4 MiB output and compute; 12 MiB holds 3 blocks
        const small = `capacity: { devices: { ${dev}: 12MiB } }`;
        await fleet.push(files([[small], [small]], { huge: null, partial: modelFile(wide, 'gpu-auto') }), 'auto on a 12 MiB budget');
        await ctl.until('partial ready', 5 * 60_000, () => readyReplica('partial') !== undefined);
        const r = readyReplica('partial')!;
        const st = replicaState(r.node, r.id);
        assert.equal(typeof st.gpuLayers, 'number');
        const ngl = st.gpuLayers as number;
        assert.ok(ngl >= 2 && ngl < 9, `some but not all of the 9 layers: -ngl ${ngl}`);
        const m = /offloaded (\d+)\/(\d+) layers to GPU/.exec(replicaLog(r.node, r.id));
        assert.ok(m, 'the log says how many layers were offloaded');
        assert.equal(Number(m[2]), 9);
        assert.equal(Number(m[1]), ngl, `the log counts ${m[1]} offloaded layers, placement chose ${ngl}`);
        await shownOnDevice('partial', ngl, 9);
        const d = nodesJson(ctl.reconciler.snapshot(), ctl.reconciler.spec()).nodes.find((n) => n.name === r.node)!.devices!.find((x) => x.name === dev)!;
        assert.equal(d.capacityBytes, 12 * MIB, 'the declared budget is what placement offers');
        assert.ok(d.reservedBytes <= 12 * MIB && d.reservedBytes > 6 * MIB, `reserved ${d.reservedBytes / MIB} MiB of the 12 MiB budget`);
      });

      test('two models on one device: the second is placed only while both fit; stopping the first frees its device memory', opts, async () => {
        // one GPU node (node-1: 40 MiB budget); each wide model needs ~24.5 MiB there
        const budget = [[`capacity: { devices: { ${dev}: 40MiB } }`, 'labels: { gpu: "yes" }'], []];
        const sel = ['node_selector: { gpu: "yes" }'];
        await fleet.push(files(budget, { partial: null, first: modelFile(wide, 'gpu', sel) }), 'first on node-1');
        await ctl.until('first ready', 5 * 60_000, () => readyReplica('first') !== undefined);
        await fleet.push(files(budget, { partial: null, first: modelFile(wide, 'gpu', sel), second: modelFile(wide2, 'gpu-quiet', sel) }), 'second beside it');
        await ctl.until('second unplaceable while first holds the device', 90_000, () => model('second')?.unplaceable != null);
        const u = model('second')!.unplaceable!;
        assert.equal(u.code, 'PLACEMENT_NO_DEVICE_ROOM');
        assert.match(u.reason, new RegExp(`^needs 2[45](\\.\\d)? MiB on a GPU; largest free 1[456](\\.\\d)? MiB on node-1/${dev}; 2 nodes checked, 1 excluded by selector`));
        assert.equal(ctl.starts.get('second') ?? 0, 0);
        // stop the first: its device memory is free for the next pass, which places the second
        await fleet.push(files(budget, { partial: null, first: modelFile(wide, 'gpu', [...sel]).replace('replicas: 1', 'replicas: 0'), second: modelFile(wide2, 'gpu-quiet', sel) }), 'first to 0');
        await ctl.until('second ready once the first stopped', 5 * 60_000, () => readyReplica('second') !== undefined);
        assert.equal(model('first')!.replicas.filter((r) => r.phase !== 'stopping').length, 0);
        const r = readyReplica('second')!;
        // at llama-server's default verbosity its log does not say what it offloaded: shown as asked (-ngl all: 9 of 9)
        assert.match(replicaState(r.node, r.id).argv.join(' '), new RegExp(`--device ${dev} -ngl all`));
        assert.doesNotMatch(replicaLog(r.node, r.id), /offloaded \d+\/\d+ layers to GPU/);
        await ctl.until('second shown on its device', 90_000, () => readyReplica('second')?.device !== undefined);
        const d = replicasJson(ctl.reconciler.snapshot()).replicas.find((x) => x.id === r.id)!.device!;
        assert.deepEqual({ devices: d.devices, layers: d.layers, layersOf: d.layersOf, layersFrom: d.layersFrom }, { devices: [dev], layers: 9, layersOf: 9, layersFrom: 'asked' });
        assert.ok(d.reservedBytes !== null && d.reservedBytes > 20 * MIB && d.reservedBytes < 30 * MIB, `reserved ${d.reservedBytes}`);
        const out = await runCli(['ctl', 'replicas', '--server', adminUrl]);
        assert.match(out.stdout, new RegExp(`^${esc(r.id)} .* ${dev} 9/9 layers \\(asked\\), ${esc(formatBytes(d.reservedBytes))} reserved +http`, 'm'), out.stdout);
      });
    });

    describe('out of device memory at start', { timeout: 10 * 60_000 }, () => {
      const oomOpts = skip !== null ? { skip } : 'notRun' in c.oom ? { skip: c.oom.notRun } : {};
      test('the engine refuses the device memory (a device buffer limit smaller than reported): REPLICA_DEVICE_OUT_OF_MEMORY, not counted, placed on the other node', oomOpts, async () => {
        assert.ok(!('notRun' in c.oom));
        const oom = c.oom;
        // node-1's engine gets a 1 MiB device buffer limit (ggml-vulkan's GGML_VK_FORCE_MAX_BUFFER_SIZE):
        // the device still reports its memory, so placement picks it (node-1 declares the most host
        // room), and the model's 20 MiB weights buffer fails there with ErrorOutOfDeviceMemory
        const nodes = [[envLine({ ...backend.env, ...oom.env }).trimEnd(), 'capacity: { memory: 64GiB }'], ['capacity: { memory: 4GiB }']];
        const f = files(nodes, { first: null, second: null, oomy: modelFile(wide, 'gpu') });
        f['nodes/node-1.yaml'] = f['nodes/node-1.yaml']!.replace(envLine(backend.env), '');
        // a node that failed a start is avoided for backoff.max (the harness's 400 ms is shorter than a
        // failed start on lavapipe takes): a minute here, as 5 min by default
        f['fleet.yaml'] = f['fleet.yaml']!.replace('backoff: { initial: 100ms, max: 400ms }', 'backoff: { initial: 100ms, max: 60s }');
        assert.match(f['fleet.yaml']!, /max: 60s/);
        await fleet.push(f, 'oomy: node-1 refuses device memory');
        await ctl.until('oomy ready elsewhere', 5 * 60_000, () => readyReplica('oomy') !== undefined);
        const r = readyReplica('oomy')!;
        assert.equal(r.node, 'node-2', 'placed on the other GPU node');
        const failed = ctl.logs.filter((l) => l.msg === 'replica start failed' && l.model === 'oomy');
        assert.equal(failed.length, 1, JSON.stringify(failed));
        assert.equal(failed[0]!.code, 'REPLICA_DEVICE_OUT_OF_MEMORY');
        assert.equal(failed[0]!.node, 'node-1');
        assert.match(String(failed[0]!.reason), oom.reason);
        const m = model('oomy')!;
        assert.equal(m.consecutiveFailures, 0, 'not counted toward parking');
        assert.equal(m.parked, null);
        assert.equal(ctl.starts.get('oomy'), 2);
        assert.ok(ctl.logs.some((l) => l.msg === 'replica start set back by its node (not counted): placed elsewhere for a while' && l.model === 'oomy'));
        assert.match(replicaLog(r.node, r.id), /offloaded 9\/9 layers to GPU/);
      });
    });
  });
}

for (const b of GPU_BACKENDS) gpuSuite(b);
