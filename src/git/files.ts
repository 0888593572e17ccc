/**
 * FleetFiles over git objects at one commit: reads trees and blobs from a gitdir, never a
 * working tree. Sizes come from object headers, so a huge blob is refused without reading it.
 */
import * as fs from 'node:fs';
import { posix } from 'node:path';
import git, { type TreeEntry } from 'isomorphic-git';
import { LlmgwError } from '../errors/catalogue.js';
import type { FleetEntry, FleetEntryKind, FleetFiles } from '../fleet-spec/files.js';
import { ObjectSizer } from './objects.js';

export interface GitFilesOptions {
  readonly gitdir: string;
  /** A commit (or tree) oid. */
  readonly oid: string;
  /** Label for messages; defaults to the first 12 characters of the oid. */
  readonly label?: string;
  /** isomorphic-git object cache shared across calls (optional). */
  readonly cache?: object;
  readonly sizer?: ObjectSizer;
}

function kindOf(mode: string): FleetEntryKind {
  switch (mode) {
    case '100644':
    case '100755':
    case '100664':
      return 'file';
    case '120000':
      return 'symlink';
    case '040000':
    case '40000':
      return 'dir';
    default:
      return 'other'; // 160000: submodule (a commit), anything unexpected
  }
}

/** Split a repo-relative path; null when it is absolute, empty or has "." / ".." segments. */
function segments(path: string): string[] | null {
  if (path === '' || path.startsWith('/')) return null;
  const parts = path.split('/');
  if (parts.some((p) => p === '' || p === '.' || p === '..')) return null;
  return parts;
}

export function gitFiles(opts: GitFilesOptions): FleetFiles {
  const { gitdir, oid } = opts;
  const cache = opts.cache ?? {};
  const sizer = opts.sizer ?? new ObjectSizer(gitdir);
  const label = opts.label ?? oid.slice(0, 12);

  // Trees are read once and indexed by name: a fleet of 1,000 models reads models/ once, not per file.
  const trees = new Map<string, Promise<Map<string, TreeEntry>>>();
  const treeAt = (treeish: string): Promise<Map<string, TreeEntry>> => {
    let t = trees.get(treeish);
    if (!t) {
      t = git.readTree({ fs, gitdir, oid: treeish, cache }).then((r) => new Map(r.tree.map((e) => [e.path, e])));
      trees.set(treeish, t);
    }
    return t;
  };
  const readTreeAt = async (treeish: string): Promise<TreeEntry[]> => [...(await treeAt(treeish)).values()];
  const sizes = new Map<string, Promise<number>>();

  const sizeOf = (blob: string): Promise<number> => {
    let p = sizes.get(blob);
    if (!p) {
      p = (async () => {
        const s = await sizer.size(blob).catch(() => null);
        if (s !== null) return s;
        return (await git.readBlob({ fs, gitdir, oid: blob, cache })).blob.byteLength;
      })();
      sizes.set(blob, p);
    }
    return p;
  };

  const entry = async (path: string, e: TreeEntry): Promise<FleetEntry> => {
    const kind = kindOf(e.mode);
    const size = kind === 'file' || kind === 'symlink' ? await sizeOf(e.oid) : 0;
    return { path, kind, size };
  };

  /** The tree entry at a path, or null. Does not follow links on the way. */
  const lookup = async (parts: readonly string[]): Promise<TreeEntry | null> => {
    let treeish = oid;
    let found: TreeEntry | null = null;
    for (const part of parts) {
      if (found) {
        if (kindOf(found.mode) !== 'dir') return null;
        treeish = found.oid;
      }
      found = (await treeAt(treeish)).get(part) ?? null;
      if (!found) return null;
    }
    return found;
  };

  const notFound = (path: string, why: string): LlmgwError =>
    new LlmgwError('GIT_PATH_NOT_FOUND', `${path} at ${label}: ${why}`, { path, revision: label });

  const readBlobChecked = async (path: string, blob: string, maxBytes: number): Promise<Uint8Array> => {
    const size = await sizeOf(blob);
    if (size > maxBytes) {
      throw new LlmgwError('SPEC_FILE_TOO_LARGE', `${path} at ${label} is ${size} bytes; the limit is ${maxBytes}`, { path, size, maxBytes });
    }
    return (await git.readBlob({ fs, gitdir, oid: blob, cache })).blob;
  };

  return {
    label,

    async list(): Promise<readonly FleetEntry[]> {
      const out: FleetEntry[] = [];
      for (const e of await readTreeAt(oid)) {
        out.push(await entry(e.path, e));
        if (kindOf(e.mode) === 'dir') {
          const children = await readTreeAt(e.oid);
          out.push(...(await Promise.all(children.map((c) => entry(`${e.path}/${c.path}`, c)))));
        }
      }
      return out;
    },

    async read(path: string, maxBytes: number): Promise<Uint8Array> {
      const parts = segments(path);
      if (!parts) throw notFound(path, 'not a repo-relative path');
      const e = await lookup(parts);
      if (!e) throw notFound(path, 'no such file');
      const kind = kindOf(e.mode);
      if (kind === 'file') return readBlobChecked(path, e.oid, maxBytes);
      if (kind !== 'symlink') {
        throw new LlmgwError('SPEC_UNEXPECTED_FILE', `${path} at ${label} is a ${kind === 'dir' ? 'folder' : 'submodule or special entry'}, not a file`, { path });
      }

      const target = Buffer.from((await git.readBlob({ fs, gitdir, oid: e.oid, cache })).blob).toString('utf8');
      const escapes = (): LlmgwError =>
        new LlmgwError('SPEC_SYMLINK_ESCAPES', `${path} at ${label} is a symlink to ${JSON.stringify(target)}, which is outside the fleet repo`, { path, target });
      if (target.startsWith('/') || target.includes('\0')) throw escapes();
      const resolved = posix.normalize(posix.join(posix.dirname(path), target));
      if (resolved === '..' || resolved.startsWith('../') || resolved === '.' || resolved === '') throw escapes();
      const targetParts = segments(resolved.replace(/\/+$/, ''));
      if (!targetParts) throw escapes();
      const t = await lookup(targetParts);
      // Same codes as dirFiles: the loader reports these as problems of the revision.
      if (!t) throw new LlmgwError('SPEC_SYMLINK_ESCAPES', `${path} at ${label} is a broken symlink (${resolved} does not exist)`, { path, target });
      const tkind = kindOf(t.mode);
      if (tkind === 'symlink') {
        throw new LlmgwError('SPEC_SYMLINK_ESCAPES', `${path} at ${label} links to ${resolved}, another symlink; links to links are refused`, { path, target });
      }
      if (tkind !== 'file') throw new LlmgwError('SPEC_UNEXPECTED_FILE', `${path} at ${label} links to ${resolved}, which is not a regular file`, { path, target });
      return readBlobChecked(path, t.oid, maxBytes);
    },
  };
}
