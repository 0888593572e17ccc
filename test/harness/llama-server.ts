/**
 * Test harness for llama.cpp's real `llama-server` (built from node-llama-cpp's llama.cpp bundle by
 * scripts/build-llama-server.sh and cached by version under ~/.cache/llmgw/llama-server/).
 *
 *   const dir = await llamaServerDir();                 // builds once (~10-15 min on 2 cores) if missing
 *   const srv = await startLlamaServer({ model });      // resolves once GET /health is 200
 *   await fetch(`${srv.url}/v1/chat/completions`, …);
 *   await srv.stop();                                   // SIGTERM, then SIGKILL after a grace period
 *
 * ## What llama-server says (node-llama-cpp 3.21.1 = llama.cpp build 1, commit 80fb11a)
 * Observed by test/integration/llama-server.test.ts.
 *
 * CAUTION: llama-server logs through a background thread (common/log.cpp) that is not drained when
 * the process exits, so a failed start can lose its last lines — or, for a failure within ~50 ms
 * such as a port in use, all of its output (seen in ~1 of 10 runs on 2 busy cores). The exit code (1)
 * is reliable; the reason is best effort. The unknown-architecture line is printed twice and came
 * through in every run seen, while the final "exiting due to …" line was missing in ~1 of 10.
 *
 * Everything goes to stderr, one line per message,
 * each prefixed with the time since start and a level letter (I/W/E), e.g. `0.00.011.641 E `; match
 * with a regex, not a whole line. All the failures below exit with code 1 within ~0.1 s (the OOM
 * one after the allocation attempt). The tiny model starts in ~0.05 s (listening line).
 *
 * Unknown architecture (general.architecture = 'kev'); printed twice (once by the memory-fit pass):
 *   E llama_model_load: error loading model: unknown model architecture: 'kev'
 *   E llama_model_load_from_file_impl: failed to load model
 *   E common_fit_params: encountered an error while trying to fit params to free device memory: failed to load model
 *   E cmn  common_init_: failed to load model '/path/kev.gguf'
 *   E srv    load_model: failed to load model, '/path/kev.gguf'
 *   I srv    operator(): operator(): cleaning up before exit...
 *   E srv  llama_server: exiting due to model loading error
 *
 * Model file missing:
 *   E gguf_init_from_file: failed to open GGUF file '/path/nope.gguf' (No such file or directory)
 *   E llama_model_load: error loading model: llama_model_loader: failed to load model from /path/nope.gguf
 *   E llama_model_load_from_file_impl: failed to load model
 *   E cmn  common_init_: failed to load model '/path/nope.gguf'
 *   E srv    load_model: failed to load model, '/path/nope.gguf'
 *   E srv  llama_server: exiting due to model loading error
 *
 * Port already in use (the HTTP socket is bound *before* the model is loaded, so this comes first):
 *   E srv         start: couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 51665
 *   I srv    operator(): operator(): cleaning up before exit...
 *   E srv  llama_server: exiting due to HTTP server error
 *
 * Out of memory (KV cache larger than the address-space limit: `ulimit -v 1500000`, `-c 1000000`):
 *   W llama_context: n_ctx_seq (1000192) > n_ctx_train (2048) -- possible training context overflow
 *   E ggml_aligned_malloc: insufficient memory (attempted to allocate 1953.50 MB)
 *   E ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 2048393216
 *   E alloc_tensor_range: failed to allocate CPU buffer of size 2048393216
 *   E llama_init_from_model: failed to initialize the context: failed to allocate buffer for kv cache
 *   E cmn  common_init_: failed to create context with model '/path/tiny.gguf'
 *   E srv    load_model: failed to create_context with model '/path/tiny.gguf'
 *   E srv  llama_server: exiting due to model loading error
 * Without a limit, the kernel OOM killer may instead SIGKILL the process (code null, signal SIGKILL,
 * no message). And with the default `--fit on`, an absurd context (`-c 200000000` on 24 GB) sat at
 * "loading model" for over 60 s without printing anything: only a start timeout catches that.
 *
 * API key: `--api-key KEY` or the environment variable `LLAMA_API_KEY` (common/arg.cpp; a comma-separated
 * list for several keys; `LLAMA_ARG_API_KEY_FILE` names a file of keys, one per line). A request
 * without a valid `Authorization: Bearer KEY` (or `X-Api-Key: KEY`) gets 401
 * {"error":{"code":401,"message":"Invalid API Key","type":"authentication_error"}} and the server logs
 * `W srv  …: unauthorized: Invalid API Key`. Only GET /health and /v1/health are public (not /v1/models).
 * Most other flags also read LLAMA_ARG_* variables (LLAMA_ARG_CTX_SIZE, LLAMA_ARG_THREADS, …), so this
 * harness drops every inherited LLAMA_* variable; pass the ones you want in `env`.
 *
 * Embeddings: the llama architecture has no pooling by default, so `--embeddings` alone makes
 * POST /v1/embeddings answer 400 "Pooling type 'none' is not OAI compatible. Please use a different
 * pooling type"; add `--pooling mean` (or last/cls). Chat still works on an --embeddings server.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { accessSync, constants as fsConstants, existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { repoRoot } from './paths.js';
import { GiveUp, until } from './wait.js';

export const NODE_LLAMA_CPP_VERSION = process.env['NODE_LLAMA_CPP_VERSION'] ?? '3.21.1';

/** Patterns in llama-server's output by which a failed start can be classified (see above). */
export const LLAMA_SERVER_FAILURES = {
  unknownArchitecture: /unknown model architecture: '([^']*)'/,
  modelFileMissing: /failed to open GGUF file '([^']*)' \(([^)]*)\)/,
  modelLoadFailed: /failed to load model/,
  portInUse: /couldn't bind HTTP server socket, hostname: (\S+), port: (\d+)/,
  outOfMemory: /insufficient memory \(attempted to allocate ([\d.]+ MB)\)|failed to allocate buffer for kv cache|std::bad_alloc/,
  contextFailed: /failed to create_context with model/,
  modelLoadingExit: /exiting due to model loading error/,
  httpServerExit: /exiting due to HTTP server error/,
} as const;

