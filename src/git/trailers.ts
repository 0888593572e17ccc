/**
 * Git trailers, parsed the way `git interpret-trailers --parse` finds them (git's trailer.c):
 * the trailer block is the last paragraph of the message, never the title paragraph; it counts
 * when every line is a trailer (or a continuation line), or when it has a git-generated trailer
 * (Signed-off-by, "(cherry picked from commit") and at least 25% trailer lines. A trailer line
 * is `Key: value` where Key is letters, digits and "-" (whitespace allowed before the ":").
 * Lines starting with "#" are comments. Pure: no I/O.
 */
import { createHash } from 'node:crypto';
import type { CommitInfo } from './commits.js';

export interface Trailer {
  readonly key: string;
  readonly value: string;
}

export const RETRY_TRAILER = 'Llmgw-Retry';
/** The HA leader's fencing epoch on status-branch commits (`llmgw serve --etcd`). */
export const EPOCH_TRAILER = 'Llmgw-Epoch';

const GIT_GENERATED_PREFIXES = ['Signed-off-by: ', '(cherry picked from commit '];

const isBlank = (line: string): boolean => /^\s*$/.test(line);
const isComment = (line: string): boolean => line.startsWith('#');
const startsWithSpace = (line: string): boolean => /^\s/.test(line);

/** Index of the ":" ending a trailer key, or -1 (git's find_separator with separators ":"). */
function separatorPos(line: string): number {
  let whitespaceFound = false;
  for (let i = 0; i < line.length; i++) {
    const c = line[i] as string;
    if (c === ':') return i;
    if (!whitespaceFound && /[A-Za-z0-9-]/.test(c)) continue;
    if (i !== 0 && (c === ' ' || c === '\t')) {
      whitespaceFound = true;
      continue;
    }
    break;
  }
  return -1;
}

const isTrailerLine = (line: string): boolean => separatorPos(line) >= 1 && !startsWithSpace(line);

/** Line index where the trailer block starts, or lines.length when there is none. */
function trailerBlockStart(lines: readonly string[]): number {
  // The first paragraph is the title and cannot hold trailers.
  let endOfTitle = 0;
  while (endOfTitle < lines.length) {
    const l = lines[endOfTitle] as string;
    if (!isComment(l) && isBlank(l)) break;
    endOfTitle++;
  }
  let onlySpaces = true;
  let recognizedPrefix = false;
  let trailerLines = 0;
  let nonTrailerLines = 0;
  let possibleContinuation = 0;
  for (let i = lines.length - 1; i >= endOfTitle; i--) {
    const line = lines[i] as string;
    if (isComment(line)) {
      nonTrailerLines += possibleContinuation;
      possibleContinuation = 0;
      continue;
    }
    if (isBlank(line)) {
      if (onlySpaces) continue;
      nonTrailerLines += possibleContinuation;
      if (recognizedPrefix && trailerLines * 3 >= nonTrailerLines) return i + 1;
      if (trailerLines > 0 && nonTrailerLines === 0) return i + 1;
      return lines.length;
    }
    onlySpaces = false;
    if (GIT_GENERATED_PREFIXES.some((p) => line.startsWith(p))) {
      trailerLines++;
      possibleContinuation = 0;
      recognizedPrefix = true;
      continue;
    }
    if (isTrailerLine(line)) {
      trailerLines++;
      possibleContinuation = 0;
    } else if (startsWithSpace(line)) {
      possibleContinuation++;
    } else {
      nonTrailerLines += 1 + possibleContinuation;
      possibleContinuation = 0;
    }
  }
  return lines.length;
}

