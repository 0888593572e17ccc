/**
 * `llmgw ctl` — looks at and steers a running controller through its admin API.
 * Exit status: 0 ok, 1 failed (the request failed, or a retry/restart did not succeed), 2 usage.
 */
import { hostname } from 'node:os';
import { MODEL_PHASES, type ModelsJson, type NodesJson, type ReplicasJson, type RestartJson, type RetryJson, type RolloutOneJson, type RolloutOverrideJson, type StatusJson, type LogsJson } from '../wire/shape.js';
import { formatDuration, parseDuration } from '../fleet-spec/units.js';
import { usageError } from '../errors/catalogue.js';
import { oneOf, parse } from './args.js';
import { AdminClient, CtlFailure, DEFAULT_SERVER, resolveTarget } from './ctl-client.js';
import { ATTENTION_PHASES, renderModels, renderNodes, renderReplicas, renderStatus, STATUS_ATTENTION_LIMIT, STATUS_HEALTHY_LIMIT } from '../format/ctl-format.js';
import type { Io } from './io.js';
import type { UsageJson } from '../wire/usage.js';
import { renderUsage } from './usage-format.js';
import { ctlEvents } from './ctl-events.js';
import { renderOverride, renderRollout } from '../format/rollout-format.js';

export const ctlUsage = `usage: llmgw ctl <command> [options]

commands:
  status                          fleet summary; parked and unplaceable models first, with reasons
  models [--phase P[,P]] [--name GLOB]
                                  models: phase, ready/wanted now, failures, reason
  replicas                        every replica: model, node, phase, age, endpoint
  nodes                           nodes: reachable, free memory, engines, problems
  retry MODEL                     unpark MODEL (or clear its backoff) and start it again;
                                  a held or rolled-back rollout runs again from its checks
  rollout MODEL                   MODEL's rollout: phase, both revisions, step and share,
                                  time left, both arms' live figures, the verdict
  rollout promote|abort MODEL     override the verdict: promote the revision under test,
                                  or roll it back (the stable revision serves)
  restart REPLICA... | --model M | --all
                                  replace replicas surge-first; waits until done
  logs REPLICA [-n|--lines N]     the replica's log tail (default 100 lines)
  usage [--since T] [--key K] [--model M]
                                  per API key × model: requests, errors, prompt/cached/
                                  completion tokens, p50 latency (T: 15m, 24h or ISO time)
  events [--model M] [-f|--follow] [-n|--lines N]
                                  recent events (starts, failures, parks, retries, rejected
                                  commits, leader changes), oldest first; --follow goes on live

options:
  --server URL        the admin API (env LLMGW_SERVER; default ${DEFAULT_SERVER})
  --token TOKEN       the admin token (env LLMGW_ADMIN_TOKEN); or --token-file FILE
                      (env LLMGW_ADMIN_TOKEN_FILE)
  --config FILE       JSON {"server", "token" | "tokenFile", "ca"} (env LLMGW_CONFIG;
                      default ~/.config/llmgw/ctl.json)
  --ca FILE           trust this CA for an https:// server (env LLMGW_CA)
  -o, --output FMT    text (default) or json (the admin API's answer)
  --timeout DURATION  restart: how long to wait, e.g. 90s, 15m (default 15m)
  --no-wait           restart: return once the restart is requested

The server, token and CA come from the flags, else the environment, else the config file.

Exit status: 0 ok, 1 failed (request failed, or retry/restart did not succeed), 2 usage.`;

const DEFAULT_RESTART_TIMEOUT_MS = 15 * 60_000;
/** One long-poll request of a restart wait. */
const RESTART_POLL_S = 30;
/** A retry or restart answers after a whole pass (sync, observe every node, apply). */
const PASS_TIMEOUT_MS = 5 * 60_000;

function failure(io: Io, e: CtlFailure): number {
  io.err(`llmgw ctl: ${e.message} [${e.code}]${e.hint ? `\n    hint: ${e.hint}` : ''}`);
  return 1;
}

const json = (v: unknown): string => JSON.stringify(v, null, 2);