function cacheRoot(): string {
  return process.env['LLMGW_CACHE_DIR'] ?? join(homedir(), '.cache', 'llmgw');
}

/** Where the cached build of this version lives (whether or not it exists yet). */
export function llamaServerCacheDir(): string {
  return join(cacheRoot(), 'llama-server', `node-llama-cpp-${NODE_LLAMA_CPP_VERSION}`);
}

function isComplete(dir: string): boolean {
  try {
    accessSync(join(dir, 'llama-server'), fsConstants.X_OK);
    accessSync(join(dir, 'rpc-server'), fsConstants.X_OK); // a cache from before RPC (#40) is rebuilt
    return existsSync(join(dir, '.complete'));
  } catch {
    return false;
  }
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

let dirPromise: Promise<string> | undefined;

/**
 * The directory holding the cached `llama-server` (with its shared libraries beside it). Runs
 * scripts/build-llama-server.sh when the cache is missing, streaming its progress to stderr. Only one
 * build runs at a time across processes (a lock directory beside the cache; test files run in
 * parallel processes). Call it from a `before()` with a long timeout (a cold build takes ~10-15 min).
 */
export function llamaServerDir(): Promise<string> {
  dirPromise ??= findOrBuild().catch((e: unknown) => {
    dirPromise = undefined;
    throw e;
  });
  return dirPromise;
}

async function findOrBuild(): Promise<string> {
  const dir = llamaServerCacheDir();
  if (isComplete(dir)) return dir;
  const lock = join(cacheRoot(), 'llama-server', `.build-${NODE_LLAMA_CPP_VERSION}.lock`);
  mkdirSync(join(cacheRoot(), 'llama-server'), { recursive: true });
  let said = false;
  for (;;) {
    if (isComplete(dir)) return dir;
    try {
      mkdirSync(lock);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
      let owner = NaN;
      try {
        owner = Number(readFileSync(join(lock, 'pid'), 'utf8'));
      } catch {
        /* being created */
      }
      let ageMs = 0;
      try {
        ageMs = Date.now() - statSync(lock).mtimeMs;
      } catch {
        continue; // just released
      }
      const dead = Number.isInteger(owner) && owner > 0 ? !pidAlive(owner) : ageMs > 30_000; // no pid file: crashed early
      if (dead) {
        rmSync(lock, { recursive: true, force: true }); // stale
        continue;
      }
      if (!said) {
        process.stderr.write(`[llama-server harness] waiting for another build of llama-server (lock ${lock})\n`);
        said = true;
      }
      // a build takes minutes: look every 2 s until it is done, or its lock released or left by a dead owner
      const ownerDead = (): boolean => Number.isInteger(owner) && owner > 0 && !pidAlive(owner);
      await until('the other build of llama-server to finish', 24 * 3600_000, () => isComplete(dir) || !existsSync(lock) || ownerDead(), { everyMs: 2000 });
      continue;
    }
    try {
      writeFileSync(join(lock, 'pid'), String(process.pid));
      if (isComplete(dir)) return dir;
      return await runBuildScript();
    } finally {
      rmSync(lock, { recursive: true, force: true });
    }
  }
}

function runBuildScript(): Promise<string> {
  const script = join(repoRoot, 'scripts', 'build-llama-server.sh');
  process.stderr.write(`[llama-server harness] llama-server not cached; running ${script}\n`);
  return new Promise((resolve, reject) => {
    const child = spawn('bash', [script], {
      cwd: repoRoot,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, NODE_LLAMA_CPP_VERSION },
    });
    let out = '';
    let errTail = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => {
      process.stderr.write(d);
      errTail = (errTail + d).slice(-4000);
    });
    child.on('error', reject);
    child.on('close', (code, signal) => {
      const dir = out.trim().split('\n').pop()?.trim() ?? '';
      if (code === 0 && dir && isComplete(dir)) resolve(dir);
      else reject(new Error(`build-llama-server.sh failed (code ${code}, signal ${signal}):\n${errTail}`));
    });
  });
}

