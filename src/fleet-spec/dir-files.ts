/** FleetFiles over a plain directory (`llmgw validate DIR`); symlinks may not leave the directory. */
import { lstat, readdir, realpath, open } from 'node:fs/promises';
import { join, sep } from 'node:path';
import { LlmgwError } from '../errors/catalogue.js';
import type { FleetEntry, FleetEntryKind, FleetFiles } from './files.js';

const DESCEND = new Set(['nodes', 'engines', 'profiles', 'models', 'access']);

function kindOf(st: { isFile(): boolean; isDirectory(): boolean; isSymbolicLink(): boolean }): FleetEntryKind {
  return st.isSymbolicLink() ? 'symlink' : st.isFile() ? 'file' : st.isDirectory() ? 'dir' : 'other';
}

export function dirFiles(root: string): FleetFiles {
  let realRoot: string | undefined;
  return {
    label: root,
    async list(): Promise<FleetEntry[]> {
      // Sizes are not needed here: read() checks the size of what it opens.
      const out: FleetEntry[] = [];
      for (const d of await readdir(root, { withFileTypes: true })) {
        if (d.name === '.git') continue;
        out.push({ path: d.name, kind: kindOf(d), size: 0 });
        if (d.isDirectory() && DESCEND.has(d.name)) {
          for (const c of await readdir(join(root, d.name), { withFileTypes: true })) {
            out.push({ path: `${d.name}/${c.name}`, kind: kindOf(c), size: 0 });
          }
        }
      }
      return out;
    },
    async read(path: string, maxBytes: number): Promise<Uint8Array> {
      let full = join(root, ...path.split('/'));
      if ((await lstat(full)).isSymbolicLink()) {
        realRoot ??= await realpath(root);
        try {
          full = await realpath(full);
        } catch {
          throw new LlmgwError('SPEC_SYMLINK_ESCAPES', 'broken symlink');
        }
        if (full !== realRoot && !full.startsWith(realRoot + sep)) {
          throw new LlmgwError('SPEC_SYMLINK_ESCAPES', 'symlink points outside the fleet repo');
        }
      }
      const fh = await open(full, 'r');
      try {
        const st = await fh.stat();
        if (!st.isFile()) throw new LlmgwError('SPEC_UNEXPECTED_FILE', 'not a regular file');
        if (st.size > maxBytes) throw new LlmgwError('SPEC_FILE_TOO_LARGE', `file is ${st.size} bytes; the limit is ${maxBytes}`, { size: st.size });
        return await fh.readFile();
      } finally {
        await fh.close();
      }
    },
  };
}
