/**
 * No cache oracle between keys (#36 N8), pure: what a key not marked `trusted: true` in
 * access/keys.yaml does not see of llama-server's answers, and which request fields it may not send.
 *
 * llama-server tells how much of a prompt came from its prompt cache, which other keys' requests
 * fill: `timings` (cache_n, and prompt_n/prompt_ms: the tokens it evaluated), OpenAI usage's
 * `prompt_tokens_details.cached_tokens` and `input_tokens_details.cached_tokens` (/v1/responses,
 * transcriptions), Anthropic usage's `cache_read_input_tokens` (its `input_tokens` then leaves those
 * out), `prompt_progress` (`return_progress`: its `cache` count) and `__verbose` (a request's
 * `verbose`: tokens_cached and timings again); `id_slot` says which slot served. A key that reads
 * them learns, token by token, whether another key's recent prompt starts with a guess. So for such a
 * key these are taken out of every JSON body and every stream event (read from llama-server's
 * tools/server/server-task.cpp, the build node-llama-cpp 3.21.1 ships), and Anthropic's
 * `input_tokens` counts the whole prompt, as OpenAI's `prompt_tokens` does. The router reads the
 * figures for itself before this (proxy.ts's tail: metrics, usage, limits, canary figures).
 *
 * A request's `id_slot` picks a replica's slot (a client could wait on a busy slot while the router
 * counts a free one, or sit next to another key's cache); the router refuses it for every key.
 */

/** Most bytes held to take the figures out: a whole non-streamed body, or one line of a stream. */
export const REDACT_HOLD_BYTES = 8 * 1024 * 1024;

/** Top-level fields of a body or an event that carry cache figures (or say which slot served). */
const TOP_FIELDS = ['timings', 'prompt_progress', '__verbose', 'tokens_cached', 'id_slot'] as const;
/** Where llama-server puts `usage`: the body or event itself, a /v1/responses event's `response`, Anthropic's `message_start`'s `message`. */
const USAGE_HOLDERS = [null, 'response', 'message'] as const;
/** Bytes of which one is in every body or line that holds a figure taken out (a quick test before parsing). */
const MARKS = ['"timings"', 'cache', '"prompt_progress"', '"__verbose"', '"id_slot"'].map((m) => Buffer.from(m, 'latin1'));

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);

/** True when `b` (from `start` to `end`) holds any of the marks: it may carry a cache figure. */
export function mayCarry(b: Buffer, start = 0, end = b.length): boolean {
  const s = start === 0 && end === b.length ? b : b.subarray(start, end);
  for (const m of MARKS) if (s.indexOf(m) >= 0) return true;
  return false;
}

function redactUsage(u: Obj): boolean {
  let changed = false;
  for (const details of ['prompt_tokens_details', 'input_tokens_details']) {
    const d = u[details];
    if (!isObj(d) || !('cached_tokens' in d)) continue;
    delete d['cached_tokens'];
    if (Object.keys(d).length === 0) delete u[details];
    changed = true;
  }
  if ('cache_read_input_tokens' in u) {
    const read = u['cache_read_input_tokens'];
    if (typeof read === 'number' && typeof u['input_tokens'] === 'number') u['input_tokens'] = u['input_tokens'] + read;
    delete u['cache_read_input_tokens'];
    changed = true;
  }
  if ('cache_creation_input_tokens' in u) {
    delete u['cache_creation_input_tokens'];
    changed = true;
  }
  return changed;
}

/**
 * Takes the cache figures out of one parsed body or stream event, in place (see the file's comment);
 * true when it changed anything.
 */
export function redactCacheFigures(o: Obj): boolean {
  let changed = false;
  for (const f of TOP_FIELDS) {
    if (f in o) {
      delete o[f];
      changed = true;
    }
  }
  for (const h of USAGE_HOLDERS) {
    const holder = h === null ? o : o[h];
    if (!isObj(holder)) continue;
    const u = holder['usage'];
    if (isObj(u) && redactUsage(u)) changed = true;
  }
  return changed;
}

/**
 * One JSON text without its cache figures: the same bytes (the same Buffer) when none is there; null
 * when it may carry some and is not JSON (the caller refuses to pass it). An array (llama-server's
 * answer to several prompts at once) is rid of them in each of its objects.
 */
export function redactJson(text: Buffer): Buffer | null {
  if (!mayCarry(text)) return text;
  let o: unknown;
  try {
    o = JSON.parse(text.toString('utf8'));
  } catch {
    return null;
  }
  let changed = false;
  if (isObj(o)) changed = redactCacheFigures(o);
  else if (Array.isArray(o)) for (const e of o) if (isObj(e) && redactCacheFigures(e)) changed = true;
  return changed ? Buffer.from(JSON.stringify(o), 'utf8') : text;
}

