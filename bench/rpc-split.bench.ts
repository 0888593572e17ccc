/**
 * The price of a split (#40): the same tiny GGUF served solo and by a head llama-server with one
 * rpc-server worker on loopback (`llama-server --rpc 127.0.0.1:P`), real engine built with GGML_RPC:
 *
 * - solo: llama-server alone, every layer on its CPU;
 * - rpc all: the head with -ngl all (llama.cpp's default with --rpc): every layer on the worker, the
 *   head keeps the embeddings and the sampling;
 * - rpc half: the head with -ngl = half the layers: half on the worker, half on the head's CPU (a
 *   split whose weights sit on both hosts, what a group of two placed by memory does).
 * - rpc all over ssh: as rpc all, the head reaching the worker through an OpenSSH local forward
 *   (`ssh -N -L`, to a real sshd on loopback: the harness's): what tunnelling RPC over SSH between
 *   the nodes would cost (encryption and one more hop per message).
 *
 * Each round sends one streamed chat completion to each (interleaved, in a fresh order each round, a
 * fresh prompt per round: no prompt cache), max_tokens generated (ignore_eos). TTFT: request → first
 * content chunk; decode tokens/s: the chunks after the first over the time after the first. Medians,
 * printed as ratios against solo. Every process gets the same threads; on loopback the link is
 * nearly free, so what a real network adds (latency per token: one round trip per layer boundary per
 * token) comes on top. `npm run bench:rpc-split [-- rounds]` (default 7).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { connect } from 'node:net';
import { join } from 'node:path';
import { writeTinyModel } from '../test/fixtures/gguf.js';
import { llamaServerDir, startLlamaServer, type LlamaServer } from '../test/harness/llama-server.js';
import { freePort } from '../test/harness/ports.js';
import { startSshd, type SshdInstance } from '../test/harness/sshd.js';
import { until } from '../test/harness/wait.js';

const ROUNDS = Number(process.argv[2] ?? 9);
const MAX_TOKENS = 48;
const THREADS = process.env['BENCH_THREADS'] ?? '1';
const LAYERS = 8;
const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

const accepts = (port: number): Promise<boolean> => new Promise<boolean>((resolve) => {
  const s = connect(port, '127.0.0.1', () => { s.destroy(); resolve(true); });
  s.on('error', () => resolve(false));
});

async function worker(dir: string): Promise<{ endpoint: string; port: number; proc: ChildProcess }> {
  const port = await freePort();
  const proc = spawn(join(dir, 'rpc-server'), ['--host', '127.0.0.1', '--port', String(port), '--threads', THREADS], { stdio: 'ignore' });
  await until(`rpc-server on ${port}`, 30_000, () => accepts(port));
  return { endpoint: `127.0.0.1:${port}`, port, proc };
}

/** An OpenSSH local forward 127.0.0.1:L → (through the sshd) 127.0.0.1:port. */
async function tunnel(sshd: SshdInstance, port: number): Promise<{ endpoint: string; proc: ChildProcess }> {
  const local = await freePort();
  const proc = spawn('ssh', ['-N', '-o', 'StrictHostKeyChecking=no', '-o', 'UserKnownHostsFile=/dev/null', '-o', 'LogLevel=ERROR', '-o', 'ExitOnForwardFailure=yes',
    '-i', join(sshd.secretsDir, sshd.identityName), '-p', String(sshd.port), '-L', `127.0.0.1:${local}:127.0.0.1:${port}`, `${sshd.user}@127.0.0.1`], { stdio: 'ignore' });
  await until(`ssh -L ${local}`, 30_000, () => accepts(local));
  return { endpoint: `127.0.0.1:${local}`, proc };
}

