/** Assertions on catalogue errors (match the code; the message only where a test says so). */
import { strict as assert } from 'node:assert';
import { inspect } from 'node:util';
import { isLlmgwError, type LlmgwError } from '../../src/errors/catalogue.js';

/** An `assert.rejects` predicate: an LlmgwError with this code (and, given `re`, a message matching it). */
export function isCode(code: string, re?: RegExp): (e: unknown) => boolean {
  return (e: unknown): boolean => {
    assert.ok(isLlmgwError(e), `expected an LlmgwError, got ${inspect(e)}`);
    const tail = typeof e.detail['logTail'] === 'string' ? `\n--- log tail ---\n${e.detail['logTail']}` : '';
    assert.equal(e.code, code, e.message + tail);
    if (re) assert.match(e.message, re);
    return true;
  };
}

/** Awaits `p`, which must reject with an LlmgwError of `code`; returns that error. */
export async function rejectsWith(p: Promise<unknown>, code: string): Promise<LlmgwError> {
  try {
    await p;
  } catch (e) {
    isCode(code)(e);
    return e as LlmgwError;
  }
  assert.fail(`expected ${code}, but it resolved`);
}
