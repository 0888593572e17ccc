/**
 * Fault 3: a network partition between the controller and a node halfway through a model download,
 * a replica start and an engine artifact install.
 * A TCP forwarder between the controller and a real sshd destroys every connection (sshd and what it
 * runs are untouched, as in a real partition: the node's download keeps going, with no pty and no
 * SIGHUP) and refuses new ones for 2 s. The GGUF and the engine archive come from throttled HTTP
 * origins. Must hold: at most one download of the file (one install of the engine version) on the
 * node at any time; the final file (install) matches its sha256 with no partial left; no checksum
 * mismatch (nothing counted toward parking); the model becomes ready.
 */
import { strict as assert } from 'node:assert';
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { accessSync, constants, existsSync, lstatSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { writeTinyModel, type TinyModelFile } from '../fixtures/gguf.js';
import { startTestFleet, type TestController, type TestFleet } from '../harness/controller.js';
import { llamaServerDir } from '../harness/llama-server.js';
import { startTcpForwarder, type TcpForwarder } from '../harness/tcp-forwarder.js';
import { startThrottledOrigin, type ThrottledOrigin } from '../harness/throttled-origin.js';
import { replicaProcesses } from '../harness/replica-procs.js';
import { countsTowardParking } from '../../src/errors/catalogue.js';
import { recordFault } from '../harness/fault-report.js';
import { SecretsScan } from '../harness/secrets-scan.js';
import { until } from '../harness/wait.js';

let fleet: TestFleet;
let ctl: TestController;
let fwd: TcpForwarder;
let origin: ThrottledOrigin;
let model: TinyModelFile;
const BYTES_PER_SECOND = 300 * 1024;
const ENGINE_BYTES_PER_SECOND = 1024 * 1024;


before(async () => {
  fleet = await startTestFleet({ nodes: 1 });
  model = await writeTinyModel(join(fleet.stateDir, '..', 'slowdl.gguf'), { seed: 11 });
  origin = await startThrottledOrigin(model.path, { bytesPerSecond: BYTES_PER_SECOND });
  fwd = await startTcpForwarder(fleet.nodes[0]!.port);
  const files = fleet.baseFiles();
  for (const f of ['models/good.yaml', 'models/kev.yaml', 'models/huge.yaml']) delete files[f];
  files['nodes/node-1.yaml'] = files['nodes/node-1.yaml']!.replace(`port: ${fleet.nodes[0]!.port}`, `port: ${fwd.port}`);
  files['models/slowdl.yaml'] = [`source: ${origin.url}`, `sha256: ${model.sha256}`, 'profile: tiny', 'replicas: 1', ''].join('\n');
  await fleet.push(files, 'a model downloaded slowly, through a forwarder that will be cut');
});

after(async () => {
  await fleet?.cleanup();
  await fwd?.close();
  await origin?.close();
  for (const o of engineOrigins) await o.close();
});

/** curl processes writing this model's part file right now. */
function downloads(): number {
  const r = spawnSync('pgrep', ['-a', 'curl'], { encoding: 'utf8' });
  return r.stdout.split('\n').filter((l) => l.includes(`${model.sha256}.gguf.part`)).length;
}

/** Processes (from /proc) whose command name is `comm`, with their argv. */
function processes(comm: string): { pid: string; argv: string[] }[] {
  const out: { pid: string; argv: string[] }[] = [];
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      if (readFileSync(`/proc/${pid}/comm`, 'utf8').trim() !== comm) continue;
      out.push({ pid, argv: readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0') });
    } catch {
      /* gone meanwhile */
    }
  }
  return out;
}

/**
 * Engine installs waiting for another to finish: `flock 8` (the blocking call ENGINE_LOCK makes after
 * `flock -n 8` failed) on this lock file.
 */
function lockWaiters(lockFile: string): number {
  return processes('flock').filter(({ pid, argv }) => {
    if (argv[1] !== '8') return false;
    try {
      return readlinkSync(`/proc/${pid}/fd/8`) === lockFile;
    } catch {
      return false;
    }
  }).length;
}

/** Names and contents (sha256, or the target of a symlink) of the entries of a flat directory. */
function tree(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    const st = lstatSync(p);
    out.set(name, st.isSymbolicLink() ? `-> ${readlinkSync(p)}` : st.isFile() ? createHash('sha256').update(readFileSync(p)).digest('hex') : 'dir');
  }
  return out;
}

