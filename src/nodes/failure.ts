/**
 * Classify why a llama-server replica failed, from the tail of its log. The message is the
 * engine's own line (e.g. "llama_model_load: error loading model: error loading model architecture:
 * unknown model architecture: 'kev'"), so an operator sees what llama.cpp said, not a generic text.
 *
 * What llama-server prints (node-llama-cpp 3.21.1's llama.cpp; see test/harness/llama-server.ts):
 *   unknown arch   unknown model architecture: 'kev'
 *   missing file   gguf_init_from_file: failed to open GGUF file '/x.gguf' (No such file or directory)
 *   load failure   llama_model_load_from_file_impl: failed to load model
 *   port in use    start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 41234
 *   device OOM     vk::Device::allocateMemory: ErrorOutOfDeviceMemory / cudaMalloc failed: out of memory /
 *                  failed to allocate Vulkan0 buffer of size … (before the host rule: it says "allocate" too)
 *   out of memory  failed to allocate … / unable to allocate … / std::bad_alloc / Cannot allocate memory
 *   RPC worker     RPC server version mismatch: 5.0.0 / …/ggml-rpc.cpp:547: Failed to connect to 10.0.0.5:50052 /
 *                  …/ggml-rpc.cpp:566: Remote RPC server crashed or returned malformed response (a head, #40)
 *
 * llama-server can exit without its reason: its logger is a background thread that is not drained
 * at exit (common/log.cpp leaks it on purpose), so the lines still queued when main() returns are
 * lost — on a busy machine every line of a start that fails within milliseconds. The unknown-
 * architecture model launched by hand as the start script does, on 2 cores: exit code 1 and no
 * reason in the log in 8 of 100 and 2 of 300 runs while other work loaded them, in none of 400
 * with the cores idle or only spinning. What is lost is the tail of the queue, never lines in
 * between. A dead process's log is final: reading it again later finds nothing more. Such a
 * failure is `silent`.
 */
import { reasonText, type ReasonCode } from '../errors/catalogue.js';

export interface ClassifiedFailure {
  readonly code: ReasonCode;
  readonly message: string;
  /**
   * The log names no reason: no catalogue rule and no error line — empty, or only the lines a start
   * prints before it fails (the engine's reason lost at exit, or a kill without a word).
   */
  readonly silent: boolean;
}

interface Rule {
  readonly code: ReasonCode;
  readonly test: RegExp;
}

// Order matters: an unknown architecture is also "failed to load model"; a failed allocation is
// also a failed load.
const RULES: readonly Rule[] = [
  // a head of an RPC group (#40, rpc-log.ts) aborts on its worker's failure, and the abort's backtrace
  // has "No such file or directory" lines: these first
  { code: 'RPC_VERSION_MISMATCH', test: /RPC server version mismatch/ },
  { code: 'RPC_WORKER_UNREACHABLE', test: /ggml-rpc\.cpp:\d+: Failed to connect to/ },
  { code: 'RPC_WORKER_EXITED', test: /Remote RPC server crashed or returned malformed response/ },
  { code: 'REPLICA_UNKNOWN_ARCHITECTURE', test: /unknown model architecture/i },
  { code: 'REPLICA_DEVICE_OUT_OF_MEMORY', test: /ErrorOutOfDeviceMemory|OutOfDeviceMemory|cudaMalloc failed|CUDA error: out of memory|(failed|unable) to allocate (Vulkan|CUDA)\d+ buffer|ggml_vulkan: (Device memory allocation|.*out of memory)/i },
  { code: 'REPLICA_OUT_OF_MEMORY', test: /failed to allocate|unable to allocate|std::bad_alloc|cannot allocate memory|out of memory|failed to initialize the context|\boom\b/i },
  { code: 'REPLICA_PORT_IN_USE', test: /couldn't bind HTTP server socket|address already in use/i },
  { code: 'REPLICA_MODEL_LOAD_FAILED', test: /failed to open GGUF file|No such file or directory|failed to load model|error loading model|invalid magic|not a GGUF file|failed to read/i },
];

// Lines that say "we are exiting" but not why.
const NOISE = /cleaning up before exit|exiting due to|^main: |^\s*$|^srv\s+operator\(\)/;
const ERRORISH = /error|fail|invalid|unknown|cannot|can't|couldn't|unable|abort|terminate|exception|not found|denied|killed|segmentation/i;

/** Strip ANSI colour codes, carriage returns and llama.cpp's log prefix ("0.00.018.295 E "). */
function clean(line: string): string {
  return line
    // eslint-disable-next-line no-control-regex
    .replace(/\x1b\[[0-9;]*m/g, '')
    .replace(/\r/g, '')
    .replace(/^\s*\d+\.\d+\.\d+\.\d+ [A-Z] /, '')
    .trim();
}

/**
 * The reason a replica failed, from its log tail. `exit` (when known) is added to REPLICA_EXITED
 * messages, e.g. "killed by SIGKILL". The message is a reason's text (catalogue.ts reasonText): at most
 * 2 KiB, control characters replaced; the whole line stays in the replica's log.
 */
export function classifyFailure(logTail: string, exit?: string): ClassifiedFailure {
  const f = classify(logTail, exit);
  // the line may carry a GGUF's strings (a 700 KiB architecture name, a terminal escape): bounded and printable
  return { ...f, message: reasonText(f.message) };
}

function classify(logTail: string, exit?: string): ClassifiedFailure {
  const lines = logTail.split('\n').map(clean).filter((l) => l !== '');
  for (const rule of RULES) {
    // the first matching line is usually the root cause (later ones are consequences)
    const line = lines.find((l) => rule.test.test(l));
    if (line !== undefined) return { code: rule.code, message: line, silent: false };
  }
  const meaningful = lines.filter((l) => !NOISE.test(l));
  const errorLine = [...meaningful].reverse().find((l) => ERRORISH.test(l));
  const suffix = exit ? ` (${exit})` : '';
  if (errorLine !== undefined) return { code: 'REPLICA_EXITED', message: `llama-server exited${suffix}: ${errorLine}`, silent: false };
  const last = meaningful[meaningful.length - 1] ?? lines[lines.length - 1];
  if (last === undefined) return { code: 'REPLICA_EXITED', message: `llama-server exited with an empty log${suffix}`, silent: true };
  return { code: 'REPLICA_EXITED', message: `llama-server exited${suffix} and its log names no reason; it ends with: ${last}`, silent: true };
}
