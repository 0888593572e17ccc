/**
 * Whether a check's answer is what the check expects (#34, item 2). Pure: (CheckExpect, answer) →
 * ok, or the first clause that does not hold, in words, with what came back (capped at CAP_CHARS).
 *
 * Clauses are tried in this order, and the first that fails is the one reported: status; matches;
 * contains; not_matches; json_schema (the text, trimmed, parsed as JSON: a parse error is a failure
 * saying so); max_ttft. `expected` names only the failing clause ("text matching /^4$/"), so it sits
 * beside what `got` shows for it. Patterns are JavaScript regular expressions without flags.
 */
import { createRequire } from 'node:module';
import type { Ajv as AjvClass, ValidateFunction } from 'ajv';
import type { CheckExpect } from './types.js';

/** What `got` and `expected` are capped at (characters). */
export const CAP_CHARS = 512;

export interface Answer {
  readonly status: number;
  /** The answer's text: the content assembled from a 2xx stream, or the body of any other answer. */
  readonly text: string;
  /** Request start to the first content (ms); null when none came. */
  readonly ttftMs: number | null;
}

export type AnswerJudgement = { readonly ok: true } | { readonly ok: false; readonly expected: string; readonly got: string };

/** `s` cut to at most `max` characters, saying how many were left out: "abc… (1234 more)". */
export function cap(s: string, max = CAP_CHARS): string {
  if (s.length <= max) return s;
  // the suffix's own length depends on the count it prints: take it at its longest
  const suffixLen = `… (${s.length} more)`.length;
  let keep = Math.max(0, max - suffixLen);
  // never cut a surrogate pair in half
  if (keep > 0 && /[\uD800-\uDBFF]/.test(s[keep - 1]!)) keep--;
  return `${s.slice(0, keep)}… (${s.length - keep} more)`;
}

/** A duration as a check's message says it: "30 s", "1.5 s", "250 ms". */
export function durationWords(ms: number): string {
  return ms >= 1000 ? `${Number((ms / 1000).toFixed(1))} s` : `${Math.round(ms)} ms`;
}

const require = createRequire(import.meta.url);
let ajv: AjvClass | null = null;
const compiled = new WeakMap<object, ValidateFunction | Error>();

/** The check's schema, compiled once per schema object (ajv is loaded only when a check has one). */
function schemaValidator(schema: Readonly<Record<string, unknown>>): ValidateFunction | Error {
  const seen = compiled.get(schema);
  if (seen !== undefined) return seen;
  if (ajv === null) {
    const { Ajv } = require('ajv') as typeof import('ajv');
    ajv = new Ajv({ allErrors: true, strict: false });
  }
  let v: ValidateFunction | Error;
  try {
    v = ajv.compile(schema as Record<string, unknown>);
  } catch (e) {
    v = e instanceof Error ? e : new Error(String(e));
  }
  compiled.set(schema, v);
  return v;
}

function regex(source: string): RegExp | Error {
  try {
    return new RegExp(source);
  } catch (e) {
    return e instanceof Error ? e : new Error(String(e));
  }
}

const fail = (expected: string, got: string): AnswerJudgement => ({ ok: false, expected: cap(expected), got: cap(got) });
/** What came back, as `got` shows it: the text, or that there was none. */
const shown = (text: string): string => (text === '' ? '(empty answer)' : text);

/** The failure when `text` does (want false) or does not (want true) match the pattern; null when it holds. */
function mismatch(source: string, want: boolean, text: string): AnswerJudgement | null {
  const words = `text ${want ? '' : 'not '}matching /${source}/`;
  const re = regex(source);
  if (re instanceof Error) return fail(words, `the check's pattern is not a valid regular expression (${re.message})`);
  return re.test(text) === want ? null : fail(words, shown(text));
}

/** Judges one answer against a check's expectation; see the file's comment for the order. */
export function judgeAnswer(expect: CheckExpect, answer: Answer): AnswerJudgement {
  if (answer.status !== expect.status) return fail(`status ${expect.status}`, `status ${answer.status}: ${shown(answer.text)}`);
  const text = answer.text;
  if (expect.matches !== null) {
    const no = mismatch(expect.matches, true, text);
    if (no !== null) return no;
  }
  if (expect.contains !== null && !text.includes(expect.contains)) return fail(`text containing ${JSON.stringify(expect.contains)}`, shown(text));
  if (expect.notMatches !== null) {
    const no = mismatch(expect.notMatches, false, text);
    if (no !== null) return no;
  }
  if (expect.jsonSchema !== null) {
    const words = "text that is JSON satisfying the check's json_schema";
    const validate = schemaValidator(expect.jsonSchema);
    if (validate instanceof Error) return fail(words, `the check's json_schema does not compile (${validate.message})`);
    let value: unknown;
    try {
      value = JSON.parse(text.trim()) as unknown;
    } catch (e) {
      return fail(words, `not JSON (${e instanceof Error ? e.message : String(e)}): ${shown(text)}`);
    }
    if (!validate(value)) {
      const why = (validate.errors ?? []).map((er) => `${er.instancePath === '' ? '(the value)' : er.instancePath} ${er.message ?? 'is invalid'}`).join('; ');
      return fail(words, `JSON not satisfying the schema (${why}): ${text}`);
    }
  }
  if (expect.maxTtftMs !== null) {
    const words = `the first token within ${durationWords(expect.maxTtftMs)}`;
    if (answer.ttftMs === null) return fail(words, 'no token came');
    if (answer.ttftMs > expect.maxTtftMs) return fail(words, `the first token after ${durationWords(answer.ttftMs)}`);
  }
  return { ok: true };
}