/** Re-exported for bench/router.bench.ts; tests import it from ports.js. */
export { freePort } from './ports.js';

export interface StartLlamaServerOptions {
  /** Path of the GGUF model (passed as `-m`). */
  model: string;
  /** Port to listen on (127.0.0.1). Default 0: llama-server binds a free port chosen by the OS and prints it. */
  port?: number;
  /** Extra llama-server arguments, after the defaults (a later flag overrides an earlier one). */
  args?: string[];
  /** Extra environment. Inherited LLAMA_* variables are dropped; set them here (e.g. LLAMA_API_KEY). */
  env?: Record<string, string>;
  /** Add the small-and-quiet test defaults (TEST_ARGS). Default true. */
  testDefaults?: boolean;
  /** How long to wait for /health = 200. Default 60 s. */
  timeoutMs?: number;
  /** llama-server directory. Default: `await llamaServerDir()`. */
  dir?: string;
  /** Run through a wrapper: spawns `wrap[0] ...wrap[1..] LLAMA_SERVER ARGS…`, e.g.
   * `['bash', '-c', 'ulimit -v 1500000 && exec "$@"', 'llama-server']`. */
  wrap?: string[];
}

/** Defaults fit for a 2-core shared machine and a tiny model. */
export const TEST_ARGS: readonly string[] = ['--threads', '2', '--threads-batch', '2', '--ctx-size', '256', '--parallel', '1', '--no-ui'];

export interface LlamaServer {
  /** http://127.0.0.1:PORT */
  url: string;
  port: number;
  proc: ChildProcess;
  /** stdout + stderr so far (the last 1 MB). */
  log(): string;
  /** Resolves when the process has exited. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** SIGTERM, then SIGKILL after `graceMs` (default 5 s); resolves once the process is gone. */
  stop(graceMs?: number): Promise<void>;
}

/** Error from a start that did not get healthy; `log` is everything the process printed. */
export class LlamaServerStartError extends Error {
  constructor(
    message: string,
    readonly log: string,
    readonly code: number | null,
    readonly signal: NodeJS.Signals | null,
  ) {
    super(message);
    this.name = 'LlamaServerStartError';
  }
}

const live = new Set<ChildProcess>();
let exitHookInstalled = false;
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // last resort: never leave a llama-server behind when the test process ends
  process.on('exit', () => {
    for (const p of live) {
      try {
        p.kill('SIGKILL');
      } catch {
        /* gone */
      }
    }
  });
}

