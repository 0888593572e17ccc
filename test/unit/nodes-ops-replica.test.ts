/**
 * The replica operations — ports query, start, inspect, log tail, file range, stop — rendered, run
 * under dash and bash over a fixture data dir with a stand-in for llama-server (a tiny script that
 * prints its argv and whether it got a key, then sleeps or fails), and parsed with their parsers.
 */
import { strict as assert } from 'node:assert';
import { existsSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { ProfileSpec } from '../../src/fleet-spec/types.js';
import { engineKeyFingerprint, type ReplicaStartSpec } from '../../src/nodes/driver.js';
import { failureOf, inspectReplicaScript, parseInspection } from '../../src/nodes/ops/replica-inspect.js';
import { logTailScript, parseRange, readRangeScript } from '../../src/nodes/ops/replica-log.js';
import {
  EXIT_PORT_TAKEN, EXIT_REPLICA_EXISTS, parseStarted, parseUsedPorts, replicaArgv, replicaStateHead, startReplicaScript, usedPortsScript,
} from '../../src/nodes/ops/replica-start.js';
import { stopReplicaScript } from '../../src/nodes/ops/replica-stop.js';
import { pickPort } from '../../src/nodes/ports.js';
import { scriptError } from '../../src/nodes/script-errors.js';
import { killGroup, makeDataDir, procStartTime, run, runOk, SHELLS, writeExe, type DataDir } from './nodes-ops-fixture.js';

const KEY = 'engine-key-0123456789';
const NONCE = '0a1b2c3d4e5f6071';
const profile: ProfileSpec = {
  name: 'p', file: 'profiles/p.yaml', engine: 'llama', engineVersion: 'b1', ctxSize: 256, threads: 1, parallel: 1,
  batchSize: null, embeddings: false, extraArgs: ["x'$(id)"], memoryOverheadBytes: 0, cacheRamBytes: 0, startTimeoutMs: 1000,
};

let listener: Server;
let listening: number;
const pids = new Set<number>();

before(async () => {
  listener = createServer();
  await new Promise<void>((resolve) => listener.listen(0, '127.0.0.1', resolve));
  listening = (listener.address() as { port: number }).port;
});

after(async () => {
  for (const p of pids) killGroup(p);
  await new Promise((resolve) => listener.close(resolve));
});

async function until(what: string, ok: () => boolean): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

for (const shell of SHELLS) {
  describe(`ops/replica-*: ${shell}`, () => {
    let fx: DataDir;
    let server: string;
    let failing: string;
    before(() => {
      fx = makeDataDir(`replica-${shell}`);
      server = writeExe(join(fx.root, 'llama server'), `printf 'args:%s\\n' "$*"
[ -n "\${LLAMA_API_KEY:-}" ] && echo has-key
echo "env:$NODE_VAR"
exec sleep 120
`);
      failing = writeExe(join(fx.root, 'failing-server'), `echo "llama_model_load: error loading model: failed to open GGUF file '$2'"
exit 1
`);
    });
    after(() => fx.remove());

    const spec = (id: string, binary: string): ReplicaStartSpec => ({ id, model: 'm', digest: 'd', modelPath: '/m/x.gguf', binary, profile, apiKey: KEY });
    const start = (id: string, binary: string, port: number, stdin = `${KEY}\n`) => {
      const s = spec(id, binary);
      const argv = replicaArgv(s, '127.0.0.1', port);
      const r = run(shell, startReplicaScript({ dataDir: fx.dataDir, id, port, argv, stateHead: replicaStateHead(s, fx.dataDir, '127.0.0.1', port, argv), env: { NODE_VAR: "v'$(id)" } }), { stdin });
      const started = r.code === 0 ? parseStarted(r.stdout) : null;
      if (started) pids.add(started.pid);
      return { r, started, argv };
    };
    const used = () => parseUsedPorts(runOk(shell, usedPortsScript(fx.dataDir, NONCE)).stdout, NONCE);
    const inspect = (id: string) => parseInspection(runOk(shell, inspectReplicaScript(fx.dataDir, id, NONCE, 20)).stdout, NONCE);

    let port = 0;
    let pid = 0;

    it('ports: a listening socket is used', () => {
      assert.ok(used().has(listening), `port ${listening} not reported`);
    });

    it('start: launched detached with the key from stdin in its env (never its argv), state.json written, pid parsed', async () => {
      port = pickPort('n', { from: 41000, to: 41999 }, used(), new Set());
      const before = Date.now();
      const { r, started, argv } = start('r-1', server, port);
      assert.equal(r.code, 0, r.stderr);
      assert.ok(started, `no pid line in ${r.stdout}`);
      pid = started.pid;
      assert.ok(started.startedAtMs >= Math.floor(before / 1000) * 1000 && started.startedAtMs <= Date.now());
      assert.equal(String(started.procStartTime), procStartTime(pid));
      await until('the stand-in to run', () => readFileSync(`/proc/${pid}/cmdline`, 'utf8').startsWith('sleep'));
      assert.ok(readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').includes(`LLAMA_API_KEY=${KEY}`));
      assert.ok(!argv.includes(KEY) && !r.stdout.includes(KEY) && !r.stderr.includes(KEY));
      const ins = inspect('r-1');
      assert.equal(ins.alive, true);
      assert.deepEqual({ port: ins.state?.port, pid: ins.state?.pid, st: ins.state?.procStartTime, at: ins.state?.startedAt, fp: ins.state?.keyFingerprint, argv: ins.state?.argv },
        { port, pid, st: started.procStartTime, at: started.startedAtMs, fp: engineKeyFingerprint(KEY), argv });
      assert.ok(used().has(port), 'the live replica claims its port');
    });

    it('start refuses: the same id alive (76), a listening or claimed port (75), no key on stdin (SECRET_INVALID)', () => {
      assert.equal(start('r-1', server, port + 1).r.code, EXIT_REPLICA_EXISTS);
      assert.equal(start('r-2', server, listening).r.code, EXIT_PORT_TAKEN);
      assert.equal(start('r-2', server, port).r.code, EXIT_PORT_TAKEN);
      const nokey = start('r-3', server, port + 2, '');
      assert.equal(scriptError('n', 'start', nokey.r).code, 'SECRET_INVALID');
      assert.ok(!existsSync(join(fx.dataDir, 'replicas', 'r-3')), 'no replica dir left without a key');
    });

    it('log tail and file range read the replica log', async () => {
      await until('the log', () => readFileSync(join(fx.dataDir, 'replicas', 'r-1', 'log'), 'utf8').includes('env:'));
      const tail = runOk(shell, logTailScript(fx.dataDir, 'r-1', 10)).stdout;
      assert.match(tail, /^args:.*--port \d+ .*x'\$\(id\)\nhas-key\nenv:v'\$\(id\)\n$/);
      const logPath = join(fx.dataDir, 'replicas', 'r-1', 'log');
      const whole = readFileSync(logPath);
      const got = parseRange(runOk(shell, readRangeScript(logPath, 5, 7)).stdout, 'n', logPath);
      assert.deepEqual(got, { size: whole.length, data: whole.subarray(5, 12) });
      assert.equal(scriptError('n', 'log', run(shell, logTailScript(fx.dataDir, 'nope', 10))).code, 'REPLICA_NOT_FOUND');
      assert.equal(scriptError('n', 'read', run(shell, readRangeScript(join(fx.root, 'nope'), 0, 1))).code, 'MODEL_FILE_NOT_FOUND');
      assert.throws(() => parseRange('garbage', 'n', logPath), (e: unknown) => (e as { code?: string }).code === 'NODE_COMMAND_FAILED');
    });

    it('stop: the process group is gone, the dir removed; inspect reports it missing', () => {
      runOk(shell, stopReplicaScript(fx.dataDir, 'r-1', 2000));
      assert.ok(!existsSync(`/proc/${pid}`) || readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z'), 'the replica survived its stop');
      assert.ok(!existsSync(join(fx.dataDir, 'replicas', 'r-1')));
      assert.deepEqual(inspect('r-1'), { state: null, alive: false, logTail: '' });
      runOk(shell, stopReplicaScript(fx.dataDir, 'r-1', 2000)); // idempotent
    });

    it('a replica that exits: inspect reports it dead with its log, classified', async () => {
      const { r } = start('r-4', failing, port);
      assert.equal(r.code, 0, r.stderr);
      await until('the stand-in to exit', () => !inspect('r-4').alive);
      const ins = inspect('r-4');
      assert.match(ins.logTail, /failed to open GGUF file '\/m\/x\.gguf'$/);
      assert.equal(failureOf(ins.logTail).code, 'REPLICA_MODEL_LOAD_FAILED');
      runOk(shell, stopReplicaScript(fx.dataDir, 'r-4', 0));
    });
  });
}
