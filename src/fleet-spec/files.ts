/**
 * Where fleet files come from: git objects at a revision (src/git) or a directory (for
 * `llmgw validate DIR`). The loader sees only this interface.
 */
export type FleetEntryKind = 'file' | 'symlink' | 'dir' | 'other';

export interface FleetEntry {
  /** Repo-relative path with "/" separators, e.g. "models/qwen.yaml". */
  readonly path: string;
  readonly kind: FleetEntryKind;
  /** Size in bytes when known without reading (files); symlink target length for links. */
  readonly size: number;
}

export interface FleetFiles {
  /** A label for messages: the revision or directory. */
  readonly label: string;
  /** Every entry at the top level and one level down (fleet.yaml, models/x.yaml, …). */
  list(): Promise<readonly FleetEntry[]>;
  /** Raw bytes of a file. Symlinks are resolved inside the repo; escaping links throw SPEC_SYMLINK_ESCAPES. */
  read(path: string, maxBytes: number): Promise<Uint8Array>;
}
