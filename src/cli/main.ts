/** llmgw's command dispatcher. Each command returns its exit status. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { isLlmgwError, isUsageError } from '../errors/catalogue.js';
import { packageRoot } from '../util/package-root.js';
import { processIo, type Io } from './io.js';

const usage = `usage: llmgw <command> [options]

commands:
  validate [DIR | --rev REV]          check a fleet repo (exit 0 valid, 2 invalid)
  plan --base REV --head REV [DIR]    what merging head would do (exit 0 no change, 1 changes, 2 error)
  ctl status|models|replicas|nodes|retry|restart|logs
                                      talk to a running controller's admin API (exit 0 ok, 1 failed, 2 usage)
  serve [--config FILE] [--local]     run the controller, router and admin API (npm start: --local)
  help                                this text
  version                             print the version

Run \`llmgw <command> --help\` for a command's options.`;

type Command = (argv: readonly string[], io: Io) => Promise<number>;

/** Each command is imported when it runs: `validate` does not load serve's fastify, etcd or ssh2. */
const commands: Record<string, () => Promise<Command>> = {
  validate: async () => (await import('./validate.js')).validateCommand,
  plan: async () => (await import('./plan.js')).planCommand,
  ctl: async () => (await import('./ctl.js')).ctlCommand,
  serve: async () => {
    // before serve's modules load (the young generation grows while they do): src/serve/heap-sizing.ts
    (await import('../serve/heap-sizing.js')).sizeHeap();
    return (await import('./serve.js')).serveCommand;
  },
};

export async function run(argv: readonly string[], io: Io = processIo): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === 'help' || name === '--help' || name === '-h') {
    io.out(usage);
    return name === undefined ? 2 : 0;
  }
  if (name === 'version' || name === '--version') {
    const pkg = JSON.parse(readFileSync(join(packageRoot, 'package.json'), 'utf8')) as { version: string };
    io.out(pkg.version);
    return 0;
  }
  const load = commands[name];
  if (!load) {
    io.err(`llmgw: unknown command "${name}"\n\n${usage}`);
    return 2;
  }
  try {
    return await (await load())(rest, io);
  } catch (e) {
    if (isUsageError(e)) {
      io.err(`llmgw ${name}: ${e.message}`);
      return 2;
    }
    if (isLlmgwError(e)) {
      io.err(`llmgw ${name}: ${e.message} [${e.code}]\n    hint: ${e.reason.hint}`);
      return 2;
    }
    throw e;
  }
}
