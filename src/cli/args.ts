/** Small helpers over node:util parseArgs so every command reports usage errors the same way. */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { usageError } from '../errors/catalogue.js';


export function parse<T extends NonNullable<ParseArgsConfig['options']>>(
  argv: readonly string[],
  options: T,
): { values: { [K in keyof T]?: T[K]['type'] extends 'boolean' ? boolean : string }; positionals: string[] } {
  try {
    const r = parseArgs({ args: [...argv], options, allowPositionals: true, strict: true });
    return r as unknown as ReturnType<typeof parse<T>>;
  } catch (e) {
    throw usageError(e instanceof Error ? e.message : String(e));
  }
}

export function oneOf<T extends string>(name: string, v: string | undefined, allowed: readonly T[], dflt: T): T {
  if (v === undefined) return dflt;
  if ((allowed as readonly string[]).includes(v)) return v as T;
  throw usageError(`--${name} must be one of ${allowed.join(', ')} (got ${JSON.stringify(v)})`);
}