/** One streamed completion: TTFT (ms) and decode tokens/s (content chunks after the first). */
async function once(url: string, prompt: string): Promise<{ ttftMs: number; tps: number }> {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: prompt }], max_tokens: MAX_TOKENS, stream: true, ignore_eos: true, cache_prompt: false, temperature: 0 }),
  });
  if (res.status !== 200 || !res.body) throw new Error(`${url}: HTTP ${res.status}`);
  let first = 0;
  let last = 0;
  let chunks = 0;
  let buf = '';
  const dec = new TextDecoder();
  for await (const part of res.body) {
    buf += dec.decode(part as Uint8Array, { stream: true });
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
      const delta = (JSON.parse(line.slice(6)) as { choices?: { delta?: { content?: string } }[] }).choices?.[0]?.delta?.content;
      if (!delta) continue;
      const now = performance.now();
      if (chunks === 0) first = now;
      last = now;
      chunks++;
    }
  }
  if (chunks < 2) throw new Error(`${url}: ${chunks} content chunks`);
  return { ttftMs: first - t0, tps: (chunks - 1) / ((last - first) / 1000) };
}

async function main(): Promise<void> {
  const dir = await llamaServerDir();
  const work = await mkdtemp(join(tmpdir(), 'llmgw-bench-rpc-'));
  const model = await writeTinyModel(join(work, 'bench.gguf'), { embeddingLength: 384, layers: LAYERS, seed: 40 });
  const base = ['--threads', THREADS, '--threads-batch', THREADS, '--ctx-size', '1024'];
  const workers: ChildProcess[] = [];
  const heads: LlamaServer[] = [];
  const sshd = await startSshd();
  try {
    const wAll = await worker(dir);
    const wHalf = await worker(dir);
    const wSsh = await worker(dir);
    const t = await tunnel(sshd, wSsh.port);
    workers.push(wAll.proc, wHalf.proc, wSsh.proc, t.proc);
    const arms: [string, LlamaServer][] = [
      ['solo', await startLlamaServer({ model: model.path, args: base, dir })],
      ['rpc all', await startLlamaServer({ model: model.path, args: [...base, '--rpc', wAll.endpoint, '-ngl', 'all'], dir })],
      ['rpc half', await startLlamaServer({ model: model.path, args: [...base, '--rpc', wHalf.endpoint, '-ngl', String(LAYERS / 2)], dir })],
      ['rpc ssh', await startLlamaServer({ model: model.path, args: [...base, '--rpc', t.endpoint, '-ngl', 'all'], dir })],
    ];
    heads.push(...arms.map(([, s]) => s));
    const words = ['fleet', 'node', 'model', 'token', 'replica', 'git', 'server', 'ready', 'llama', 'world'];
    const results = new Map<string, { ttftMs: number; tps: number }[]>(arms.map(([n]) => [n, []]));
    for (const [, s] of arms) await once(s.url, 'warm up'); // first request pays one-off costs
    for (let r = 0; r < ROUNDS; r++) {
      const prompt = Array.from({ length: 60 }, (_, i) => words[(i * 7 + r * 3) % words.length]).join(' ') + ` round ${r}`;
      const order = r % 2 === 0 ? arms : [...arms].reverse();
      for (const [name, s] of order) results.get(name)!.push(await once(s.url, prompt));
    }
    const solo = results.get('solo')!;
    const soloTtft = median(solo.map((x) => x.ttftMs));
    const soloTps = median(solo.map((x) => x.tps));
    process.stdout.write(`model: ${(model.bytes / 2 ** 20).toFixed(1)} MiB (384 x ${LAYERS} layers, f32); ${ROUNDS} interleaved rounds, ${MAX_TOKENS} tokens each, threads ${THREADS} per process\n`);
    process.stdout.write('arm        TTFT ms   tokens/s   TTFT vs solo   tokens/s vs solo\n');
    for (const [name] of arms) {
      const xs = results.get(name)!;
      const ttft = median(xs.map((x) => x.ttftMs));
      const tps = median(xs.map((x) => x.tps));
      process.stdout.write(`${name.padEnd(10)} ${ttft.toFixed(1).padStart(7)}   ${tps.toFixed(1).padStart(8)}   ${(ttft / soloTtft).toFixed(2).padStart(12)}x   ${(tps / soloTps).toFixed(2).padStart(15)}x\n`);
    }
  } finally {
    for (const h of heads) await h.stop();
    for (const w of workers) w.kill('SIGKILL');
    await sshd.stop();
    await rm(work, { recursive: true, force: true });
  }
}

await main();
