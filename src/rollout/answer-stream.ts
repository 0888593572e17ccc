/**
 * A check's streamed answer put back together (#34, item 2). Pure: fed the body's text as it comes,
 * it reads the server-sent events of an OpenAI stream and keeps the answer's text — chat:
 * `choices[0].delta.content`; /v1/completions: `choices[0].text` — and says when the first content
 * came, so the check's TTFT is measured there, not at the headers. An error event
 * (`data: {"error": …}`, which llama-server sends when a stream fails) is kept as the stream's error.
 * Text beyond MAX_ANSWER_CHARS is not kept (`tooLarge`).
 */

/** The most text a check's answer may have (characters). A check asks for a short answer. */
export const MAX_ANSWER_CHARS = 1 << 20;

export class AnswerStream {
  /** The text so far. */
  text = '';
  /** The stream's error event's message, when it sent one. */
  error: string | null = null;
  /** `data: [DONE]` came. */
  done = false;
  /** The text reached MAX_ANSWER_CHARS; what came after is not kept. */
  tooLarge = false;
  private pending = '';

  /**
   * Feeds a piece of the body; true when this piece brought the first content (the caller's TTFT).
   * Events are read once complete (after their blank line).
   */
  push(chunk: string): boolean {
    const before = this.text.length;
    this.pending += chunk;
    for (;;) {
      const m = /\r?\n\r?\n/.exec(this.pending);
      if (m === null) break;
      this.event(this.pending.slice(0, m.index));
      this.pending = this.pending.slice(m.index + m[0].length);
    }
    return before === 0 && this.text.length > 0;
  }

  /** The body ended: reads an event left without its blank line. True when that brought the first content. */
  end(): boolean {
    const rest = this.pending;
    this.pending = '';
    const before = this.text.length;
    if (rest.trim() !== '') this.event(rest);
    return before === 0 && this.text.length > 0;
  }

  private event(block: string): void {
    const data: string[] = [];
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith('data:')) data.push(line.slice(line[5] === ' ' ? 6 : 5));
    }
    if (data.length === 0) return;
    const payload = data.join('\n');
    if (payload.trim() === '[DONE]') {
      this.done = true;
      return;
    }
    let json: unknown;
    try {
      json = JSON.parse(payload) as unknown;
    } catch {
      return; // not JSON: nothing of the answer (llama-server sends none such)
    }
    if (typeof json !== 'object' || json === null) return;
    const err = (json as { error?: unknown }).error;
    if (err !== undefined && err !== null) {
      const message = typeof err === 'object' ? (err as { message?: unknown }).message : err;
      this.error = typeof message === 'string' ? message : JSON.stringify(err);
      return;
    }
    this.add(contentOf(json));
  }

  private add(piece: string | null): void {
    if (piece === null || piece === '' || this.tooLarge) return;
    const room = MAX_ANSWER_CHARS - this.text.length;
    if (piece.length > room) {
      this.text += piece.slice(0, room);
      this.tooLarge = true;
    } else this.text += piece;
  }
}

/** The content of one chunk (a stream's event) or of a whole JSON answer: chat's delta or message content, or a completion's text. */
export function contentOf(json: unknown): string | null {
  const choices = (json as { choices?: unknown }).choices;
  if (!Array.isArray(choices) || choices.length === 0) return null;
  const c = choices[0] as { delta?: { content?: unknown }; message?: { content?: unknown }; text?: unknown } | null;
  if (c === null || typeof c !== 'object') return null;
  for (const v of [c.delta?.content, c.message?.content, c.text]) if (typeof v === 'string') return v;
  return null;
}
