/**
 * The check runner (#34, item 2): a rollout's checks run against the new revision's first replica
 * before the router sends it any user request. This file is the thin shell (one streamed request per
 * check); what the answer must be is decided by answer.ts's judgeAnswer (re-exported here), the
 * stream is read by answer-stream.ts.
 *
 * Each check POSTs `check.request` to `endpoint + check.path` with `temperature: 0` and `seed: 42`
 * unless the check sets them, and always `stream: true`, so the TTFT is measured at the first content
 * (not at the headers) and the text is assembled from the deltas. The engine's key goes as
 * `Authorization: Bearer KEY` (replicas refuse requests without it). The whole request — connect,
 * headers, body — is bounded by `check.timeoutMs`.
 *
 * A check fails (ROLLOUT_CHECK_FAILED, naming the check, what it expected and what came back) when
 * judgeAnswer says so, when no answer came within its time ("no answer within 30 s", or "no complete
 * answer within 30 s (status 200, 812 characters so far: …)"), when the replica
 * could not be reached, and when a 2xx stream broke off (an error event, or no `data: [DONE]`). A
 * caller's own abort (`opts.signal`) is no verdict: runCheck rejects with the signal's reason.
 */
import type { Dispatcher } from 'undici';
import { Agent, request } from '../util/undici-lean.js';
import { reasonText, Reasons } from '../errors/catalogue.js';
import { cap, durationWords, judgeAnswer, type AnswerJudgement } from './answer.js';
import { AnswerStream, MAX_ANSWER_CHARS, contentOf } from './answer-stream.js';
import type { CheckResult, RolloutCheck } from './types.js';

export { CAP_CHARS, cap, judgeAnswer, type Answer, type AnswerJudgement } from './answer.js';

/** The seed a check's request gets unless it sets one. */
export const CHECK_SEED = 42;

export interface RunCheckOptions {
  /** The caller giving up (leadership lost, the rollout replaced): runCheck rejects with its reason. */
  readonly signal?: AbortSignal;
  /** The undici dispatcher to use; default: one of its own for the call, closed after it. */
  readonly dispatcher?: Dispatcher;
}

/** The body a check sends: its request, temperature 0 and the seed unless it sets them, always streamed. */
export function checkBody(check: RolloutCheck): Record<string, unknown> {
  return { temperature: 0, seed: CHECK_SEED, ...check.request, stream: true };
}

/** A failed check's result: the reason names the check, what it expected and what came back. */
export function checkFailure(check: RolloutCheck, expected: string, got: string): CheckResult {
  // what came back is the model's text: printable and bounded, as every reason is (catalogue.ts)
  const e = reasonText(cap(expected));
  const g = reasonText(cap(got));
  const message = `check ${JSON.stringify(check.name)} (${check.file}) failed: expected ${e}, got ${g}`;
  return { ok: false, name: check.name, expected: e, got: g, reason: { code: Reasons.ROLLOUT_CHECK_FAILED.code, message } };
}

interface Received {
  status: number;
  text: string;
  ttftMs: number | null;
  /** A 2xx stream that broke off: why. */
  broken: string | null;
}

/** Reads one answer: the stream's content for a 2xx event stream, else the body (a JSON answer's content when it has one). */
async function receive(url: string, headers: Record<string, string>, body: string, signal: AbortSignal, dispatcher: Dispatcher, timeoutMs: number, started: number, got: Received): Promise<void> {
  // reset: a connection of its own, closed after the answer. llama-server may close a kept-alive
  // connection after a streamed answer while the next check is being sent on it ("other side closed").
  const res = await request(url, { method: 'POST', headers, body, signal, dispatcher, reset: true, headersTimeout: timeoutMs, bodyTimeout: timeoutMs });
  got.status = res.statusCode;
  res.body.setEncoding('utf8');
  const contentType = String(res.headers['content-type'] ?? '');
  const ok = res.statusCode >= 200 && res.statusCode < 300;
  if (ok && contentType.includes('text/event-stream')) {
    const stream = new AnswerStream();
    for await (const chunk of res.body as AsyncIterable<string>) {
      if (stream.push(chunk)) got.ttftMs = performance.now() - started;
      got.text = stream.text;
      if (stream.tooLarge) {
        res.body.destroy();
        got.broken = `an answer longer than ${MAX_ANSWER_CHARS} characters`;
        return;
      }
    }
    if (stream.end()) got.ttftMs = performance.now() - started;
    got.text = stream.text;
    if (stream.error !== null) got.broken = `the stream ended with an error: ${stream.error}`;
    else if (!stream.done) got.broken = 'the stream ended without its last event (data: [DONE])';
    return;
  }
  let raw = '';
  for await (const chunk of res.body as AsyncIterable<string>) {
    raw += chunk;
    if (raw.length > MAX_ANSWER_CHARS) {
      res.body.destroy();
      break;
    }
  }
  got.text = raw;
  if (ok) {
    try {
      const content = contentOf(JSON.parse(raw) as unknown);
      if (content !== null) {
        got.text = content;
        got.ttftMs = performance.now() - started;
      }
    } catch {
      /* not JSON: the body as it came */
    }
  }
}

