/**
 * Prompt tokens a response says were evaluated and taken from the prompt cache, read from the end of
 * the response body without parsing it: llama-server puts `timings` (`cache_n`: prompt tokens reused
 * from the cache, `prompt_n`: prompt tokens evaluated) last in a JSON response and in the last event
 * of a stream; without timings, OpenAI-style `usage` (`prompt_tokens`, with
 * `prompt_tokens_details.cached_tokens`) is used. Pure.
 */

/** Bytes of the response's end kept for this (the last event of a stream included). */
export const USAGE_TAIL_BYTES = 4096;

export interface PromptTokens {
  readonly evaluated: number;
  readonly cached: number;
}

const FIELDS = {
  prompt_n: /"prompt_n"\s*:\s*(\d+)/,
  cache_n: /"cache_n"\s*:\s*(\d+)/,
  prompt_tokens: /"prompt_tokens"\s*:\s*(\d+)/,
  cached_tokens: /"cached_tokens"\s*:\s*(\d+)/,
} as const;

const int = (s: string, name: keyof typeof FIELDS): number | null => {
  const m = FIELDS[name].exec(s);
  return m ? Number(m[1]) : null;
};

/** The counts in a response's last bytes, or null when it has none. */
export function promptTokensOf(tail: string): PromptTokens | null {
  const t = tail.lastIndexOf('"timings"');
  if (t >= 0) {
    const end = tail.indexOf('}', t);
    const timings = tail.slice(t, end < 0 ? undefined : end);
    const evaluated = int(timings, 'prompt_n');
    const cached = int(timings, 'cache_n');
    if (evaluated !== null) return { evaluated, cached: cached ?? 0 };
  }
  const u = tail.lastIndexOf('"usage"');
  if (u >= 0) {
    const usage = tail.slice(u);
    const prompt = int(usage, 'prompt_tokens');
    if (prompt !== null) {
      const cached = Math.min(int(usage, 'cached_tokens') ?? 0, prompt);
      return { evaluated: prompt - cached, cached };
    }
  }
  return null;
}