/** Processes that have this file open (on any descriptor): the runs holding or waiting on a lock file. */
function openers(file: string): number {
  let n = 0;
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue; // gone meanwhile, or not ours to read
    }
    // each descriptor on its own: one closed between the listing and its read (dash saves and
    // restores fds around every builtin with a redirection) must not hide the lock held on fd 8
    if (fds.some((fd) => { try { return readlinkSync(`/proc/${pid}/fd/${fd}`) === file; } catch { return false; } })) n++;
  }
  return n;
}

/** Engine versions pushed so far (each push writes the whole engines file). */
const engineVersions: { version: string; url: string }[] = [];
const engineOrigins: ThrottledOrigin[] = [];
let archive: { path: string; bytes: number; sha256: string; srcDir: string } | undefined;

/** The engine artifact: a tar.gz of the cached llama-server dir (made once). */
async function engineArchive(): Promise<NonNullable<typeof archive>> {
  if (archive) return archive;
  const srcDir = await llamaServerDir();
  const path = join(fleet.stateDir, '..', 'llama-art.tar.gz');
  const tar = spawnSync('tar', ['-czf', path, '--exclude=./.complete', '-C', srcDir, '.'], { encoding: 'utf8' });
  assert.equal(tar.status, 0, tar.stderr);
  const data = readFileSync(path);
  archive = { path, bytes: data.length, sha256: createHash('sha256').update(data).digest('hex'), srcDir };
  return archive;
}

/**
 * Engine llama-cpp@<version> installed on the node from the archive, served by a throttled origin that
 * holds every download at 40 % until released, and a model (file:// source) on a profile that uses it.
 * The sampler watches the node while the test runs: artifact downloads, staging dirs and runs waiting
 * on the install lock at once, and whether the version's dir ever looked installed without being whole.
 */
