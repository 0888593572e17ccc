/**
 * Prompt tokens a response says were evaluated and taken from the prompt cache, read from the end of
 * the response body without parsing it: llama-server puts `timings` (`cache_n`: prompt tokens reused
 * from the cache, `prompt_n`: prompt tokens evaluated) last in a JSON response and in the last event
 * of a stream; without timings, OpenAI-style `usage` (`prompt_tokens`, with
 * `prompt_tokens_details.cached_tokens`) is used. Pure.
 */
import type { TokenUsage } from '../metrics/ports.js';

/** Bytes of the response's end kept for this (the last event of a stream included). */
export const USAGE_TAIL_BYTES = 4096;

export interface PromptTokens {
  readonly evaluated: number;
  readonly cached: number;
}

const FIELDS = {
  prompt_n: /"prompt_n"\s*:\s*(\d+)/,
  prompt_ms: /"prompt_ms"\s*:\s*(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)/,
  predicted_ms: /"predicted_ms"\s*:\s*(\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)/,
  cache_n: /"cache_n"\s*:\s*(\d+)/,
  prompt_tokens: /"prompt_tokens"\s*:\s*(\d+)/,
  cached_tokens: /"cached_tokens"\s*:\s*(\d+)/,
} as const;

const num = (s: string, name: keyof typeof FIELDS): number | null => {
  const m = FIELDS[name].exec(s);
  return m ? Number(m[1]) : null;
};

/** The `timings` object of a response's last bytes (up to its closing brace), or null. */
function timingsIn(tail: string): string | null {
  const t = tail.lastIndexOf('"timings"');
  if (t < 0) return null;
  const end = tail.indexOf('}', t);
  return tail.slice(t, end < 0 ? undefined : end);
}

/** How long a response's request held its slot, from llama-server's timings (prompt evaluation and generation). */
export interface SlotTimes {
  /** Prompt tokens evaluated. */
  readonly promptN: number;
  readonly promptMs: number;
  readonly predictedMs: number;
}

/** The slot times in a response's last bytes, or null when its timings do not have all three. */
export function slotTimesOf(tail: string): SlotTimes | null {
  const timings = timingsIn(tail);
  if (timings === null) return null;
  const promptN = num(timings, 'prompt_n');
  const promptMs = num(timings, 'prompt_ms');
  const predictedMs = num(timings, 'predicted_ms');
  return promptN === null || promptMs === null || predictedMs === null ? null : { promptN, promptMs, predictedMs };
}

/** The counts in a response's last bytes, or null when it has none. */
export function promptTokensOf(tail: string): PromptTokens | null {
  const timings = timingsIn(tail);
  if (timings !== null) {
    const evaluated = num(timings, 'prompt_n');
    const cached = num(timings, 'cache_n');
    if (evaluated !== null) return { evaluated, cached: cached ?? 0 };
  }
  const u = tail.lastIndexOf('"usage"');
  if (u >= 0) {
    const usage = tail.slice(u);
    const prompt = num(usage, 'prompt_tokens');
    if (prompt !== null) {
      const cached = Math.min(num(usage, 'cached_tokens') ?? 0, prompt);
      return { evaluated: prompt - cached, cached };
    }
  }
  return null;
}

const EVENT = Buffer.from('data: {');

/** The stream events (`data: {`) a chunk starts: about one per token. */
export function countEvents(chunk: Buffer): number {
  let n = 0;
  for (let i = chunk.indexOf(EVENT); i >= 0; i = chunk.indexOf(EVENT, i + EVENT.length)) n++;
  return n;
}

export type { TokenUsage, UsageRecord, UsageSink } from '../metrics/ports.js';

export const NO_TOKENS: TokenUsage = Object.freeze({ prompt: 0, cached: 0, completion: 0 });

const USAGE_FIELDS = {
  predicted_n: /"predicted_n"\s*:\s*(\d+)/,
  completion_tokens: /"completion_tokens"\s*:\s*(\d+)/,
  input_tokens: /"input_tokens"\s*:\s*(\d+)/,
  output_tokens: /"output_tokens"\s*:\s*(\d+)/,
  cache_read_input_tokens: /"cache_read_input_tokens"\s*:\s*(\d+)/,
} as const;

const unum = (s: string, name: keyof typeof USAGE_FIELDS): number | null => {
  const m = USAGE_FIELDS[name].exec(s);
  return m ? Number(m[1]) : null;
};

/**
 * The tokens in a response's last bytes (a JSON body, or a stream's last events): llama-server's
 * `timings` (prompt_n, cache_n, predicted_n) first, then OpenAI `usage` (prompt_tokens with
 * prompt_tokens_details.cached_tokens, completion_tokens; embeddings have only prompt_tokens), then
 * Anthropic `usage` (input_tokens, cache_read_input_tokens, output_tokens). Null when none. Pure.
 */
export function usageOf(tail: string): TokenUsage | null {
  const timings = timingsIn(tail);
  if (timings !== null) {
    const prompt = num(timings, 'prompt_n');
    const predicted = unum(timings, 'predicted_n');
    if (prompt !== null && predicted !== null) return { prompt, cached: num(timings, 'cache_n') ?? 0, completion: predicted };
  }
  const u = tail.lastIndexOf('"usage"');
  if (u < 0) return null;
  const usage = tail.slice(u);
  const promptTokens = num(usage, 'prompt_tokens');
  if (promptTokens !== null) {
    const cached = Math.min(num(usage, 'cached_tokens') ?? 0, promptTokens);
    return { prompt: promptTokens - cached, cached, completion: unum(usage, 'completion_tokens') ?? 0 };
  }
  const input = unum(usage, 'input_tokens');
  const output = unum(usage, 'output_tokens');
  if (input === null && output === null) return null;
  return { prompt: input ?? 0, cached: unum(usage, 'cache_read_input_tokens') ?? 0, completion: output ?? 0 };
}

/** Bytes of a request body taken as one prompt token when the replica did not say (about 4 characters a token). */
export const BODY_BYTES_PER_TOKEN = 4;

/**
 * The tokens a request that ended early used (the client went away, the stream was cut): what its
 * last bytes report if they do (a stream's usage or timings events got through), else what was seen —
 * one completion token per stream event passed to the client, and the prompt as the body's bytes
 * ÷ 4 (llama-server evaluates the whole prompt before its first token; none of it taken as cached).
 * Pure.
 */
export function earlyUsageOf(e: { readonly tail: string | null; readonly events: number; readonly bodyBytes: number }): TokenUsage {
  const reported = e.tail !== null ? usageOf(e.tail) : null;
  if (reported !== null && reported.completion >= e.events) return reported;
  return { prompt: reported?.prompt ?? Math.ceil(e.bodyBytes / BODY_BYTES_PER_TOKEN), cached: reported?.cached ?? 0, completion: e.events };
}