export async function ctlCommand(argv: readonly string[], io: Io): Promise<number> {
  const { values, positionals } = parse(argv, {
    server: { type: 'string' },
    token: { type: 'string' },
    'token-file': { type: 'string' },
    config: { type: 'string' },
    ca: { type: 'string' },
    output: { type: 'string', short: 'o' },
    lines: { type: 'string', short: 'n' },
    model: { type: 'string' },
    phase: { type: 'string' },
    name: { type: 'string' },
    since: { type: 'string' },
    key: { type: 'string' },
    all: { type: 'boolean' },
    timeout: { type: 'string' },
    'no-wait': { type: 'boolean' },
    follow: { type: 'boolean', short: 'f' },
    help: { type: 'boolean', short: 'h' },
  });
  const [sub, ...args] = positionals;
  if (values.help || sub === 'help') {
    io.out(ctlUsage);
    return 0;
  }
  if (sub === undefined) {
    io.err(ctlUsage);
    return 2;
  }
  const output = oneOf('output', values.output, ['text', 'json'] as const, 'text');

  // options that belong to one command only
  const only = (names: readonly (keyof typeof values)[], ...cmds: string[]): void => {
    if (sub !== undefined && cmds.includes(sub)) return;
    for (const n of names) if (values[n] !== undefined) throw usageError(`--${String(n)} only applies to ${cmds.map((c) => `\`llmgw ctl ${c}\``).join(' and ')}`);
  };
  only(['lines'], 'logs', 'events');
  only(['phase', 'name'], 'models');
  only(['model'], 'restart', 'usage', 'events');
  only(['all', 'timeout', 'no-wait'], 'restart');
  only(['since', 'key'], 'usage');
  only(['follow'], 'events');
  const noArgs = (): void => {
    if (args.length) throw usageError(`\`llmgw ctl ${sub}\` takes no arguments (got ${args.join(' ')})`);
  };

  // validate the command line completely before talking to anyone
  let run: (c: AdminClient) => Promise<number>;
  switch (sub) {
    case 'status':
      noArgs();
      run = async (c) => {
        // At any fleet size: the models that need attention (a page), and a page of the healthy ones.
        const [s, attention, healthy] = await Promise.all([
          c.call<StatusJson>('GET', '/status'),
          c.call<ModelsJson>('GET', `/models?phase=${ATTENTION_PHASES.join(',')}&limit=${STATUS_ATTENTION_LIMIT}`),
          c.call<ModelsJson>('GET', `/models?phase=ready,idle&limit=${STATUS_HEALTHY_LIMIT}`),
        ]);
        io.out(output === 'json' ? json(s.body) : renderStatus(s.body, attention.body, healthy.body));
        return 0;
      };
      break;
    case 'models':
      noArgs();
      run = async (c) => {
        const q = new URLSearchParams();
        if (values.phase !== undefined) {
          for (const p of values.phase.split(',')) oneOf('phase', p, MODEL_PHASES, 'ready');
          q.set('phase', values.phase);
        }
        if (values.name !== undefined) q.set('name', values.name);
        const r = await c.call<ModelsJson>('GET', `/models${q.size ? `?${q}` : ''}`);
        io.out(output === 'json' ? json(r.body) : renderModels(r.body));
        return 0;
      };
      break;
    case 'replicas':
      noArgs();
      run = async (c) => {
        const r = await c.call<ReplicasJson>('GET', '/replicas');
        io.out(output === 'json' ? json(r.body) : renderReplicas(r.body));
        return 0;
      };
      break;
    case 'nodes':
      noArgs();
      run = async (c) => {
        const r = await c.call<NodesJson>('GET', '/nodes');
        io.out(output === 'json' ? json(r.body) : renderNodes(r.body));
        return 0;
      };
      break;
    case 'usage':
      noArgs();
      run = async (c) => {
        const query: Record<string, string> = {};
        if (values.since !== undefined) query.since = values.since;
        if (values.key !== undefined) query.key = values.key;
        if (values.model !== undefined) query.model = values.model;
        const r = await c.call<UsageJson>('GET', '/usage', { query });
        io.out(output === 'json' ? json(r.body) : renderUsage(r.body));
        return 0;
      };
      break;
    case 'retry': {
      if (args.length !== 1) throw usageError('usage: llmgw ctl retry MODEL');
      const model = args[0]!;
      run = async (c) => {
        const r = await c.call<RetryJson>('POST', `/models/${encodeURIComponent(model)}/retry`, { timeoutMs: PASS_TIMEOUT_MS });
        io.out(output === 'json' ? json(r.body) : r.body.message);
        return 0;
      };
      break;
    }
    case 'rollout': {
      const override = args.length === 2 && (args[0] === 'promote' || args[0] === 'abort') ? args[0] : null;
      // `rollout promote` alone names no model (a model called so is shown by its alias, or by the admin API)
      if (!((args.length === 1 && args[0] !== 'promote' && args[0] !== 'abort') || override)) throw usageError('usage: llmgw ctl rollout MODEL | llmgw ctl rollout promote|abort MODEL');
      const model = args[args.length - 1]!;
      const path = `/models/${encodeURIComponent(model)}/rollout`;
      run = async (c) => {
        if (override === null) {
          const r = await c.call<RolloutOneJson>('GET', path);
          io.out(output === 'json' ? json(r.body) : renderRollout(r.body));
          return 0;
        }
        const r = await c.call<RolloutOverrideJson>('POST', `${path}/${override}`, { body: { by: whoAmI(io.env) }, timeoutMs: PASS_TIMEOUT_MS });
        io.out(output === 'json' ? json(r.body) : renderOverride(r.body));
        return 0;
      };
      break;
    }
    case 'logs': {
      if (args.length !== 1) throw usageError('usage: llmgw ctl logs REPLICA [--lines N]');
      const replica = args[0]!;
      const lines = values.lines === undefined ? 100 : Number(values.lines);
      if (!Number.isInteger(lines) || lines < 1 || lines > 10_000) throw usageError(`--lines must be a whole number from 1 to 10000 (got ${JSON.stringify(values.lines)})`);
      run = async (c) => {
        const r = await c.call<LogsJson>('GET', `/replicas/${encodeURIComponent(replica)}/logs`, { query: { lines: String(lines) } });
        io.out(output === 'json' ? json(r.body) : r.body.log.replace(/\n$/, ''));
        return 0;
      };
      break;
    }
    case 'events': {
      noArgs();
      const limit = values.lines === undefined ? 50 : Number(values.lines);
      if (!Number.isInteger(limit) || limit < 1 || limit > 100_000) throw usageError(`--lines must be a whole number from 1 to 100000 (got ${JSON.stringify(values.lines)})`);
      run = (c) => ctlEvents(c, io, { ...(values.model !== undefined ? { model: values.model } : {}), limit, follow: values.follow === true, output, ...(io.signal ? { signal: io.signal } : {}) });
      break;
    }
    case 'restart': {
      const forms = [args.length > 0, values.model !== undefined, values.all === true].filter(Boolean).length;
      if (forms !== 1) throw usageError('name what to restart: replica ids, --model MODEL or --all (exactly one)');
      const body = args.length ? { replicas: args } : values.model !== undefined ? { model: values.model } : { all: true };
      const timeoutMs = values.timeout === undefined ? DEFAULT_RESTART_TIMEOUT_MS : parseDuration(/^[0-9.]+$/.test(values.timeout) ? Number(values.timeout) : values.timeout);
      if (timeoutMs === null) throw usageError(`--timeout must be a duration such as 90s or 15m (got ${JSON.stringify(values.timeout)})`);
      const wait = !values['no-wait'];
      run = (c) => restart(c, io, output, body, wait, timeoutMs);
      break;
    }
    default:
      throw usageError(`unknown ctl command "${sub}"; run \`llmgw ctl --help\``);
  }

  const target = resolveTarget({ server: values.server, token: values.token, tokenFile: values['token-file'], config: values.config, ca: values.ca }, io.env, io.cwd);
  const client = new AdminClient(target);
  try {
    return await run(client);
  } catch (e) {
    if (e instanceof CtlFailure) return failure(io, e);
    throw e;
  } finally {
    await client.close().catch(() => undefined);
  }
}

