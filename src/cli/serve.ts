/** `llmgw serve` — the controller: git sync, reconciler, router and admin API in one process. */
import { join, resolve } from 'node:path';
import { usageError } from '../errors/catalogue.js';
import { parse } from './args.js';
import type { Io } from './io.js';
import { readConfigFile, resolveConfig, SETTINGS, type SettingName } from '../serve/config.js';
import { createLogger, serve } from '../serve/serve.js';
import { effectiveLogFormat, logDestination } from '../serve/log-format.js';
import { SecretFileError } from '../serve/state-secrets.js';

export const serveUsage = `usage: llmgw serve [--config FILE] [options]

Runs the controller: syncs the fleet repo, reconciles nodes, serves the OpenAI router and the
admin API (with /metrics). Settings come from flags, else env vars, else the config file
(YAML, keys as below). SIGTERM shuts down gracefully; replicas keep running and are adopted
by the next start.

${Object.values(SETTINGS)
  .map((s) => `  --${s.flag.padEnd(20)} ${s.env.padEnd(26)} ${s.help}`)
  .join('\n')}
  --no-router-auth         LLMGW_NO_ROUTER_AUTH=1     serve the router without API keys (local single-user only)
  --no-admin-auth          LLMGW_NO_ADMIN_AUTH=1      serve the admin API without a token (local single-user only)
  --unsafe-listen-without-auth  LLMGW_UNSAFE_LISTEN_WITHOUT_AUTH=1  let a port with authentication off listen beyond
                                                      loopback (refused otherwise; a warning is logged)
  --local                                             run the bundled local demo fleet (what \`npm start\` does):
                                                      builds llama-server once, writes tiny models, creates
                                                      .llmgw/local/fleet (LLMGW_LOCAL_HOME moves it)`;

export async function serveCommand(argv: readonly string[], io: Io): Promise<number> {
  const options = Object.fromEntries(Object.values(SETTINGS).map((s) => [s.flag, { type: 'string' as const }]));
  const { values, positionals } = parse(argv, {
    ...options,
    config: { type: 'string', short: 'c' },
    'no-router-auth': { type: 'boolean' },
    'no-admin-auth': { type: 'boolean' },
    'unsafe-listen-without-auth': { type: 'boolean' },
    local: { type: 'boolean' },
    help: { type: 'boolean', short: 'h' },
  });
  if (values.help) {
    io.out(serveUsage);
    return 0;
  }
  if (positionals.length) throw usageError(`unexpected argument ${positionals[0]}`);
  const flags: Partial<Record<SettingName, string>> & { noRouterAuth?: boolean; noAdminAuth?: boolean; unsafeListenWithoutAuth?: boolean } = {};
  for (const [name, s] of Object.entries(SETTINGS) as [SettingName, (typeof SETTINGS)[SettingName]][]) {
    const v = (values as Record<string, unknown>)[s.flag];
    if (typeof v === 'string') flags[name] = v;
  }
  if (values['no-router-auth']) flags.noRouterAuth = true;
  if (values['no-admin-auth']) flags.noAdminAuth = true;
  if (values['unsafe-listen-without-auth']) flags.unsafeListenWithoutAuth = true;
  if (values.local) {
    // The bundled local fleet (npm start): one machine, no SSH, keys off, loopback only.
    const home = resolve(io.cwd, io.env.LLMGW_LOCAL_HOME ?? '.llmgw/local');
    const { prepareLocalFleet } = await import('../demo/prepare.js');
    const local = await prepareLocalFleet(home, (line) => io.err(line));
    flags.fleet ??= local.fleetDir;
    flags.stateDir ??= local.stateDir;
    flags.secretsDir ??= join(home, 'secrets');
    flags.noRouterAuth = true;
    flags.noAdminAuth = true;
  }
  const configPath = (values.config as string | undefined) ?? io.env.LLMGW_CONFIG;
  const cfg = resolveConfig({ flags, env: io.env, file: configPath ? readConfigFile(configPath) : {}, cwd: io.cwd });
  const format = effectiveLogFormat(cfg.logFormat, process.stdout.isTTY === true);
  const log = createLogger(cfg.logLevel, await logDestination(format, process.stdout.isTTY === true && !io.env.NO_COLOR));
  let served: Awaited<ReturnType<typeof serve>>;
  try {
    served = await serve(cfg, log);
  } catch (e) {
    // a secret file that is empty or malformed: the message names the file and the fix
    if (e instanceof SecretFileError) throw usageError(e.message);
    throw e;
  }
  if (values.local) {
    io.err(
      [
        '',
        `llmgw is serving the local fleet (${flags.fleet}).`,
        `  router (OpenAI API): ${served.routerUrl}/v1   admin API: ${served.adminUrl}`,
        '  try, in another shell:',
        `    curl ${served.routerUrl}/v1/chat/completions -H 'content-type: application/json' \\`,
        `      -d '{"model":"demo","messages":[{"role":"user","content":"hi"}],"max_tokens":16}'`,
        `    npx llmgw ctl status${served.adminUrl === 'http://127.0.0.1:8081' ? '' : ` --server ${served.adminUrl}`}`,
        '  the demo model is ready in seconds; kev-demo gets parked after 5 failed starts (about 30 s);',
        '  huge-demo is unplaceable. Ctrl-C stops llmgw (replicas keep running and are adopted next time).',
        '',
      ].join('\n'),
    );
  }
  if (served.adminTokenFile) io.err(`llmgw: admin token written to ${served.adminTokenFile} (llmgw ctl --token-file ${served.adminTokenFile})`);
  await new Promise<void>((resolve) => {
    const stop = (signal: string): void => {
      log.info({ signal }, 'signal received');
      void served.close().then(resolve, resolve);
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });
  return 0;
}
