import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { classifyFailure } from '../../src/nodes/failure.js';

// Log lines as node-llama-cpp 3.21.1's llama-server prints them when not on a tty.
const UNKNOWN_ARCH = `0.00.008.457 I cmn  common_param: common_params_print_info: verbosity = 3
0.00.013.315 I srv    load_model: loading model '/data/models/32cf.gguf'
0.00.018.295 E llama_model_load: error loading model: unknown model architecture: 'kev'
0.00.022.855 E llama_model_load_from_file_impl: failed to load model
0.00.023.802 E srv    load_model: failed to load model, '/data/models/32cf.gguf'
0.00.023.822 I srv    operator(): operator(): cleaning up before exit...
0.00.029.656 E srv  llama_server: exiting due to model loading error`;

const MISSING = `gguf_init_from_file: failed to open GGUF file '/x/missing.gguf' (No such file or directory)
llama_model_load: error loading model: llama_model_loader: failed to load model from /x/missing.gguf
llama_model_load_from_file_impl: failed to load model
srv    load_model: failed to load model, '/x/missing.gguf'
main: exiting due to model loading error`;

const PORT = `srv    load_model: loading model '/m.gguf'
start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 41234
srv    operator(): operator(): cleaning up before exit...
main: exiting due to HTTP server error`;

const OOM = `llama_kv_cache: CPU KV buffer size = 99999.00 MiB
ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 104856551424
llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache
srv    load_model: failed to load model, '/m.gguf'`;

describe('classifyFailure', () => {
  test('unknown architecture: the engine line, without the timestamp prefix', () => {
    const f = classifyFailure(UNKNOWN_ARCH);
    assert.equal(f.code, 'REPLICA_UNKNOWN_ARCHITECTURE');
    assert.equal(f.message, "llama_model_load: error loading model: unknown model architecture: 'kev'");
  });
  test('missing model file → REPLICA_MODEL_LOAD_FAILED naming the file', () => {
    const f = classifyFailure(MISSING);
    assert.equal(f.code, 'REPLICA_MODEL_LOAD_FAILED');
    assert.match(f.message, /failed to open GGUF file '\/x\/missing.gguf' \(No such file or directory\)/);
  });
  test('port in use', () => {
    const f = classifyFailure(PORT);
    assert.equal(f.code, 'REPLICA_PORT_IN_USE');
    assert.match(f.message, /couldn't bind HTTP server socket/);
  });
  test('out of memory wins over the generic load failure', () => {
    const f = classifyFailure(OOM);
    assert.equal(f.code, 'REPLICA_OUT_OF_MEMORY');
    assert.match(f.message, /failed to allocate buffer/);
    assert.equal(classifyFailure('terminate called after throwing an instance of \'std::bad_alloc\'').code, 'REPLICA_OUT_OF_MEMORY');
  });
  test('anything else → REPLICA_EXITED with the last meaningful line', () => {
    const f = classifyFailure('build: 1 (80fb11a)\nerror: invalid argument: ; touch /tmp/pwned\n\n', 'process gone');
    assert.equal(f.code, 'REPLICA_EXITED');
    assert.match(f.message, /error: invalid argument: ; touch \/tmp\/pwned/);
    assert.match(f.message, /process gone/);
  });
  test('silent: the log names no reason (empty, or only what a start prints before it fails)', () => {
    // llama-server loses the lines still queued in its logger when it exits (failure.ts): the tail of
    // the queue, so a log that has the reason keeps it, and one cut before it names none
    const lines = UNKNOWN_ARCH.split('\n');
    const table: [string, string, string, boolean][] = [
      ['every line', UNKNOWN_ARCH, 'REPLICA_UNKNOWN_ARCHITECTURE', false],
      ['the last lines lost', lines.slice(0, 3).join('\n'), 'REPLICA_UNKNOWN_ARCHITECTURE', false],
      ['cut before the reason', lines.slice(0, 2).join('\n'), 'REPLICA_EXITED', true],
      ['only the first line', lines[0]!, 'REPLICA_EXITED', true],
      ['every line lost', '', 'REPLICA_EXITED', true],
      ['an error line no rule knows', 'build: 1 (80fb11a)\nerror: invalid argument: --bogus', 'REPLICA_EXITED', false],
    ];
    for (const [what, log, code, silent] of table) {
      const f = classifyFailure(log, 'process gone');
      assert.equal(f.code, code, what);
      assert.equal(f.silent, silent, what);
    }
    assert.equal(classifyFailure(lines.slice(0, 2).join('\n'), 'process gone').message, "llama-server exited (process gone) and its log names no reason; it ends with: srv    load_model: loading model '/data/models/32cf.gguf'");
    assert.equal(classifyFailure('', 'process gone').message, 'llama-server exited with an empty log (process gone)');
  });
  test('empty log and ANSI colours', () => {
    assert.equal(classifyFailure('').code, 'REPLICA_EXITED');
    assert.match(classifyFailure('').message, /empty log/);
    const f = classifyFailure('\x1b[31mllama_model_load: error loading model: unknown model architecture: \'x\'\x1b[0m\r');
    assert.equal(f.message, "llama_model_load: error loading model: unknown model architecture: 'x'");
  });
});