/** Who overrides a rollout, as the verdict and the controller's log say it: "llmgw ctl (alice@laptop)". Printable, bounded. */
export function whoAmI(env: NodeJS.ProcessEnv, host: string = hostname()): string {
  const user = env.USER ?? env.LOGNAME ?? env.USERNAME;
  const who = `${user ? `${user}@` : ''}${host}`.replace(/[^\x21-\x7e]/g, '?').slice(0, 100);
  return who ? `llmgw ctl (${who})` : 'llmgw ctl';
}

async function restart(
  c: AdminClient,
  io: Io,
  output: 'text' | 'json',
  body: { replicas: string[] } | { model: string } | { all: boolean },
  wait: boolean,
  timeoutMs: number,
): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  const chunk = (): string => String(Math.max(0, Math.min(RESTART_POLL_S, (deadline - Date.now()) / 1000)));
  const first = await c.call<RestartJson>('POST', '/restart', {
    body,
    query: wait ? { wait: 'true', timeout: chunk() } : {},
    timeoutMs: PASS_TIMEOUT_MS + RESTART_POLL_S * 1000,
  });
  let { ids, done } = first.body;
  const what = 'model' in body ? `of ${body.model} ` : '';
  if (ids.length === 0) {
    io.out(output === 'json' ? json(first.body) : `nothing to restart: no running replicas ${what}`.trimEnd());
    return 0;
  }
  const list = ids.join(', ');
  if (!wait) {
    io.out(output === 'json' ? json(first.body) : `restart requested for ${ids.length === 1 ? 'replica' : `${ids.length} replicas`} ${what}(${list}); \`llmgw ctl replicas\` shows progress`);
    return 0;
  }
  if (output === 'text' && !done) io.out(`restarting ${list} surge-first (each new replica starts before the old one stops)…`);
  while (!done && Date.now() < deadline) {
    const r = await c.call<RestartJson>('GET', '/restart', { query: { ids: ids.join(','), wait: 'true', timeout: chunk() }, timeoutMs: RESTART_POLL_S * 1000 + 30_000 });
    ({ ids, done } = r.body);
  }
  if (output === 'json') io.out(json({ ids, done }));
  if (!done) {
    io.err(`llmgw ctl: the restart of ${list} did not finish within ${formatDuration(timeoutMs)}; it goes on in the controller\n    hint: \`llmgw ctl replicas\` and \`llmgw ctl status\` show where it stands; the old replicas serve until the new ones are ready`);
    return 1;
  }
  if (output === 'text') io.out(`restarted ${ids.length === 1 ? 'replica' : `${ids.length} replicas`} ${what}(${list})`);
  return 0;
}