const LOG_LIMIT = 1 << 20;

function tail(s: string, lines = 40): string {
  return s.split('\n').slice(-lines).join('\n');
}

/**
 * Spawns `llama-server -m MODEL --host 127.0.0.1 --port P [TEST_ARGS] [args]` and resolves once the
 * server says `listening on http://127.0.0.1:P` and GET /health returns 200. Without `opts.port` it
 * passes `--port 0`: llama-server binds a port chosen by the OS (no race with other tests) and prints
 * it. Rejects with a LlamaServerStartError (message includes the log tail) if the process exits first
 * or `timeoutMs` passes (the process is then killed).
 */
export async function startLlamaServer(opts: StartLlamaServerOptions): Promise<LlamaServer> {
  const dir = opts.dir ?? (await llamaServerDir());
  return startOnce(dir, opts.port ?? 0, opts);
}

async function startOnce(dir: string, port: number, opts: StartLlamaServerOptions): Promise<LlamaServer> {
  installExitHook();
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('LLAMA_')) env[k] = v;
  Object.assign(env, opts.env ?? {});
  const args = [
    '-m', opts.model,
    '--host', '127.0.0.1',
    '--port', String(port),
    ...(opts.testDefaults === false ? [] : TEST_ARGS),
    ...(opts.args ?? []),
  ];
  const bin = join(dir, 'llama-server');
  const [cmd, ...cmdArgs] = opts.wrap?.length ? [...opts.wrap, bin, ...args] : [bin, ...args];
  const proc = spawn(cmd!, cmdArgs, { stdio: ['ignore', 'pipe', 'pipe'], env });
  live.add(proc);
  let logText = '';
  const append = (d: string): void => {
    logText += d;
    if (logText.length > LOG_LIMIT) logText = logText.slice(-LOG_LIMIT);
  };
  proc.stdout!.setEncoding('utf8').on('data', append);
  proc.stderr!.setEncoding('utf8').on('data', append);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    proc.on('error', (err) => {
      append(`\n[harness] spawn error: ${err.message}\n`);
      live.delete(proc);
      resolve({ code: null, signal: null });
    });
    proc.on('close', (code, signal) => {
      live.delete(proc);
      resolve({ code, signal });
    });
  });
  let exitInfo: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  void exited.then((x) => (exitInfo = x));

  const stop = async (graceMs = 5000): Promise<void> => {
    if (exitInfo) return;
    proc.kill('SIGTERM');
    const t = setTimeout(() => proc.kill('SIGKILL'), graceMs);
    await exited;
    clearTimeout(t);
  };

  const timeoutMs = opts.timeoutMs ?? 60_000;
  // "listening on" is printed once the model is loaded; it also tells the port when we asked for 0
  const listening = /listening on http:\/\/127\.0\.0\.1:(\d+)/;
  let url = '';
  const deadline = Date.now() + timeoutMs;
  try {
    url = await until('llama-server healthy', timeoutMs, async () => {
      if (exitInfo) throw new GiveUp('exited');
      // until probes once more after its pause; a server healthy only past the deadline is a timeout
      if (Date.now() > deadline) throw new GiveUp('timed out');
      const m = listening.exec(logText);
      if (!m) return false;
      const u = `http://127.0.0.1:${m[1]}`;
      const res = await fetch(`${u}/health`, { signal: AbortSignal.timeout(2000) }); // throws: not listening yet
      await res.arrayBuffer();
      return res.status === 200 && !exitInfo && u;
    }, { everyMs: 50 });
  } catch {
    if (exitInfo) {
      const log = logText;
      const cut = /exiting due to/.test(log) ? '' : ' (output may be cut short: llama-server does not drain its log thread at exit)';
      throw new LlamaServerStartError(
        `llama-server exited before it was healthy (code ${exitInfo.code}, signal ${exitInfo.signal})${cut}:\n${tail(log)}`,
        log,
        exitInfo.code,
        exitInfo.signal,
      );
    }
    await stop(1000);
    const log = logText;
    throw new LlamaServerStartError(`llama-server not healthy within ${timeoutMs} ms:\n${tail(log)}`, log, null, null);
  }
  return { url, port: Number(new URL(url).port), proc, log: () => logText, exited, stop };
}
