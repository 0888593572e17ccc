/**
 * The controller's local state file: failure counts, parking and handled retries survive a
 * restart. Written atomically (temp file + fsync + rename), only when the content changed.
 */
import { mkdir, open, readFile, rename } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { ModelHealth } from './health.js';

export interface ControllerState {
  readonly version: 1;
  readonly appliedRevision: string | null;
  readonly models: Readonly<Record<string, ModelHealth>>;
  /** Retry ids handled (commit:model, admin:…), most recent last; bounded. */
  readonly handledRetries: readonly string[];
}

export const MAX_HANDLED_RETRIES = 2000;

export const emptyState: ControllerState = Object.freeze({ version: 1, appliedRevision: null, models: {}, handledRetries: [] });

export async function loadState(path: string): Promise<ControllerState> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return emptyState;
    throw e;
  }
  const s = JSON.parse(text) as Partial<ControllerState>;
  if (s.version !== 1 || typeof s.models !== 'object' || !Array.isArray(s.handledRetries)) {
    throw new Error(`${path} is not an llmgw state file (version 1)`);
  }
  return { version: 1, appliedRevision: s.appliedRevision ?? null, models: s.models ?? {}, handledRetries: s.handledRetries };
}

export class StateStore {
  private last: string | null = null;
  constructor(readonly path: string) {}

  /** Writes when the content differs from the last write; returns whether it wrote. */
  async save(state: ControllerState): Promise<boolean> {
    const text = `${JSON.stringify(state, null, 2)}\n`;
    if (text === this.last) return false;
    await mkdir(dirname(this.path), { recursive: true });
    const tmp = `${this.path}.tmp.${process.pid}`;
    const fh = await open(tmp, 'w', 0o600);
    try {
      await fh.writeFile(text);
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(tmp, this.path);
    this.last = text;
    return true;
  }
}
