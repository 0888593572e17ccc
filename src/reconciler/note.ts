/** Something a transition decided that the shell logs (object-first, like pino). */
export interface Note {
  readonly level: 'debug' | 'info' | 'warn' | 'error';
  readonly msg: string;
  readonly fields: Readonly<Record<string, unknown>>;
}
