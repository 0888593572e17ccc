/**
 * Reading the project's markdown (README.md and docs/) for the tests that keep it true: sections,
 * table rows, links and the anchors GitHub gives headings. Small on purpose: only what our pages
 * use (ATX headings, pipe tables, inline links and images, fenced code).
 */
import { strict as assert } from 'node:assert';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from './paths.js';

/** The documentation pages: README.md and every .md under docs/, as repo-relative paths. */
export function markdownPages(): string[] {
  const walk = (dir: string): string[] =>
    readdirSync(join(repoRoot, dir), { withFileTypes: true }).flatMap((e) =>
      e.isDirectory() ? walk(join(dir, e.name)) : e.name.endsWith('.md') ? [join(dir, e.name)] : [],
    );
  return ['README.md', ...walk('docs').sort()];
}

export const readPage = (page: string): string => readFileSync(join(repoRoot, page), 'utf8');

/** The lines of `md` with fenced code blocks blanked (kept as empty lines, so numbers stay right). */
export function proseLines(md: string): string[] {
  let fence: string | null = null;
  return md.split('\n').map((line) => {
    if (fence === null) {
      const open = /^\s*(`{3,}|~{3,})/.exec(line);
      if (!open) return line;
      fence = open[1]!;
      return '';
    }
    const close = /^\s*(`{3,}|~{3,})\s*$/.exec(line);
    if (close && close[1]![0] === fence[0] && close[1]!.length >= fence.length) fence = null;
    return '';
  });
}

/**
 * The text under a heading (`## Every metric`), code blocks included, up to the next heading of
 * the same or a higher level; `page` names the file in the failure.
 */
export function section(md: string, heading: string, page: string): string {
  const lines = proseLines(md); // headings are found outside code blocks; the text returned keeps them
  const level = /^#+/.exec(heading)![0].length;
  const start = lines.findIndex((l) => l.trim() === heading);
  assert.ok(start >= 0, `${page} has a "${heading}" section`);
  let end = start + 1;
  while (end < lines.length && !(/^#+ /.test(lines[end]!) && /^#+/.exec(lines[end]!)![0].length <= level)) end++;
  return md.split('\n').slice(start + 1, end).join('\n');
}

/** The data rows of the markdown tables in `text`: cells split on unescaped pipes, trimmed. */
export function tableRows(text: string): string[][] {
  const rows: string[][] = [];
  for (const line of text.split('\n')) {
    const l = line.trim();
    if (!l.startsWith('|')) continue;
    const cells = l.slice(1, l.endsWith('|') ? -1 : undefined).split(/(?<!\\)\|/).map((c) => c.trim());
    if (cells.every((c) => /^:?-+:?$/.test(c))) continue; // separator
    rows.push(cells);
  }
  return rows;
}

/** A cell holding one `CODE` (a reason code, a metric or alert name): the name, else null. */
export const codeCell = (cell: string): string | null => /^`([A-Za-z0-9_:]+)`$/.exec(cell)?.[1] ?? null;

/**
 * The anchor GitHub gives a heading (github-slugger): the heading's text without markup,
 * lowercased, every character but letters, digits, `_`, `-` and spaces dropped, spaces → `-`.
 */
export function slug(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // links and images: their text
    .replace(/<[^>]+>/g, '') // inline HTML
    .replace(/[`*]/g, '')
    .replace(/(^|\s)_+|_+(\s|$)/g, '$1$2'); // _emphasis_ (a word's inner _ stays)
  return text.trim().toLowerCase().replace(/[^\p{L}\p{M}\p{N}\p{Pc}\- ]/gu, '').replace(/ /g, '-');
}

/** The anchors a page has: its headings' slugs (repeats numbered `-1`, `-2` as GitHub does) and explicit `id=`/`name=`. */
export function anchors(md: string): Set<string> {
  const out = new Set<string>();
  const seen = new Map<string, number>();
  for (const line of proseLines(md)) {
    const h = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (h) {
      const base = slug(h[1]!);
      const n = seen.get(base) ?? 0;
      seen.set(base, n + 1);
      out.add(n === 0 ? base : `${base}-${n}`);
    }
    for (const m of line.matchAll(/<a\s[^>]*(?:id|name)="([^"]+)"/g)) out.add(m[1]!);
  }
  return out;
}

export interface Link {
  readonly line: number;
  readonly target: string;
}

/** The inline links and images of a page (outside code), with their line numbers. */
export function links(md: string): Link[] {
  const out: Link[] = [];
  proseLines(md).forEach((line, i) => {
    const prose = line.replace(/`[^`]*`/g, (s) => ' '.repeat(s.length)); // code spans are not links
    for (const m of prose.matchAll(/!?\[(?:[^\]]|\][^(])*?\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) out.push({ line: i + 1, target: m[1]! });
    for (const m of prose.matchAll(/^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)/g)) out.push({ line: i + 1, target: m[1]! });
  });
  return out;
}