async function engineInstallCase(version: string, seed: number) {
  const art = await engineArchive();
  const origin = await startThrottledOrigin(art.path, { bytesPerSecond: ENGINE_BYTES_PER_SECOND, path: `/llama-${version}.tar.gz`, holdAt: Math.floor(art.bytes * 0.4) });
  engineOrigins.push(origin);
  const tiny = await writeTinyModel(join(fleet.stateDir, '..', `${version}.gguf`), { seed });
  const dataDir = fleet.nodes[0]!.dataDir;
  const engineDir = join(dataDir, 'engines', 'llama-cpp');
  const final = join(engineDir, version);
  const lockFile = join(dataDir, '.locks', `engine-llama-cpp@${version}.lock`);
  const curls = (): number => processes('curl').filter((p) => p.argv.includes(origin.url)).length;
  const stages = (): string[] => (existsSync(engineDir) ? readdirSync(engineDir).filter((f) => f.startsWith(`.${version}.`)) : []);
  const seen = { curls: 0, stages: 0, waiters: 0, halfInstalled: [] as string[] };
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      seen.curls = Math.max(seen.curls, curls());
      seen.stages = Math.max(seen.stages, stages().length);
      seen.waiters = Math.max(seen.waiters, lockWaiters(lockFile));
      // the version's dir appears only whole: its .complete names a binary that can run
      if (existsSync(final)) {
        try {
          accessSync(readFileSync(join(final, '.complete'), 'utf8').split('\n')[0]!, constants.X_OK);
        } catch (e) {
          seen.halfInstalled.push(`${readdirSync(final).join(',')}: ${(e as Error).message}`);
        }
      }
      await sleep(50); // deliberate: the sampler's period (the most downloads, staging dirs, lock waiters at once)
    }
  })();
  const model = `m-${version}`;
  const files = fleet.baseFiles();
  const mark = ctl.logs.length;
  await fleet.push({
    'engines/llama-cpp.yaml': `${files['engines/llama-cpp.yaml']!}${engineVersions.map((v) => `  ${v.version}:\n    artifact:\n      url: ${v.url}\n      sha256: ${art.sha256}\n`).join('')}  ${version}:\n    artifact:\n      url: ${origin.url}\n      sha256: ${art.sha256}\n`,
    [`profiles/${version}.yaml`]: files['profiles/tiny.yaml']!.replace('engine: llama-cpp@test', `engine: llama-cpp@${version}`),
    [`models/${model}.yaml`]: [`source: file://${tiny.path}`, `sha256: ${tiny.sha256}`, `profile: ${version}`, 'replicas: 1', ''].join('\n'),
  }, `add ${model}, on an engine version installed from an artifact served slowly through the forwarder`);
  engineVersions.push({ version, url: origin.url });
  return {
    art, origin, model, dataDir, final, lockFile, curls, stages, seen,
    async stop(): Promise<void> {
      sampling = false;
      await sampler;
    },
    /** The checks both engine cases share, once the model is ready. */
    assertInstalled(): { failedCodes: string[]; secrets: string } {
      const m = ctl.reconciler.model(model)!;
      assert.equal(m.consecutiveFailures, 0, JSON.stringify(m.lastError));
      const logs = ctl.logs.slice(mark);
      const failed = logs.filter((l) => l.msg === 'replica start failed' && l.model === model).map((l) => String(l.code));
      assert.ok(failed.length >= 1, 'the cut failed the first install run');
      for (const code of failed) assert.ok(!countsTowardParking(code), `a failure counted toward parking: ${code}`);
      for (const code of ['ENGINE_CHECKSUM_MISMATCH', 'ENGINE_DOWNLOAD_FAILED', 'ENGINE_ARTIFACT_INVALID']) {
        assert.ok(!logs.some((l) => JSON.stringify(l).includes(code)), `no ${code}`);
      }
      assert.equal(seen.curls, 1, `${seen.curls} downloads of the artifact at once (1: the sampler saw the one)`);
      assert.ok(seen.stages <= 1, `${seen.stages} staging dirs at once`);
      assert.deepEqual(seen.halfInstalled, [], 'no half-unpacked dir looked installed');
      // the install is the archive's content, marked complete; no staging dir is left
      const want = tree(art.srcDir);
      want.delete('.complete');
      const got = tree(final);
      assert.equal(readFileSync(join(final, '.complete'), 'utf8').split('\n')[0], join(final, 'llama-server'));
      got.delete('.complete');
      // and the build its --version named (#40), recorded beside .complete
      assert.match(readFileSync(join(final, '.build'), 'utf8'), /^\S.*\n$/);
      got.delete('.build');
      assert.deepEqual([...got].sort(), [...want].sort(), "the installed files are the archive's");
      assert.deepEqual(stages(), [], 'no staging dir left');
      // ready on the installed engine: the one llama-server of the model runs the binary from the artifact
      const running = replicaProcesses(dataDir).filter((id) => id.startsWith(`${model}-`));
      assert.equal(running.length, 1, running.join(','));
      const pid = readFileSync(join(dataDir, 'replicas', running[0]!, 'pid'), 'utf8').trim();
      assert.equal(readlinkSync(`/proc/${pid}/exe`), join(final, 'llama-server'));
      assert.deepEqual(m.replicas.map((r) => r.id), running);
      const scan = new SecretsScan().secret('engine key', 'test-engine-key').secret('git token', fleet.git.token);
      scan.collect('controller log', logs.map((l) => JSON.stringify(l)).join('\n'));
      scan.collect('snapshot', JSON.stringify(ctl.reconciler.snapshot()));
      scan.assertClean();
      return { failedCodes: failed, secrets: scan.summary };
    },
  };
}

