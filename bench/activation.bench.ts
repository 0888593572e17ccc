/**
 * The cold activation of an on-demand model (#38 item 1), side by side with the engine's own start,
 * over interleaved rounds on one local node (real llama-server on a tiny GGUF, real `llmgw serve`):
 *
 * - bare: exec llama-server with the argv a replica gets (model, ctx, threads, slots, cache), poll
 *   GET /health every 2 ms until 200, then one chat completion of 1 token: exec → answer.
 * - llmgw: one chat completion of 1 token through the router to an on-demand model that has no
 *   replica (a fresh model each round): request → answer; one serve on a local node, one on an
 *   sshd node on loopback (its connection open, as a serve's is between activations).
 *
 * Medians of ROUNDS (default 5), and llmgw's path split by its own log lines (pino `time`, ms) into
 * where the time went: the request to the start, the start (the node's start script), the wait for
 * /health, and ready to the answer. `npm run bench:activation [-- rounds]`.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { chatOnce, makeScaleFleet, serveScaleFleet, waitFor } from '../test/harness/scale-fleet.js';
import { llamaServerDir } from '../test/harness/llama-server.js';
import { freePort } from '../test/harness/ports.js';
import { startSshd } from '../test/harness/sshd.js';

const ROUNDS = Number(process.argv[2] ?? 5);
const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

async function bare(binary: string, model: string): Promise<number> {
  const port = await freePort();
  const t0 = performance.now();
  const child = spawn(binary, ['-m', model, '--host', '127.0.0.1', '--port', String(port), '--alias', 'bare', '-c', '256', '-np', '1', '-t', '1', '--cache-ram', '16'], { stdio: 'ignore' });
  try {
    for (;;) {
      const ok = await fetch(`http://127.0.0.1:${port}/health`).then((r) => r.status === 200, () => false);
      if (ok) break;
      if (child.exitCode !== null) throw new Error(`bare llama-server exited ${child.exitCode}`);
      await new Promise((r) => setTimeout(r, 2)); // deliberate: the bare baseline's own poll, as tight as a client would make it
    }
    const r = await chatOnce(`http://127.0.0.1:${port}`, 'bare');
    if (r.status !== 200) throw new Error(`bare chat ${r.status}`);
    return performance.now() - t0;
  } finally {
    child.kill('SIGKILL');
  }
}

interface LogLine { time: number; msg: string; model?: string; replica?: string }

/** The serve's JSON log lines from `since` (epoch ms) about `model`. */
function linesOf(out: string, model: string, since: number): LogLine[] {
  const lines: LogLine[] = [];
  for (const l of out.split('\n')) {
    if (!l.startsWith('{') || !l.includes(model)) continue;
    try {
      const j = JSON.parse(l) as LogLine;
      if (j.time >= since) lines.push(j);
    } catch {
      /* a partial line */
    }
  }
  return lines;
}

const sshd = await startSshd();
const fleets = { local: await makeScaleFleet(ROUNDS, { hot: false }), ssh: await makeScaleFleet(ROUNDS, { hot: false, ssh: sshd }) };
const serves = { local: await serveScaleFleet(fleets.local), ssh: await serveScaleFleet(fleets.ssh) };
try {
  for (const serve of Object.values(serves)) await waitFor('the serve ready', 60_000, serve, async () => (await fetch(`${serve.adminUrl}/readyz`).catch(() => null))?.status === 200);
  const binary = join(await llamaServerDir(), 'llama-server');
  const tiny = join(fleets.local.root, 'tiny.gguf');
  await bare(binary, tiny); // warm the page cache and the binary once
  const times: Record<'bare' | 'local' | 'ssh', number[]> = { bare: [], local: [], ssh: [] };
  const timelines: string[] = [];
  for (let i = 0; i < ROUNDS; i++) {
    const order = (['bare', 'local', 'ssh'] as const).map((_, k, all) => all[(k + i) % all.length]!);
    for (const which of order) {
      if (which === 'bare') times.bare.push(await bare(binary, tiny));
      else {
        const serve = serves[which];
        const model = fleets[which].onDemand[i]!;
        const since = Date.now();
        const r = await chatOnce(serve.routerUrl, model);
        if (r.status !== 200) throw new Error(`llmgw (${which}) chat to ${model}: ${r.status}\n${serve.out().slice(-3000)}`);
        times[which].push(r.ms);
        await new Promise((res) => setTimeout(res, 300)); // deliberate: the log lines of the answer reach out()
        const tl = linesOf(serve.out(), model, since).map((l) => `+${l.time - since} ms ${l.msg}`);
        timelines.push(`${which} ${model} (${r.ms.toFixed(0)} ms):\n    ${tl.join('\n    ')}`);
      }
    }
  }
  const b = median(times.bare);
  const line = (which: 'local' | 'ssh'): string => `${which} node ${median(times[which]).toFixed(0)} ms: ${(median(times[which]) / b).toFixed(2)} × bare (+${(median(times[which]) - b).toFixed(0)} ms)`;
  console.log(`activation, ${ROUNDS} interleaved rounds (medians): bare llama-server exec → /health → 1-token answer ${b.toFixed(0)} ms; llmgw's cold first answer on a ${line('local')}; on an ${line('ssh')}`);
  for (const [k, v] of Object.entries(times)) console.log(`  ${k}: ${v.map((x) => x.toFixed(0)).join(', ')} ms`);
  console.log(`llmgw's timelines (from the request; the serve's log lines naming the model):\n  ${timelines.join('\n  ')}`);
} finally {
  await Promise.all(Object.values(serves).map((s) => s.stop()));
  for (const f of Object.values(fleets)) f.cleanup();
  await sshd.stop();
}
