/**
 * The state record on disk: the controller's local state file (state.ts says what it holds).
 * Written atomically (temp file + fsync + rename + fsync of the directory), only when the content
 * changed. A file that is not a state record (corrupt, truncated, hand-edited) is moved aside and
 * named, and the controller starts from an empty record rather than not at all: the router keeps
 * serving, and the problem shows in status and logs. Temp files left by a crash are removed.
 */
import { createHash } from 'node:crypto';
import { mkdir, open, readdir, readFile, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { isLlmgwError, LlmgwError, reasonOf, type ReasonRef } from '../errors/catalogue.js';
import { emptyState, type ControllerState } from './state.js';
import { stateFromJson } from './state-migrate.js';

export interface LoadedState {
  readonly state: ControllerState;
  /** Why the file was not used (it was moved aside), or null. */
  readonly problem: ReasonRef | null;
}

export async function loadState(path: string, now: () => number = Date.now): Promise<LoadedState> {
  await removeStaleTemps(path);
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return { state: emptyState, problem: null };
    throw new LlmgwError('STATE_UNREADABLE', `cannot read the state file ${path}: ${(e as Error).message}`, { path }, { cause: e });
  }
  try {
    return { state: stateFromJson(JSON.parse(text)), problem: null };
  } catch (e) {
    // written by a newer llmgw: never moved aside or written over (this instance does not act)
    if (isLlmgwError(e, 'STATE_VERSION_NEWER')) throw new LlmgwError('STATE_VERSION_NEWER', `the state file ${path}: ${e.message}`, { path, ...e.detail });
    const aside = `${path}.corrupt-${now()}`;
    await rename(path, aside);
    return {
      state: emptyState,
      problem: { code: 'STATE_FILE_CORRUPT', message: `the state file ${path} is not an llmgw state record (${(e as Error).message}); moved aside to ${aside}, starting from an empty record (failure counts and parking are lost)` },
    };
  }
}

async function removeStaleTemps(path: string): Promise<void> {
  const prefix = `${basename(path)}.tmp.`;
  let names: string[];
  try {
    names = await readdir(dirname(path));
  } catch {
    return;
  }
  await Promise.all(names.filter((n) => n.startsWith(prefix)).map((n) => rm(join(dirname(path), n), { force: true })));
}

export class StateStore {
  /** The sha256 of the text last written, not the text (~270 kB at 1,000 models, held for nothing). */
  private last: string | null = null;
  /** The record last written (or found equal to it): the same object again is the same content, not serialized again. */
  private lastState: ControllerState | null = null;
  constructor(readonly path: string) {}

  /** Writes when the content differs from the last write; returns whether it wrote. Throws STATE_WRITE_FAILED. */
  async save(state: ControllerState): Promise<boolean> {
    if (state === this.lastState) return false;
    const text = `${JSON.stringify(state, null, 2)}\n`;
    const digest = createHash('sha256').update(text).digest('hex');
    if (digest === this.last) {
      this.lastState = state;
      return false;
    }
    const dir = dirname(this.path);
    const tmp = `${this.path}.tmp.${process.pid}`;
    try {
      await mkdir(dir, { recursive: true });
      const fh = await open(tmp, 'w', 0o600);
      try {
        await fh.writeFile(text);
        await fh.sync();
      } finally {
        await fh.close();
      }
      await rename(tmp, this.path);
      const d = await open(dir, 'r');
      try {
        await d.sync();
      } finally {
        await d.close();
      }
    } catch (e) {
      await rm(tmp, { force: true }).catch(() => undefined);
      throw new LlmgwError('STATE_WRITE_FAILED', `writing the state file ${this.path} failed: ${reasonOf(e).message}`, { path: this.path }, { cause: e });
    }
    this.last = digest;
    this.lastState = state;
    return true;
  }
}
