/** FleetFiles over a plain directory (`llmgw validate DIR`); symlinks may not leave the directory. */
import { lstat, readdir, realpath, stat, open } from 'node:fs/promises';
import { join, sep } from 'node:path';
import { LlmgwError } from '../errors/catalogue.js';
import type { FleetEntry, FleetEntryKind, FleetFiles } from './files.js';

const DESCEND = new Set(['nodes', 'engines', 'profiles', 'models', 'access']);

function kindOf(st: { isFile(): boolean; isDirectory(): boolean; isSymbolicLink(): boolean }): FleetEntryKind {
  return st.isSymbolicLink() ? 'symlink' : st.isFile() ? 'file' : st.isDirectory() ? 'dir' : 'other';
}

export function dirFiles(root: string): FleetFiles {
  return {
    label: root,
    async list(): Promise<FleetEntry[]> {
      const out: FleetEntry[] = [];
      for (const name of await readdir(root)) {
        if (name === '.git') continue;
        const st = await lstat(join(root, name));
        out.push({ path: name, kind: kindOf(st), size: st.size });
        if (st.isDirectory() && DESCEND.has(name)) {
          for (const child of await readdir(join(root, name))) {
            const cst = await lstat(join(root, name, child));
            out.push({ path: `${name}/${child}`, kind: kindOf(cst), size: cst.size });
          }
        }
      }
      return out;
    },
    async read(path: string, maxBytes: number): Promise<Uint8Array> {
      const full = join(root, ...path.split('/'));
      const realRoot = await realpath(root);
      let real: string;
      try {
        real = await realpath(full);
      } catch {
        throw new LlmgwError('SPEC_SYMLINK_ESCAPES', "broken symlink");
      }
      if (real !== realRoot && !real.startsWith(realRoot + sep)) {
        throw new LlmgwError('SPEC_SYMLINK_ESCAPES', "symlink points outside the fleet repo");
      }
      const st = await stat(real);
      if (!st.isFile()) throw new LlmgwError('SPEC_UNEXPECTED_FILE', "not a regular file");
      if (st.size > maxBytes) throw new LlmgwError('SPEC_FILE_TOO_LARGE', `file is ${st.size} bytes; the limit is ${maxBytes}`, { size: st.size });
      const fh = await open(real, 'r');
      try {
        const buf = Buffer.alloc(st.size);
        const { bytesRead } = await fh.read(buf, 0, st.size, 0);
        return buf.subarray(0, bytesRead);
      } finally {
        await fh.close();
      }
    },
  };
}
