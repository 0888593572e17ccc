/** What a command may touch of its process, so tests can run commands in-process. */
export interface Io {
  out(line: string): void;
  err(line: string): void;
  readonly cwd: string;
  readonly env: NodeJS.ProcessEnv;
  /** Ends a command that runs until stopped (`ctl events --follow`); the process's SIGINT otherwise. */
  readonly signal?: AbortSignal;
}

export const processIo: Io = {
  out: (l) => process.stdout.write(l.endsWith('\n') ? l : `${l}\n`),
  err: (l) => process.stderr.write(l.endsWith('\n') ? l : `${l}\n`),
  cwd: process.cwd(),
  env: process.env,
};