describe('fault 3: a partition mid-download', () => {
  it('cut halfway through the download, restored after 2 s: one download, the right file, nothing counted, ready', async () => {
    let maxDownloads = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        maxDownloads = Math.max(maxDownloads, downloads());
        await sleep(100); // deliberate: the sampler's period (the most downloads at once)
      }
    })();
    ctl = await fleet.startController();
    const first = () => origin.gets.find((g) => g.range === '' || /^bytes=\d+-$/.test(g.range));
    await until('the download 30 % through', 60_000, () => first() && first()!.sent > model.bytes * 0.3, { diag: () => JSON.stringify(origin.gets) });
    const sentAtCut = first()!.sent;
    fwd.cut();
    await sleep(2000); // deliberate: the partition, 2 s of real time against real sshd
    fwd.restore();
    await ctl.until('slowdl ready after the partition', 120_000, () => ctl.reconciler.model('slowdl')?.phase === 'ready');
    sampling = false;
    await sampler;

    const m = ctl.reconciler.model('slowdl')!;
    assert.equal(m.consecutiveFailures, 0, JSON.stringify(m.lastError));
    assert.ok(!ctl.logs.some((l) => JSON.stringify(l).includes('MODEL_CHECKSUM_MISMATCH')), 'no checksum mismatch');
    assert.ok(maxDownloads <= 1, `${maxDownloads} downloads of the file at once`);
    assert.ok(maxDownloads === 1, 'the sampler saw the download');
    const modelsDir = join(fleet.nodes[0]!.dataDir, 'models');
    const left = readdirSync(modelsDir).filter((f) => f.endsWith('.part') || f.endsWith('.err'));
    assert.deepEqual(left, [], 'no partial left');
    const final = join(modelsDir, `${model.sha256}.gguf`);
    assert.ok(existsSync(final));
    assert.equal(createHash('sha256').update(readFileSync(final)).digest('hex'), model.sha256);
    // the download that outlived its connection finished the file; nothing downloaded it again
    const full = origin.gets.filter((g) => g.range === '' || /^bytes=\d+-$/.test(g.range));
    assert.equal(full.length, 1, JSON.stringify(origin.gets));
    assert.ok(fwd.refused > 0 || fwd.accepted > 1, 'the controller reconnected after the cut');

    const scan = new SecretsScan().secret('engine key', 'test-engine-key').secret('git token', fleet.git.token);
    scan.collect('controller log', ctl.logs.map((l) => JSON.stringify(l)).join('\n'));
    scan.collect('snapshot', JSON.stringify(ctl.reconciler.snapshot()));
    scan.assertClean();
    recordFault({
      fault: '3 partition mid-download',
      injected: `every controller↔sshd connection destroyed (forwarder, sshd untouched) at ${Math.round((sentAtCut / model.bytes) * 100)}% of a ${(model.bytes / 2 ** 20).toFixed(1)} MiB download at ${BYTES_PER_SECOND / 1024} KiB/s, new ones refused for 2 s`,
      held: `at most ${maxDownloads} download of the file at once (the retry waited on the node's lock); one full GET; sha256 matches, no .part/.err left; 0 failures counted, no checksum mismatch; ready; ${scan.summary}`,
    });
  });

  it('cut right after "starting replica", restored after 2 s: the replica ends adopted or stopped — ready once, no orphan, nothing counted', async () => {
    const files = fleet.baseFiles();
    await fleet.push({ 'models/good.yaml': files['models/good.yaml']! }, 'add good (file:// source: its start is quick to reach)');
    const mark = ctl.logs.length;
    void ctl.reconciler.requestPass('test');
    await until('good starting', 60_000, () => ctl.logs.slice(mark).some((l) => l.msg === 'starting replica' && l.model === 'good'));
    fwd.cut();
    await sleep(2000); // deliberate: the partition, 2 s of real time against real sshd
    fwd.restore();
    await ctl.until('good ready after the partition', 120_000, () => ctl.reconciler.model('good')?.phase === 'ready');
    // settled: every llama-server of good on the node is a replica the controller reports
    await ctl.until('one llama-server of good, the one the controller reports', 60_000, () => {
      const known = new Set(ctl.reconciler.model('good')!.replicas.map((r) => r.id));
      const running = replicaProcesses(fleet.nodes[0]!.dataDir).filter((id) => id.startsWith('good-'));
      return running.length === 1 && running.every((id) => known.has(id));
    });
    const m = ctl.reconciler.model('good')!;
    assert.equal(m.consecutiveFailures, 0, JSON.stringify(m.lastError));
    assert.equal(m.replicas.length, 1);
    recordFault({
      fault: '3 partition mid-start',
      injected: "every controller↔sshd connection destroyed right after 'starting replica', new ones refused for 2 s",
      held: 'the replica ended adopted or stopped and replaced: one llama-server of the model, the one the controller reports; 0 failures counted; ready',
    });
  });

  it('cut halfway through an engine artifact download, restored after 2 s: one install at a time, the right files, nothing counted, ready on the installed engine', async () => {
    const c = await engineInstallCase('art', 12);
    // held at 40 % until the controller's retry is seen waiting on the node's install lock, so the
    // retry meets the first install's curl still running on the node, whatever the machine's speed
    await ctl.until('the artifact download held at 40 %', 60_000, () => c.origin.holding);
    const sentAtCut = c.origin.gets[0]!.sent;
    fwd.cut();
    await sleep(2000); // deliberate: the partition, 2 s of real time against real sshd
    const curlsAtRestore = c.curls();
    fwd.restore();
    // the retry reaches the node and waits on the install lock (were the lock broken, it would start
    // a second download instead: the sampler counts both)
    await ctl.until("the controller's retry waiting on the node's install lock", 60_000, () => c.seen.waiters > 0 || c.seen.curls > 1);
    c.origin.release();
    await ctl.until(`${c.model} ready after the partition`, 120_000, () => ctl.reconciler.model(c.model)?.phase === 'ready');
    await c.stop();

    assert.ok(sentAtCut > 0 && sentAtCut < c.art.bytes, `cut after ${sentAtCut} of ${c.art.bytes} bytes`);
    assert.equal(curlsAtRestore, 1, 'the install cut off from the controller kept downloading on the node');
    assert.ok(c.seen.waiters >= 1, 'the retry waited on the install lock');
    const { failedCodes, secrets } = c.assertInstalled();
    // one full GET: the run cut off from the controller finished the install, the retry reused it
    assert.equal(c.origin.gets.length, 1, JSON.stringify(c.origin.gets));
    assert.ok(c.origin.gets[0]!.done);
    recordFault({
      fault: '3 partition mid-engine-install',
      injected: `every controller↔sshd connection destroyed (forwarder, sshd untouched) at ${Math.round((sentAtCut / c.art.bytes) * 100)}% of a ${(c.art.bytes / 2 ** 20).toFixed(1)} MiB engine artifact download on the node, new ones refused for 2 s`,
      held: `the cut-off install kept going on the node and finished it; the retry waited on its lock (at most ${c.seen.curls} download, ${c.seen.stages} staging dir at once); one full GET; the installed files are the archive's, .complete last, no staging dir left; 0 failures counted (${failedCodes.join(', ')}), no engine checksum/download/unpack error; ready on the installed engine; ${secrets}`,
    });
  });

  it('cut halfway through an engine artifact download that then fails on the node: the cut-off install leaves no staging dir; the retry installs; nothing counted', async () => {
    const c = await engineInstallCase('art2', 13);
    await ctl.until('the artifact download held at 40 %', 60_000, () => c.origin.holding);
    const sentAtCut = c.origin.gets[0]!.sent;
    const cutAt = Date.now();
    fwd.cut();
    // the origin drops the held download: the install cut off from the controller fails on the node,
    // its error going to a connection that is gone
    assert.equal(c.origin.dropHeld(), 1);
    await until('the cut-off install to end after its download failed', 30_000, () => openers(c.lockFile) === 0);
    const leftByCutOff = c.stages();
    await sleep(Math.max(0, cutAt + 2000 - Date.now())); // deliberate: the partition lasts 2 s of real time against real sshd
    c.origin.release();
    fwd.restore();
    await ctl.until(`${c.model} ready after the partition`, 120_000, () => ctl.reconciler.model(c.model)?.phase === 'ready');
    await c.stop();

    assert.ok(sentAtCut > 0 && sentAtCut < c.art.bytes, `cut after ${sentAtCut} of ${c.art.bytes} bytes`);
    assert.deepEqual(leftByCutOff, [], 'the failed cut-off install removed its staging dir (and the partial archive in it)');
    const { failedCodes, secrets } = c.assertInstalled();
    // the dropped GET, then the retry's full one
    assert.deepEqual(c.origin.gets.map((g) => g.done), [false, true], JSON.stringify(c.origin.gets));
    recordFault({
      fault: '3 partition mid-engine-install, download then fails',
      injected: `every controller↔sshd connection destroyed at ${Math.round((sentAtCut / c.art.bytes) * 100)}% of a ${(c.art.bytes / 2 ** 20).toFixed(1)} MiB engine artifact download on the node, then the origin dropped that download; new connections refused for 2 s`,
      held: `the cut-off install failed on the node and removed its staging dir (partial archive included); the retry downloaded and installed it (at most ${c.seen.curls} download, ${c.seen.stages} staging dir at once); the installed files are the archive's, no staging dir left; 0 failures counted (${failedCodes.join(', ')}); ready on the installed engine; ${secrets}`,
    });
  });
});
