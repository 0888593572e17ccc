/**
 * `llmgw ctl events [--model M] [--follow]`: the controller's recent events (GET /admin/v1/events),
 * oldest first like a log; --follow then reads the event stream (/admin/v1/events/stream) and
 * prints each as it comes, reconnecting by itself (a controller restart, a failover) and asking for
 * what it missed with Last-Event-ID.
 */
import { request } from 'undici';
import type { EventJson, EventsJson } from '../wire/events.js';
import { ADMIN_PREFIX, CtlFailure, type AdminClient } from './ctl-client.js';
import type { Io } from './io.js';

/** One line per event: time, kind, model or node, message [code]. */
export function eventLine(e: EventJson): string {
  const what = e.model ?? e.node ?? '-';
  return `${e.at}  ${e.kind.padEnd(17)}  ${what}  ${e.message}${e.code && !e.message.includes(`[${e.code}]`) ? ` [${e.code}]` : ''}`;
}

export interface EventsOptions {
  readonly model?: string;
  readonly limit: number;
  readonly follow: boolean;
  readonly output: 'text' | 'json';
  /** Ends --follow (SIGINT does otherwise). */
  readonly signal?: AbortSignal;
}

export async function ctlEvents(c: AdminClient, io: Io, o: EventsOptions): Promise<number> {
  const q: Record<string, string> = { limit: String(o.limit), ...(o.model !== undefined ? { model: o.model } : {}) };
  const r = await c.call<EventsJson>('GET', '/events', { query: q });
  const print = (e: EventJson): void => io.out(o.output === 'json' ? JSON.stringify(e) : eventLine(e));
  if (!o.follow) {
    if (o.output === 'json') io.out(JSON.stringify(r.body, null, 2));
    else if (r.body.events.length === 0) io.out('no events yet');
    else for (const e of [...r.body.events].reverse()) print(e);
    return 0;
  }
  for (const e of [...r.body.events].reverse()) print(e);
  let last = `${r.body.boot}:${r.body.last}`;
  let wait = 500;
  while (!o.signal?.aborted) {
    try {
      last = await readStream(c, o, last, (e) => {
        wait = 500;
        print(e);
      });
    } catch (e) {
      if (o.signal?.aborted) break;
      if (e instanceof CtlFailure && e.status === 401) throw e;
      io.err(`llmgw ctl: the event stream broke (${e instanceof Error ? e.message : String(e)}); reconnecting`);
    }
    if (o.signal?.aborted) break;
    await new Promise((res) => setTimeout(res, wait));
    wait = Math.min(5000, wait * 2);
  }
  return 0;
}

/** Reads the stream until it ends; returns the id (BOOT:SEQ) of the last event seen. */
async function readStream(c: AdminClient, o: EventsOptions, after: string, onEvent: (e: EventJson) => void): Promise<string> {
  const t = c.target;
  const qs = o.model !== undefined ? `?${new URLSearchParams({ model: o.model })}` : '';
  const headers: Record<string, string> = { accept: 'text/event-stream', 'last-event-id': after };
  if (t.token) headers.authorization = `Bearer ${t.token}`;
  const res = await request(`${t.server}${ADMIN_PREFIX}/events/stream${qs}`, { headers, dispatcher: c.dispatcher, bodyTimeout: 0, ...(o.signal ? { signal: o.signal } : {}) });
  if (res.statusCode !== 200) {
    const text = await res.body.text();
    let err: { code?: string; message?: string; hint?: string } = {};
    try {
      err = (JSON.parse(text) as { error: typeof err }).error ?? {};
    } catch {
      // not the admin API's JSON
    }
    throw new CtlFailure(err.message ?? `HTTP ${res.statusCode}`, err.code ?? 'CTL_BAD_ANSWER', err.hint ?? '', res.statusCode);
  }
  let last = after;
  let buf = '';
  for await (const chunk of res.body) {
    buf += (chunk as Buffer).toString('utf8');
    let end: number;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const id = /^id: (.+)$/m.exec(block)?.[1];
      const data = block
        .split('\n')
        .filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).trim())
        .join('\n');
      if (!/^event: fleet-event$/m.test(block) || !data) continue;
      const e = JSON.parse(data) as EventJson;
      if (id) last = id;
      onEvent(e);
    }
  }
  return last;
}
