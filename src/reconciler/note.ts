/** Something a transition decided that the shell logs (object-first, like pino). */
export interface Note {
  readonly level: 'debug' | 'info' | 'warn' | 'error';
  readonly msg: string;
  readonly fields: Readonly<Record<string, unknown>>;
}

/** Logs what a transition decided, each note at its level, object-first. */
export function logNotes(log: { [L in Note['level']]: (fields: object, msg: string) => void }, notes: readonly Note[]): void {
  for (const n of notes) log[n.level](n.fields, n.msg);
}
