/** Where a CLI command reads the fleet from: a directory's files, or a git revision's objects. */
import { resolve } from 'node:path';
import type { FleetRepo } from '../git/repo.js';
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
  // isomorphic-git is imported only for a revision: loading it is a third of `validate DIR`'s wall time
  const { FleetRepo } = await import('../git/repo.js');
  const repo = new FleetRepo({ path: abs });
  const oid = await repo.resolve(rev);
  return { files: repo.files(oid), revision: oid, label, prefix };
}

/** The fleet repo at DIR for commands that compare revisions. */
export async function localRepo(dir: string, cwd: string): Promise<{ repo: FleetRepo; prefix: string; label: string }> {
  const { FleetRepo } = await import('../git/repo.js');
  const abs = resolve(cwd, dir);
  const prefix = prefixFor(abs, cwd);
  return { repo: new FleetRepo({ path: abs }), prefix, label: prefix || '.' };
}
