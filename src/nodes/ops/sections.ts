/**
 * Reading what a node script printed: `@@<nonce> name` sections (the nonce is random per call, so no
 * log line or file name can forge one), the last line, a bounded tail.
 */

export interface Section {
  readonly name: string;
  readonly lines: string[];
}

/** `@@<nonce> name` sections of a script's stdout, in order. */
export function parseSections(stdout: string, nonce: string): Section[] {
  const marker = `@@${nonce} `;
  const out: Section[] = [];
  let cur: Section | null = null;
  for (const line of stdout.split('\n')) {
    if (line.startsWith(marker)) {
      cur = { name: line.slice(marker.length).trim(), lines: [] };
      out.push(cur);
    } else if (cur) {
      cur.lines.push(line);
    }
  }
  for (const s of out) while (s.lines.length > 0 && s.lines[s.lines.length - 1] === '') s.lines.pop();
  return out;
}

/** The last non-empty line of a script's output, trimmed ('' for none). */
export function lastLine(s: string): string {
  return s.trimEnd().split('\n').pop()?.trim() ?? '';
}

/** The last `lines` lines of s, at most 8000 characters. */
export function tailOf(s: string, lines: number): string {
  return s.trimEnd().split('\n').slice(-lines).join('\n').slice(-8000);
}
