/**
 * Reasons are bounded and printable where they are made (#37 item 2, #36 item 6): whatever text an
 * engine, a node's stderr or a GGUF's strings carry, a reason's message is at most 2 KiB of UTF-8
 * and has no control character but tab and newline, no unpaired surrogate. A property test over
 * hostile text (random bytes, terminal escapes, up to 1 MiB) through every way a reason is made.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { LlmgwError, printable, reasonOf, reasonText, REASON_MAX_BYTES } from '../../src/errors/catalogue.js';
import { classifyFailure } from '../../src/nodes/failure.js';
import { scriptError } from '../../src/nodes/script-errors.js';

// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

function assertSafe(text: string, what: string): void {
  assert.ok(Buffer.byteLength(text) <= REASON_MAX_BYTES, `${what}: ${Buffer.byteLength(text)} bytes`);
  assert.ok(!CONTROL.test(text), `${what}: a control character at ${text.search(CONTROL)}: ${JSON.stringify(text.slice(Math.max(0, text.search(CONTROL) - 10), text.search(CONTROL) + 10))}`);
  assert.ok(!LONE_SURROGATE.test(text), `${what}: an unpaired surrogate`);
}

const ESCAPES = ['\x1b]52;c;ZXZpbA==\x07', '\x1b]0;title\x07', '\x1b[2J', '\x1b[31m', '\x9b31m', '\x1bP+q\x1b\\', '\r', '\x00', '\x7f', '\u0085', '\ud800', '\udc00x'];

/** A long engine line: an escape, then `n` UTF-16 units of one character (ASCII, 2-byte, a surrogate pair, ESC). */
const longLine = (e: string, n: number, c: string): string => `${e}unknown model architecture: '${c.repeat(Math.ceil(n / c.length))}'${e}`;
const LONG_CHARS = ['A', 'é', '😀', '\x1b'];

/**
 * Hostile text: random bytes read as UTF-8 or Latin-1, random UTF-16 units, escapes, and long lines
 * past the 2 KiB bound (up to 64 KiB here: the cut is the same code at any length; 1 MiB below).
 */
const hostile = fc.oneof(
  fc.uint8Array({ maxLength: 4096 }).map((b) => Buffer.from(b).toString('utf8')),
  fc.uint8Array({ maxLength: 4096 }).map((b) => Buffer.from(b).toString('latin1')),
  fc.array(fc.integer({ min: 0, max: 0xffff }), { maxLength: 3000 }).map((u) => String.fromCharCode(...u)),
  fc.array(fc.oneof(fc.constantFrom(...ESCAPES), fc.string({ maxLength: 20 })), { maxLength: 200 }).map((a) => a.join('')),
  fc.tuple(fc.constantFrom(...ESCAPES), fc.integer({ min: 2048, max: 64 * 1024 }), fc.constantFrom(...LONG_CHARS)).map(([e, n, c]) => longLine(e, n, c)),
);

/** Every way a reason is made, each result bounded and printable. */
function assertEveryWaySafe(t: string): void {
  assertSafe(reasonText(t), 'reasonText');
  assertSafe(new LlmgwError('REPLICA_EXITED', t, { logTail: t }).message, 'LlmgwError');
  assertSafe(reasonOf(new Error(t)).message, 'reasonOf(Error)');
  assertSafe(reasonOf(t).message, 'reasonOf(string)');
  assertSafe(classifyFailure(t, 'process gone').message, 'classifyFailure');
  assertSafe(classifyFailure(`error loading model: unknown model architecture: '${t}'`).message, 'classifyFailure (unknown arch)');
  assertSafe(scriptError('n1', 'starting', { code: 1, signal: null, stdout: '', stderr: `llmgw-error: MODEL_DOWNLOAD_FAILED ${t}` }).message, 'scriptError (llmgw-error)');
  assertSafe(scriptError('n1', 'starting', { code: 1, signal: null, stdout: '', stderr: t }).message, 'scriptError (stderr)');
}

describe('reason text: bounded and printable wherever a reason is made', () => {
  it('reasonText, LlmgwError, reasonOf, classifyFailure and scriptError always give printable text of at most 2 KiB', () => {
    fc.assert(fc.property(hostile, assertEveryWaySafe), { numRuns: 300 });
  });

  it('the same for a 1 MiB engine line of each kind of character, between escapes', () => {
    // once each at the largest size (the property above draws long lines up to 64 KiB: 1 MiB ones,
    // a fifth of its 300 runs, took 15 s of the unit tier for the same code paths)
    LONG_CHARS.forEach((c, i) => assertEveryWaySafe(longLine(ESCAPES[i % ESCAPES.length]!, 1024 * 1024, c)));
  });

  it('text that is already safe and short stays as it is; tab and newline stay; CRLF becomes LF', () => {
    fc.assert(
      fc.property(fc.string({ maxLength: 500 }).filter((s) => !CONTROL.test(s) && !LONE_SURROGATE.test(s)), (s) => {
        assert.equal(reasonText(s), s);
      }),
    );
    assert.equal(reasonText('a\tb\nc\r\nd'), 'a\tb\nc\nd');
  });

  it('a long text keeps its head and says how many bytes were cut, never splitting a character', () => {
    const line = `llama_model_load: error loading model: unknown model architecture: '${'é'.repeat(700 * 1024)}'`;
    const r = reasonText(line);
    const m = /… \((\d+) bytes cut\)$/.exec(r);
    assert.ok(m, r.slice(-40));
    assert.ok(r.startsWith("llama_model_load: error loading model: unknown model architecture: 'éé"));
    assert.ok(!r.includes('\ufffd'), 'no character split');
    const kept = Buffer.byteLength(r.slice(0, r.length - m[0].length));
    assert.equal(kept + Number(m[1]), Buffer.byteLength(line), 'kept + cut = the whole');
    assert.ok(Buffer.byteLength(r) <= REASON_MAX_BYTES && Buffer.byteLength(r) > REASON_MAX_BYTES - 32, `${Buffer.byteLength(r)} bytes: the room is used`);
  });

  it('an OSC 52 clipboard write in an engine line: no ESC or BEL in the reason, the text around it kept', () => {
    const f = classifyFailure("0.00.018.295 E llama_model_load: error loading model: unknown model architecture: '\x1b]52;c;ZXZpbA==\x07kev'");
    assert.equal(f.code, 'REPLICA_UNKNOWN_ARCHITECTURE');
    assert.equal(f.message, "llama_model_load: error loading model: unknown model architecture: '\ufffd]52;c;ZXZpbA==\ufffdkev'");
    assert.equal(printable('\x1b[31mred\x1b[0m \u009b2J'), '\ufffd[31mred\ufffd[0m \ufffd2J');
  });

  it('detail strings (log tails, stderr) keep their length but lose terminal controls', () => {
    const e = new LlmgwError('REPLICA_EXITED', 'x', { logTail: `a\x1b]52;c;x\x07${'b'.repeat(10_000)}`, n: 3 });
    assert.equal(e.detail.logTail, `a\ufffd]52;c;x\ufffd${'b'.repeat(10_000)}`);
    assert.equal(e.detail.n, 3);
  });
});
