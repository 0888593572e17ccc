/** Where a CLI command reads the fleet from: a directory's files, or a git revision's objects. */
import { resolve } from 'node:path';
import { FleetRepo } from '../git/repo.js';
import { dirFiles } from '../fleet-spec/dir-files.js';
import type { FleetFiles } from '../fleet-spec/files.js';
import { prefixFor } from './problems-format.js';

export interface FleetInput {
  readonly files: FleetFiles;
  readonly revision: string | null;
  readonly label: string;
  /** Path of the fleet repo relative to the cwd, to print file names a shell can open. */
  readonly prefix: string;
}

export async function fleetInput(dir: string, rev: string | undefined, cwd: string): Promise<FleetInput> {
  const abs = resolve(cwd, dir);
  const prefix = prefixFor(abs, cwd);
  const label = prefix || '.';
  if (rev === undefined) return { files: dirFiles(abs), revision: null, label, prefix };
  const repo = new FleetRepo({ path: abs });
  const oid = await repo.resolve(rev);
  return { files: repo.files(oid), revision: oid, label, prefix };
}

/** The fleet repo at DIR for commands that compare revisions. */
export function localRepo(dir: string, cwd: string): { repo: FleetRepo; prefix: string; label: string } {
  const abs = resolve(cwd, dir);
  const prefix = prefixFor(abs, cwd);
  return { repo: new FleetRepo({ path: abs }), prefix, label: prefix || '.' };
}
