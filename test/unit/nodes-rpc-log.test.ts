/**
 * The head's RPC log matchers (src/nodes/rpc-log.ts) on lines captured from the real llama-server and
 * rpc-server of the test engine (test/fixtures/rpc-logs/: a head at -lv 4 with one worker; the whole log
 * of a head whose worker is not listening, with the abort's backtrace; of one whose "worker" answered
 * HELLO as protocol 5.0.0; the tail of one whose worker was killed with SIGKILL before a request), and
 * on lines they must not match; and classifyFailure (failure.ts) on those logs.
 */
import { strict as assert } from 'node:assert';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { classifyFailure } from '../../src/nodes/failure.js';
import { parseRpcBuffer, rpcBuffers, rpcHeadFailure, workersNotLoaded } from '../../src/nodes/rpc-log.js';
import { repoRoot } from '../harness/paths.js';

const log = (name: string): string => readFileSync(join(repoRoot, 'test', 'fixtures', 'rpc-logs', `${name}.log`), 'utf8');

describe('rpc-log: buffers', () => {
  it('a ready head: the worker\'s model, KV and compute buffers', () => {
    const seen = rpcBuffers(log('head-ready'));
    assert.deepEqual([...seen.keys()], ['127.0.0.1:31990']);
    assert.deepEqual(seen.get('127.0.0.1:31990'), [
      { device: 'RPC0', endpoint: '127.0.0.1:31990', kind: 'model', mib: 2.66 },
      { device: 'RPC0', endpoint: '127.0.0.1:31990', kind: 'KV', mib: 0.5 },
      { device: 'RPC0', endpoint: '127.0.0.1:31990', kind: 'compute', mib: 1.25 },
    ]);
    assert.deepEqual(workersNotLoaded(log('head-ready'), ['127.0.0.1:31990']), []);
    assert.deepEqual(workersNotLoaded(log('head-ready'), ['127.0.0.1:31990', '10.0.0.6:50052']), ['10.0.0.6:50052']);
  });

  const others: [string, string][] = [
    ['the head\'s own CPU buffer', '0.00.107.954 I load_tensors:   CPU_Mapped model buffer size =     0.16 MiB'],
    ['a GPU buffer', 'load_tensors: Vulkan0 model buffer size = 2.04 MiB'],
    ['the device list', '0.00.045.073 I cmn  common_param:   - RPC0    : 127.0.0.1:31990 (24105 MiB, 24105 MiB free)'],
    ['a model name that quotes a buffer line', 'llama_model_loader: - kv   1: general.name str = RPC0[x] model'],
  ];
  for (const [what, line] of others) it(`not a worker buffer: ${what}`, () => assert.equal(parseRpcBuffer(line), null));
});

describe('rpc-log: why a head failed', () => {
  const cases: [string, ReturnType<typeof rpcHeadFailure>][] = [
    ['head-version-mismatch', { code: 'RPC_VERSION_MISMATCH', endpoint: '127.0.0.1:31988', message: 'the worker at 127.0.0.1:31988 speaks RPC protocol 5.0.0, which this head\'s llama-server does not (the hosts run different engine versions)' }],
    ['head-unreachable', { code: 'RPC_WORKER_UNREACHABLE', endpoint: '127.0.0.1:31989', message: 'the head could not connect to the worker at 127.0.0.1:31989' }],
    ['head-worker-died', { code: 'RPC_WORKER_EXITED', endpoint: null, message: 'a worker died or dropped its connection while the head used it (the head aborted)' }],
    ['head-ready', null],
    ['worker-start', null],
  ];
  for (const [name, want] of cases) it(name, () => assert.deepEqual(rpcHeadFailure(log(name)), want));
});

describe('a head that died of its worker, classified like any replica failure', () => {
  // the abort's backtrace carries "No such file or directory" lines, which alone would read as a model load failure
  const cases: [string, string, RegExp][] = [
    ['head-version-mismatch', 'RPC_VERSION_MISMATCH', /RPC server version mismatch: 5\.0\.0/],
    ['head-unreachable', 'RPC_WORKER_UNREACHABLE', /ggml-rpc\.cpp:547: Failed to connect to 127\.0\.0\.1:31989$/],
    ['head-worker-died', 'RPC_WORKER_EXITED', /Remote RPC server crashed or returned malformed response$/],
  ];
  for (const [name, code, message] of cases) {
    it(name, () => {
      assert.match(log(name), /No such file or directory/);
      const f = classifyFailure(log(name), 'process gone');
      assert.equal(f.code, code);
      assert.match(f.message, message);
    });
  }
});
