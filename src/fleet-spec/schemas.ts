/**
 * The JSON Schemas in schemas/, as ajv validators (defaults applied, all errors collected).
 *
 * ajv's code generation for them takes ~55 ms and loading ajv ~45 ms, a fifth of `llmgw validate`'s
 * wall time at 1,000 models. So the validators ajv generates are kept, as ajv's own standalone
 * code, in schemas/validators.generated.cjs (written by schema-code.ts; a test keeps it in step), and
 * used when the hash they were generated from matches the schema files. Otherwise (a schema edited
 * and the file not regenerated) ajv compiles them here, as before: the same functions, only slower.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import type { Ajv as AjvClass, ErrorObject, ValidateFunction } from 'ajv';
import { packageRoot } from '../util/package-root.js';

export type SchemaKind = 'fleet' | 'node' | 'engine' | 'profile' | 'model' | 'keys' | 'check';

export const SCHEMA_KINDS: readonly SchemaKind[] = ['fleet', 'node', 'engine', 'profile', 'model', 'keys', 'check'];
/** Every schema file, the shared definitions first. */
const SCHEMA_FILES: readonly string[] = ['common', ...SCHEMA_KINDS];
export const GENERATED_VALIDATORS = join(packageRoot, 'schemas', 'validators.generated.cjs');

const require = createRequire(import.meta.url);

function schemaText(name: string): string {
  return readFileSync(join(packageRoot, 'schemas', `${name}.schema.json`), 'utf8');
}

/** sha256 over the schema files as they are now: what the generated validators must have been made from. */
export function schemasHash(): string {
  const h = createHash('sha256');
  for (const name of SCHEMA_FILES) h.update(`${name}\n${schemaText(name)}\n`);
  return h.digest('hex');
}

/** An ajv with llmgw's options and every schema added (`source`: keep the generated code, for standalone output). */
export function schemaAjv(opts: { source?: boolean } = {}): AjvClass {
  const { Ajv } = require('ajv') as typeof import('ajv');
  const ajv = new Ajv({
    allErrors: true,
    useDefaults: true,
    verbose: true,
    strict: true,
    strictRequired: false,
    strictTypes: false,
    allowUnionTypes: true,
    ...(opts.source ? { code: { source: true } } : {}),
  });
  ajv.addKeyword({ keyword: 'x-hint', schemaType: 'string' });
  ajv.addSchema(JSON.parse(schemaText('common')) as Record<string, unknown>);
  for (const k of SCHEMA_KINDS) ajv.addSchema(JSON.parse(schemaText(k)) as Record<string, unknown>, k);
  return ajv;
}

type Validators = Record<SchemaKind, ValidateFunction>;

/** Compiled by ajv in this process (the slow path, and the reference the generated code is checked against). */
export function compileValidators(): Validators {
  const ajv = schemaAjv();
  const out = {} as Validators;
  for (const k of SCHEMA_KINDS) out[k] = ajv.getSchema(k)!;
  return out;
}

/** The generated validators, when they were made from the schema files as they are now; else null. */
export function generatedValidators(): Validators | null {
  let m: Partial<Validators> & { schemasHash?: string };
  try {
    m = require(GENERATED_VALIDATORS) as typeof m;
  } catch {
    return null;
  }
  if (m.schemasHash !== schemasHash() || SCHEMA_KINDS.some((k) => typeof m[k] !== 'function')) return null;
  return m as Validators;
}

let validators: Validators | null = null;

export function validator(kind: SchemaKind): ValidateFunction {
  validators ??= generatedValidators() ?? compileValidators();
  return validators[kind];
}

export type SchemaError = ErrorObject;
