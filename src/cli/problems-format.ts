/** Problems for people (text), machines (json) and GitHub Actions (workflow annotations). */
import { join, relative } from 'node:path';
import type { Problem } from '../fleet-spec/types.js';

export type ProblemFormat = 'text' | 'json' | 'github';

export function location(p: Problem, prefix = ''): string {
  const file = prefix ? join(prefix, p.file) : p.file;
  return p.line === null ? file : `${file}:${p.line}:${p.col ?? 1}`;
}

export type Severity = 'error' | 'warning';

export function formatProblemText(p: Problem, prefix = '', severity: Severity = 'error'): string {
  const field = p.path ? ` (field ${p.path})` : '';
  return `${location(p, prefix)}: ${severity}: ${p.message}${field} [${p.code}]\n    hint: ${p.hint}`;
}

function ghEscapeData(s: string): string {
  return s.replace(/%/g, '%25').replace(/\r/g, '%0D').replace(/\n/g, '%0A');
}
function ghEscapeProp(s: string): string {
  return ghEscapeData(s).replace(/:/g, '%3A').replace(/,/g, '%2C');
}

export function formatProblemGithub(p: Problem, prefix = '', severity: Severity = 'error'): string {
  const props = [`file=${ghEscapeProp(prefix ? join(prefix, p.file) : p.file)}`];
  if (p.line !== null) props.push(`line=${p.line}`, `col=${p.col ?? 1}`);
  props.push(`title=${ghEscapeProp(`llmgw ${p.code}`)}`);
  const field = p.path ? ` (field ${p.path})` : '';
  return `::${severity} ${props.join(',')}::${ghEscapeData(`${p.message}${field}. Hint: ${p.hint}`)}`;
}

/** The path prefix that makes repo-relative files relative to the current directory. */
export function prefixFor(dir: string, cwd: string = process.cwd()): string {
  const rel = relative(cwd, dir);
  return rel === '' ? '' : rel;
}