/**
 * `endpoint + path`, or null when that would leave the replica: the engine key must never go to
 * another host ("@evil.example/…" after "http://10.0.0.5:8080" names a user and another host).
 */
export function checkUrl(endpoint: string, path: string): string | null {
  if (!path.startsWith('/')) return null;
  const url = `${endpoint.replace(/\/+$/, '')}${path}`;
  try {
    return new URL(url).origin === new URL(endpoint).origin ? url : null;
  } catch {
    return null;
  }
}

/** Runs one check against a replica (`endpoint`: its base URL, e.g. http://10.0.0.5:8080). */
export async function runCheck(endpoint: string, engineApiKey: string, check: RolloutCheck, opts: RunCheckOptions = {}): Promise<CheckResult> {
  const url = checkUrl(endpoint, check.path);
  if (url === null) return checkFailure(check, 'a path on the replica (starting with /)', `the path ${JSON.stringify(check.path)}`);
  const own = opts.dispatcher === undefined ? new Agent({ connections: 1 }) : null;
  const dispatcher = opts.dispatcher ?? own!;
  const timeout = AbortSignal.timeout(check.timeoutMs);
  const signal = opts.signal === undefined ? timeout : AbortSignal.any([opts.signal, timeout]);
  const headers: Record<string, string> = { 'content-type': 'application/json', ...(engineApiKey === '' ? {} : { authorization: `Bearer ${engineApiKey}` }) };
  const started = performance.now();
  const got: Received = { status: 0, text: '', ttftMs: null, broken: null };
  const within = `an answer within ${durationWords(check.timeoutMs)}`;
  try {
    await receive(url, headers, JSON.stringify(checkBody(check)), signal, dispatcher, check.timeoutMs, started, got);
  } catch (e) {
    if (opts.signal?.aborted === true) throw opts.signal.reason;
    if (timeout.aborted || isTimeout(e)) {
      const bound = durationWords(check.timeoutMs);
      if (got.status === 0) return checkFailure(check, within, `no answer within ${bound}`);
      return checkFailure(check, within, `no complete answer within ${bound} (status ${got.status}, ${got.text.length} characters so far${got.text === '' ? '' : `: ${got.text}`})`);
    }
    return checkFailure(check, within, `no answer: ${errorText(e)}`);
  } finally {
    if (own !== null) await own.destroy();
  }
  if (got.broken !== null) return checkFailure(check, `a complete answer (status ${check.expect.status})`, `${got.broken}${got.text === '' ? '' : ` after ${JSON.stringify(got.text)}`}`);
  const judged: AnswerJudgement = judgeAnswer(check.expect, got);
  if (!judged.ok) return checkFailure(check, judged.expected, judged.got);
  return { ok: true, name: check.name, ttftMs: got.ttftMs, durationMs: performance.now() - started };
}

/** Runs the checks in order, stopping at the first that fails; every result so far, that one last. */
export async function runChecks(endpoint: string, engineApiKey: string, checks: readonly RolloutCheck[], opts: RunCheckOptions = {}): Promise<CheckResult[]> {
  const results: CheckResult[] = [];
  for (const check of checks) {
    const r = await runCheck(endpoint, engineApiKey, check, opts);
    results.push(r);
    if (!r.ok) break;
  }
  return results;
}

function isTimeout(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  return code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT' || (e instanceof Error && (e.name === 'TimeoutError' || (e.cause as { name?: unknown } | undefined)?.name === 'TimeoutError'));
}

/** An error's own words, with the OS's code when it has one ("connect ECONNREFUSED 127.0.0.1:9"). */
function errorText(e: unknown): string {
  if (!(e instanceof Error)) return String(e);
  const cause = e.cause instanceof Error ? `: ${e.cause.message}` : '';
  return `${e.message}${cause}`;
}
