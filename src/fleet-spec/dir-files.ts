/**
 * FleetFiles over a plain directory (`llmgw validate DIR`, `plan` without a revision); symlinks may
 * not leave the directory. Files are read with synchronous calls: these are one-shot commands, and
 * 1,000 files read through the thread pool (lstat, open, fstat, read, close each) took 100–300 ms
 * of `validate`'s wall time, against ~20 ms this way. The controller never reads a directory.
 */
import { closeSync, constants, fstatSync, lstatSync, openSync, readFileSync, realpathSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { join, sep } from 'node:path';
import { LlmgwError } from '../errors/catalogue.js';
import type { FleetEntry, FleetEntryKind, FleetFiles } from './files.js';

const DESCEND = new Set(['nodes', 'engines', 'profiles', 'models', 'access', 'checks']);

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
      if (lstatSync(full).isSymbolicLink()) {
        realRoot ??= realpathSync(root);
        try {
          full = realpathSync(full);
        } catch {
          throw new LlmgwError('SPEC_SYMLINK_ESCAPES', 'broken symlink');
        }
        if (full !== realRoot && !full.startsWith(realRoot + sep)) {
          throw new LlmgwError('SPEC_SYMLINK_ESCAPES', 'symlink points outside the fleet repo');
        }
      }
      // non-blocking: a FIFO (through a symlink) opens at once and is refused below, instead of waiting for a writer
      const fd = openSync(full, constants.O_RDONLY | constants.O_NONBLOCK);
      try {
        const st = fstatSync(fd);
        if (!st.isFile()) throw new LlmgwError('SPEC_UNEXPECTED_FILE', 'not a regular file');
        if (st.size > maxBytes) throw new LlmgwError('SPEC_FILE_TOO_LARGE', `file is ${st.size} bytes; the limit is ${maxBytes}`, { size: st.size });
        return readFileSync(fd);
      } finally {
        closeSync(fd);
      }
    },
  };
}