/** Every trailer of a commit message, in order. Commit messages have no "---" patch divider, so none is looked for. */
export function parseTrailers(message: string): Trailer[] {
  const lines = message.replace(/\r\n/g, '\n').split('\n');
  const start = trailerBlockStart(lines);
  const out: Array<{ key: string; value: string }> = [];
  for (let i = start; i < lines.length; i++) {
    const line = lines[i] as string;
    if (isComment(line) || isBlank(line)) continue;
    const last = out[out.length - 1];
    if (startsWithSpace(line)) {
      if (last) last.value = `${last.value} ${line.trim()}`.trim();
      continue;
    }
    const sep = separatorPos(line);
    if (sep < 1) continue; // a non-trailer line inside a block with git-generated trailers
    out.push({ key: line.slice(0, sep).trim(), value: line.slice(sep + 1).trim() });
  }
  return out;
}

/** Values of every trailer whose key matches (case-insensitive), in order. */
export function trailerValues(message: string, key: string): string[] {
  const k = key.toLowerCase();
  return parseTrailers(message)
    .filter((t) => t.key.toLowerCase() === k)
    .map((t) => t.value);
}

/**
 * The fencing epoch a commit message carries in its Llmgw-Epoch trailer, or null when it has none.
 * Values that are not a plain decimal integer exact as a number (a safe integer: every epoch the
 * writer accepts reads back) are not epochs and are ignored; of several trailers the highest
 * counts, so no extra trailer can lower it.
 */
export function epochOf(message: string): number | null {
  let best: number | null = null;
  for (const v of trailerValues(message, EPOCH_TRAILER)) {
    if (!/^[0-9]{1,16}$/.test(v)) continue;
    const n = Number(v);
    if (!Number.isSafeInteger(n)) continue;
    if (best === null || n > best) best = n;
  }
  return best;
}

/**
 * The message with `Key: value` added as its last trailer: into the trailer block when the
 * message ends with one, else as a new paragraph after the message (a message that is only a
 * title gets a blank line first, so the trailer is not read as part of the title). Pure.
 */
export function withTrailer(message: string, key: string, value: string): string {
  const body = message.replace(/\r\n/g, '\n').replace(/\s+$/, '');
  const line = `${key}: ${value}`;
  if (body === '') return `\n${line}\n`; // an empty title, then the trailer
  return parseTrailers(body).length > 0 ? `${body}\n${line}\n` : `${body}\n\n${line}\n`;
}

/** Model names named by Llmgw-Retry trailers: several trailers and comma/space-separated lists, deduplicated. */
export function retryModels(message: string): string[] {
  const seen = new Set<string>();
  for (const v of trailerValues(message, RETRY_TRAILER)) {
    for (const m of v.split(/[\s,]+/)) if (m) seen.add(m);
  }
  return [...seen];
}

/**
 * A retry requested by a commit; (content, model) identifies it, so a caller can handle each once.
 * `content` is a digest of the commit's author, author time and message, not its id: a rebase or
 * a force-push that rewrites the history replays the same commit under a new id, and must not
 * unpark the model a second time.
 */
export interface RetryRequest {
  readonly model: string;
  readonly commit: string;
  /** 16 hex digits of sha256(author, author time, message): the same after a rebase. */
  readonly content: string;
  /** "Name <email>" of the commit's author. */
  readonly author: string;
  /** Author time, seconds since the epoch. */
  readonly timestamp: number;
}

export function retryId(r: Pick<RetryRequest, 'content' | 'model'>): string {
  return `${r.content}:${r.model}`;
}

/** What survives a rebase of a commit: its author, author time and message. */
export function commitContent(c: Pick<CommitInfo, 'author' | 'message'>): string {
  return createHash('sha256').update(`${c.author.name} <${c.author.email}>\n${c.author.timestamp}\n${c.message}`).digest('hex').slice(0, 16);
}

/** Retry requests in commits (oldest first, as given). */
export function extractRetries(commits: readonly CommitInfo[]): RetryRequest[] {
  const out: RetryRequest[] = [];
  for (const c of commits) {
    const content = commitContent(c);
    for (const model of retryModels(c.message)) {
      out.push({ model, commit: c.oid, content, author: `${c.author.name} <${c.author.email}>`, timestamp: c.author.timestamp });
    }
  }
  return out;
}
