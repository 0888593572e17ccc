/** The JSON Schemas in schemas/, compiled once with ajv (defaults applied, all errors collected). */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv';
import { packageRoot } from '../util/package-root.js';

export type SchemaKind = 'fleet' | 'node' | 'engine' | 'profile' | 'model' | 'keys';

const KINDS: readonly SchemaKind[] = ['fleet', 'node', 'engine', 'profile', 'model', 'keys'];

function readSchema(name: string): Record<string, unknown> {
  return JSON.parse(readFileSync(join(packageRoot, 'schemas', `${name}.schema.json`), 'utf8')) as Record<string, unknown>;
}

let compiled: Record<SchemaKind, ValidateFunction> | null = null;

export function validator(kind: SchemaKind): ValidateFunction {
  if (!compiled) {
    const ajv = new Ajv({ allErrors: true, useDefaults: true, verbose: true, strict: true, strictRequired: false, strictTypes: false, allowUnionTypes: true });
    ajv.addKeyword({ keyword: 'x-hint', schemaType: 'string' });
    ajv.addSchema(readSchema('common'));
    const out = {} as Record<SchemaKind, ValidateFunction>;
    for (const k of KINDS) out[k] = ajv.compile(readSchema(k));
    compiled = out;
  }
  return compiled[kind];
}

export type SchemaError = ErrorObject;
