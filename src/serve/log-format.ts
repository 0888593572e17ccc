/**
 * How `llmgw serve` writes its log: JSON lines (pino's own format, for log shippers) or, on a
 * terminal, compact readable lines from pino-pretty (time, level, message, then the fields on the
 * same line). `auto` (the default) picks pretty when stdout is a TTY — `npm start` in a terminal —
 * and JSON otherwise (a pipe, a file, systemd/journald, a container runtime). Redaction happens in
 * pino before either.
 */
import type { DestinationStream } from 'pino';

export const LOG_FORMATS = ['auto', 'json', 'pretty'] as const;
export type LogFormat = (typeof LOG_FORMATS)[number];

export function isLogFormat(v: string): v is LogFormat {
  return (LOG_FORMATS as readonly string[]).includes(v);
}

/** The format `auto` means here. */
export function effectiveLogFormat(format: LogFormat, stdoutIsTty: boolean): 'json' | 'pretty' {
  if (format === 'auto') return stdoutIsTty ? 'pretty' : 'json';
  return format;
}

/** pino's destination for the format: undefined for JSON on stdout (pino's default). pino-pretty loads only for pretty. */
export async function logDestination(format: 'json' | 'pretty', colorize: boolean): Promise<DestinationStream | undefined> {
  if (format === 'json') return undefined;
  const { default: pretty } = await import('pino-pretty');
  return pretty({
    colorize,
    singleLine: true,
    translateTime: 'SYS:HH:MM:ss.l',
    ignore: 'pid,hostname,service',
    // one line per entry: fields (err included) stay on the line, as JSON
    errorLikeObjectKeys: [],
    sync: true,
  });
}