/** A whole JSON body as `key` sees it: untouched for a trusted key, else `redactJson`'s. */
export function redactForKey(body: Buffer, key: { readonly trusted: boolean }): Buffer | null {
  return key.trusted ? body : redactJson(body);
}

/** A response body on its way to a key not trusted: chunks in, the bytes to pass on out. */
export interface BodyRedactor {
  /** True: bytes pass as they come (a stream, line by line); false: the whole body is held until its end. */
  readonly streams: boolean;
  /** The bytes to pass on now (maybe none); null when more than REDACT_HOLD_BYTES would be held. */
  push(chunk: Buffer): Buffer | null;
  /** The bytes left at the end; null when they cannot be rid of their figures (not JSON). */
  end(): Buffer | null;
  /** Bytes held now, not passed on yet (counted in the router's maxBufferedBytes: byte-budget.ts). */
  readonly held: number;
}

const EMPTY = Buffer.alloc(0);
const DATA = Buffer.from('data:', 'latin1');

/** A whole non-streamed JSON body, held, then rid of its figures. */
export class JsonBodyRedactor implements BodyRedactor {
  readonly streams = false;
  private parts: Buffer[] = [];
  private bytes = 0;
  get held(): number {
    return this.bytes;
  }
  push(chunk: Buffer): Buffer | null {
    if (this.bytes + chunk.length > REDACT_HOLD_BYTES) return null;
    this.bytes += chunk.length;
    this.parts.push(chunk);
    return EMPTY;
  }
  end(): Buffer | null {
    const body = this.parts.length === 1 ? this.parts[0]! : Buffer.concat(this.parts, this.bytes);
    this.parts = [];
    this.bytes = 0;
    return body.length === 0 ? body : redactJson(body);
  }
}

/**
 * A server-sent event stream, line by line: a `data:` line that may carry a figure is parsed and
 * written again without it (a line that does not parse is dropped); every other byte passes as it
 * came. A line cut between chunks is held until its newline.
 */
export class SseRedactor implements BodyRedactor {
  readonly streams = true;
  private carry: Buffer | null = null;
  get held(): number {
    return this.carry?.length ?? 0;
  }

  push(chunk: Buffer): Buffer | null {
    const b = this.carry === null ? chunk : Buffer.concat([this.carry, chunk]);
    const nl = b.lastIndexOf(10);
    if (nl < 0) {
      if (b.length > REDACT_HOLD_BYTES) return null;
      this.carry = b;
      return EMPTY;
    }
    this.carry = nl + 1 < b.length ? Buffer.from(b.subarray(nl + 1)) : null;
    if (this.carry !== null && this.carry.length > REDACT_HOLD_BYTES) return null;
    return this.lines(b, nl + 1);
  }

  end(): Buffer | null {
    const rest = this.carry;
    this.carry = null;
    return rest === null ? EMPTY : this.lines(rest, rest.length);
  }

  /** The lines of b[0, end) with the figures taken out of the data lines that may carry them. */
  private lines(b: Buffer, end: number): Buffer {
    if (!mayCarry(b, 0, end)) return end === b.length ? b : b.subarray(0, end);
    const out: Buffer[] = [];
    let from = 0;
    while (from < end) {
      let to = b.indexOf(10, from);
      to = to < 0 || to >= end ? end : to + 1;
      out.push(this.line(b.subarray(from, to)));
      from = to;
    }
    return Buffer.concat(out);
  }

  private line(l: Buffer): Buffer {
    if (l.length < DATA.length || !l.subarray(0, DATA.length).equals(DATA) || !mayCarry(l)) return l;
    let stop = l.length;
    if (stop > 0 && l[stop - 1] === 10) stop--;
    if (stop > 0 && l[stop - 1] === 13) stop--;
    let start = DATA.length;
    if (l[start] === 32) start++;
    const text = l.subarray(start, stop);
    const json = redactJson(text);
    if (json === null) return EMPTY;
    if (json === text) return l;
    return Buffer.concat([l.subarray(0, start), json, l.subarray(stop)]);
  }
}

/** The redactor of a response to a key not trusted: line by line for a stream, held whole otherwise. */
export function bodyRedactor(sse: boolean): BodyRedactor {
  return sse ? new SseRedactor() : new JsonBodyRedactor();
}

/**
 * Paths whose answers carry no cache figure and may be large (embeddings, rerank): passed as they
 * come, never held. Query strings are ignored.
 */
export function redactsPath(path: string): boolean {
  const q = path.indexOf('?');
  const p = q < 0 ? path : path.slice(0, q);
  return p !== '/v1/embeddings' && p !== '/v1/rerank' && p !== '/v1/reranking';
}

/** The values of `id_slot` a request may carry: none, null, or -1 (llama-server's own "any free slot"). */
export function picksSlot(body: Readonly<Record<string, unknown>>): boolean {
  if (!('id_slot' in body)) return false;
  const v = body['id_slot'];
  return v !== null && v !== -1;
}
