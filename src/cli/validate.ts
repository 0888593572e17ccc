/** `llmgw validate [DIR | --rev REV]` — exit 0 valid, 2 invalid; text, json or GitHub annotations. */
import { loadFleetSpec } from '../fleet-spec/load.js';
import type { FleetSpec } from '../fleet-spec/types.js';
import { oneOf, parse } from './args.js';
import { fleetInput } from './fleet-input.js';
import { formatProblemGithub, formatProblemText } from './problems-format.js';
import type { Io } from './io.js';

export const validateUsage = `usage: llmgw validate [DIR] [--rev REV] [--format text|json|github]

Validates a fleet repo: the files in DIR (default: the current directory), or with --rev the
files committed at REV in the git repo at DIR (never the working tree).
Warnings (e.g. a checks/ file no rollout uses) are printed and do not make the repo invalid.
Exit status: 0 valid, 2 invalid or error.`;

function summary(spec: FleetSpec): string {
  const count = (o: object, one: string): string => {
    const n = Object.keys(o).length;
    return `${n} ${one}${n === 1 ? '' : 's'}`;
  };
  const versions = Object.values(spec.engines).reduce((n, e) => n + Object.keys(e.versions).length, 0);
  return `${count(spec.nodes, 'node')}, ${count(spec.engines, 'engine')} (${versions} version${versions === 1 ? '' : 's'}), ${count(spec.profiles, 'profile')}, ${count(spec.models, 'model')}, ${spec.access.keys.length} key${spec.access.keys.length === 1 ? '' : 's'}`;
}

export async function validateCommand(argv: readonly string[], io: Io): Promise<number> {
  const { values, positionals } = parse(argv, {
    rev: { type: 'string' },
    format: { type: 'string', short: 'f' },
    help: { type: 'boolean', short: 'h' },
  });
  if (values.help) {
    io.out(validateUsage);
    return 0;
  }
  const format = oneOf('format', values.format, ['text', 'json', 'github'] as const, 'text');
  if (positionals.length > 1) {
    io.err(validateUsage);
    return 2;
  }
  const input = await fleetInput(positionals[0] ?? '.', values.rev, io.cwd);
  const result = await loadFleetSpec(input.files, input.revision);
  const where = input.revision ? `${input.label} at ${input.revision.slice(0, 12)}` : input.label;
  if (format === 'json') {
    io.out(
      JSON.stringify(
        result.ok
          ? { valid: true, source: input.label, revision: input.revision, problems: [], warnings: result.warnings, summary: summary(result.spec) }
          : { valid: false, source: input.label, revision: input.revision, problems: result.problems, warnings: result.warnings },
        null,
        2,
      ),
    );
  } else if (format === 'github') {
    for (const w of result.warnings) io.out(formatProblemGithub(w, input.prefix, 'warning'));
    if (result.ok) io.out(`::notice title=llmgw validate::${where} is valid: ${summary(result.spec)}`);
    else for (const p of result.problems) io.out(formatProblemGithub(p, input.prefix));
  } else if (result.ok) {
    for (const w of result.warnings) io.out(formatProblemText(w, input.prefix, 'warning'));
    const warned = result.warnings.length ? ` (${result.warnings.length} warning${result.warnings.length === 1 ? '' : 's'})` : '';
    io.out(`${result.warnings.length ? '\n' : ''}${where}: valid — ${summary(result.spec)}${warned}`);
  } else {
    const all = [...result.problems.map((p) => ({ p, s: 'error' as const })), ...result.warnings.map((p) => ({ p, s: 'warning' as const }))];
    all.sort((a, b) => a.p.file.localeCompare(b.p.file) || (a.p.line ?? 0) - (b.p.line ?? 0));
    for (const { p, s } of all) io.out(formatProblemText(p, input.prefix, s));
    const files = new Set(result.problems.map((p) => p.file)).size;
    io.out(`\n${where}: invalid — ${result.problems.length} problem${result.problems.length === 1 ? '' : 's'} in ${files} file${files === 1 ? '' : 's'}`);
  }
  return result.ok ? 0 : 2;
}
