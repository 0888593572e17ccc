/**
 * A long status-branch history made fast: `git fast-import` of first-parent commits with an empty
 * tree (a year of status churn is 10^5–10^6 commits; their trees do not matter to the fence).
 */
import { spawn } from 'node:child_process';
import { git } from './git.js';

/**
 * Commits `n` first-parent commits onto a new branch `ref` (refs/heads/…) of the repo at `gitdir`,
 * oldest first, commit i with `message(i)`; returns the tip and how long the import took.
 */
export async function importStatusHistory(gitdir: string, ref: string, n: number, message: (i: number) => string): Promise<{ tip: string; ms: number }> {
  const started = performance.now();
  const child = spawn('git', ['--git-dir', gitdir, 'fast-import', '--quiet', '--done'], { stdio: ['pipe', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', resolve);
  });
  const t0 = 1_700_000_000;
  let chunk = '';
  const flush = async (): Promise<void> => {
    if (!child.stdin.write(chunk)) await new Promise<void>((r) => child.stdin.once('drain', () => r()));
    chunk = '';
  };
  for (let i = 0; i < n; i++) {
    const body = Buffer.from(message(i), 'utf8');
    chunk += `commit ${ref}\ncommitter llmgw <llmgw@localhost> ${t0 + i} +0000\ndata ${body.length}\n${body.toString('utf8')}\n`;
    if (chunk.length > 1 << 20) await flush();
  }
  chunk += 'done\n';
  await flush();
  child.stdin.end();
  const code = await exited;
  if (code !== 0) throw new Error(`git fast-import exited ${code}: ${stderr}`);
  return { tip: await git(gitdir, ['rev-parse', ref]), ms: Math.round(performance.now() - started) };
}
