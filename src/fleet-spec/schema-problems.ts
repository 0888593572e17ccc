/** ajv errors → problems that name the field, its line and what would be valid. */
import type { ErrorObject } from 'ajv';
import type { Problem } from './types.js';
import { problem, type ParsedYaml } from './yaml.js';

function segments(instancePath: string): string[] {
  if (instancePath === '') return [];
  return instancePath
    .slice(1)
    .split('/')
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
}

function hintOf(e: ErrorObject): string | undefined {
  const ps = e.parentSchema as Record<string, unknown> | undefined;
  const h = ps?.['x-hint'];
  return typeof h === 'string' ? h : undefined;
}

function closest(word: string, options: readonly string[]): string | null {
  let best: string | null = null;
  let bestD = Infinity;
  for (const o of options) {
    const d = editDistance(word, o);
    if (d < bestD) {
      bestD = d;
      best = o;
    }
  }
  return best !== null && bestD <= Math.max(2, Math.floor(word.length / 3)) ? best : null;
}

function editDistance(a: string, b: string): number {
  const dp = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    let prev = dp[0]!;
    dp[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const tmp = dp[j]!;
      dp[j] = Math.min(dp[j]! + 1, dp[j - 1]! + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = tmp;
    }
  }
  return dp[b.length]!;
}

function show(v: unknown): string {
  const s = JSON.stringify(v);
  return s === undefined ? String(v) : s.length > 60 ? `${s.slice(0, 57)}...` : s;
}

function valueAt(root: unknown, segs: readonly string[]): unknown {
  let v: unknown = root;
  for (const s of segs) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<string, unknown>)[s];
  }
  return v;
}

export function schemaProblems(parsed: ParsedYaml, errors: readonly ErrorObject[]): Problem[] {
  const file = parsed.file;
  // A oneOf/anyOf error stands for its branches' errors at the same path: keep only it.
  const unionPaths = new Set(errors.filter((e) => e.keyword === 'oneOf' || e.keyword === 'anyOf').map((e) => e.instancePath));
  const out: Problem[] = [];
  const seen = new Set<string>();
  for (const e of errors) {
    if (e.keyword === 'if') continue;
    if (unionPaths.has(e.instancePath) && e.keyword !== 'oneOf' && e.keyword !== 'anyOf') continue;
    const segs = segments(e.instancePath);
    let fieldSegs = segs;
    let message: string;
    let hint: string | undefined = hintOf(e);
    let atKey = false;
    switch (e.keyword) {
      case 'required': {
        const missing = String((e.params as { missingProperty: string }).missingProperty);
        fieldSegs = [...segs, missing];
        message = `missing required field "${missing}"${segs.length ? ` in ${segs.join('.')}` : ''}`;
        const ps = e.parentSchema as { properties?: Record<string, { description?: string; 'x-hint'?: string }> } | undefined;
        const prop = ps?.properties?.[missing];
        hint = prop?.['x-hint'] ?? prop?.description ?? `add "${missing}:"`;
        out.push(problem(file, parsed.position(segs), '/' + fieldSegs.join('/'), 'SPEC_SCHEMA', message, hint));
        continue;
      }
      case 'additionalProperties': {
        const extra = String((e.params as { additionalProperty: string }).additionalProperty);
        fieldSegs = [...segs, extra];
        const ps = e.parentSchema as { properties?: Record<string, unknown> } | undefined;
        const allowed = Object.keys(ps?.properties ?? {});
        const near = closest(extra, allowed);
        message = `unknown field "${extra}"${near ? ` (did you mean "${near}"?)` : ''}`;
        hint = allowed.length ? `allowed fields here: ${allowed.join(', ')}` : 'remove the field';
        atKey = true;
        break;
      }
      case 'propertyNames': {
        const name = String((e.params as { propertyName: string }).propertyName);
        fieldSegs = [...segs, name];
        message = `invalid key "${name}"`;
        atKey = true;
        break;
      }
      case 'enum': {
        const allowed = (e.params as { allowedValues: unknown[] }).allowedValues;
        message = `${show(valueAt(parsed.value, segs))} is not allowed`;
        hint = `one of: ${allowed.map(show).join(', ')}`;
        break;
      }
      case 'const':
        message = `must be ${show((e.params as { allowedValue: unknown }).allowedValue)}`;
        break;
      case 'type': {
        const want = String((e.params as { type: string }).type);
        const got = valueAt(parsed.value, segs);
        message = `${show(got)} must be of type ${want}`;
        if (want === 'string' && (typeof got === 'number' || typeof got === 'boolean')) hint = `YAML read this as a ${typeof got}; put the value in quotes${hint ? ` (${hint})` : ''}`;
        break;
      }
      case 'pattern':
      case 'oneOf':
      case 'anyOf':
      case 'not':
        message = `${show(valueAt(parsed.value, segs))} is not valid here`;
        break;
      case 'minProperties':
      case 'maxProperties':
        message = hint ? `${e.message ?? 'invalid'} — ${hint}` : (e.message ?? 'invalid');
        break;
      default:
        message = `${show(valueAt(parsed.value, segs))}: ${e.message ?? 'invalid'}`;
    }
    const path = '/' + fieldSegs.join('/');
    const key = `${path}|${message}`;
    if (seen.has(key)) continue;
    seen.add(key);
    const where = fieldSegs.length ? `${fieldSegs.join('.')}: ` : '';
    out.push(problem(file, parsed.position(fieldSegs, atKey), path === '/' ? '' : path, 'SPEC_SCHEMA', `${where}${message}`, hint));
  }
  return out;
}
