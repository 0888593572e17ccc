/** Checks across fleet objects: references resolve, names are unique, values make sense together. */
import { isIP } from 'node:net';
import { definitionDigest } from './digest.js';
import type { ModelDraft } from './normalize.js';
import type { ParsedObject } from './load.js';
import type { SchemaKind } from './schemas.js';
import { formatBytes } from './units.js';
import { problem } from './yaml.js';
import { cronProblem, isTimeZone } from './cron.js';
import { checkRollouts } from './rollout.js';
import type { RolloutSpec } from '../rollout/types.js';
import { PLACEMENT_DEFAULT, SCALE_DEFAULTS, type EngineVersionSpec, type PlacementSpec, type AccessKeySpec, type EngineSpec, type FleetSettings, type KeyLimits, type ModelSpec, type NodeSpec, type ProfileSpec, type Problem } from './types.js';
import type { Reasons } from '../errors/catalogue.js';

export interface SpecParts {
  readonly settings: FleetSettings;
  readonly nodes: readonly NodeSpec[];
  readonly engines: readonly EngineSpec[];
  readonly profiles: readonly ProfileSpec[];
  readonly models: readonly ModelDraft[];
  readonly keys: readonly AccessKeySpec[];
  /** access/keys.yaml's per-model limits, by name or alias as written. */
  readonly modelLimits?: Readonly<Record<string, KeyLimits>>;
  readonly objects: readonly ParsedObject[];
  /** The names of every checks/ file, read or not. */
  readonly checkFiles?: ReadonlySet<string>;
}

export interface CheckResult {
  readonly problems: Problem[];
  readonly warnings: Problem[];
  readonly models: ModelSpec[];
  readonly modelNames: Record<string, string>;
  /** Keys with their model references resolved to canonical model names. */
  readonly keys: AccessKeySpec[];
  /** access/keys.yaml's per-model limits by canonical model name. */
  readonly modelLimits: Record<string, KeyLimits>;
  /** fleet.yaml's rollout block, normalized (null: none). */
  readonly fleetRollout: RolloutSpec | null;
}

/** llama-server arguments llmgw sets itself; a profile may not set them in extra_args. */
const MANAGED_ARGS = new Set(['-m', '--model', '--host', '--port', '--api-key', '--api-key-file', '-c', '--ctx-size', '-np', '--parallel', '-t', '--threads', '--embeddings', '--embedding', '--reranking', '--rerank', '-mu', '--model-url', '-hf', '--hf-repo', '-hff', '--hf-file', '--log-file', '-cram', '--cache-ram']);

/**
 * llama-server arguments that take away what llmgw reads of a replica: GET /slots (what it has in
 * flight: a drain before every stop waits on it) and the paths it serves (/health, /slots, the API).
 * With them every drain would wait out drain_grace and then cut what runs. (Their environment forms,
 * LLAMA_ARG_ENDPOINT_SLOTS and LLAMA_ARG_API_PREFIX, are refused with every LLAMA_* of a node's env by its schema.)
 */
const ENDPOINT_ARGS = new Set(['--no-slots', '--api-prefix']);

const MIN_MODEL_MEMORY = 1024 * 1024;
const MAX_MODEL_MEMORY = 16 * 2 ** 40;

export function checkSpec(p: SpecParts): CheckResult {
  const problems: Problem[] = [];
  const warnings: Problem[] = [];
  const obj = (kind: SchemaKind, name: string): ParsedObject | undefined => p.objects.find((o) => o.kind === kind && o.name === name);
  const add = (
    kind: SchemaKind,
    name: string,
    path: (string | number)[],
    code: keyof typeof Reasons,
    message: string,
    hint?: string,
    to: Problem[] = problems,
  ): void => {
    const o = obj(kind, name);
    const file = o?.parsed.file ?? (kind === 'fleet' ? 'fleet.yaml' : kind === 'keys' ? 'access/keys.yaml' : `${kind}s/${name}.yaml`);
    to.push(problem(file, o ? o.parsed.position(path) : null, path.length ? '/' + path.join('/') : '', code, message, hint));
  };

  // fleet.yaml
  if (p.settings.backoff.initialMs > p.settings.backoff.maxMs) {
    add('fleet', 'fleet', ['backoff', 'initial'], 'SPEC_INVALID_VALUE', 'backoff.initial is longer than backoff.max', 'make backoff.initial at most backoff.max');
  }

  // rollout blocks and checks/ (each model's rollout in force, fleet.yaml's default filled in)
  const rollouts = checkRollouts(p.objects, p.checkFiles);
  problems.push(...rollouts.problems);
  warnings.push(...rollouts.warnings);

  // nodes
  const endpoints = new Map<string, string>();
  for (const n of p.nodes) {
    if (n.ports.from > n.ports.to) add('node', n.name, ['ports', 'from'], 'SPEC_INVALID_VALUE', `ports.from (${n.ports.from}) is above ports.to (${n.ports.to})`, 'make ports.from at most ports.to');
    if (n.listenAddress !== undefined && isIP(n.listenAddress) === 0) add('node', n.name, ['listen_address'], 'SPEC_INVALID_VALUE', `listen_address "${n.listenAddress}" is not an IP address`, 'name one of the node\'s addresses, e.g. 10.20.0.11, or 0.0.0.0 for every interface');
    if (n.transport === 'ssh') {
      const ep = `${n.host.toLowerCase()}:${n.port}`;
      const other = endpoints.get(ep);
      if (other) add('node', n.name, ['host'], 'SPEC_DUPLICATE_NAME', `node "${n.name}" has the same host and port (${ep}) as node "${other}"`, 'each machine is one node file; remove the duplicate');
      else endpoints.set(ep, n.name);
    }
  }

  // profiles → engines
  const engineByName = new Map(p.engines.map((e) => [e.name, e]));
  for (const pr of p.profiles) {
    const engine = engineByName.get(pr.engine);
    if (!engine) {
      add('profile', pr.name, ['engine'], 'SPEC_DANGLING_REF', `engine "${pr.engine}" does not exist`, listHint('engines', [...engineByName.keys()], 'engines/<engine>.yaml'));
    } else if (!engine.versions[pr.engineVersion]) {
      add('profile', pr.name, ['engine'], 'SPEC_DANGLING_REF', `engine "${pr.engine}" has no version "${pr.engineVersion}"`, listHint(`versions of ${pr.engine}`, Object.keys(engine.versions), `${engine.file}`));
    }
    const prVersion = engine?.versions[pr.engineVersion];
    if (prVersion && pr.placement?.spread === 'rpc' && prVersion.rpc !== true) {
      add('profile', pr.name, ['placement', 'spread'], 'SPEC_ENGINE_NO_RPC', noRpcMessage(prVersion, engine!.file), noRpcHint(prVersion, engine!.file));
    }
    pr.extraArgs.forEach((a, i) => {
      const flag = a.split('=')[0] ?? a;
      if (MANAGED_ARGS.has(flag)) {
        add('profile', pr.name, ['extra_args', i], 'SPEC_INVALID_VALUE', `extra_args sets ${flag}, which llmgw manages`, 'use the profile fields (ctx_size, threads, parallel, embeddings, reranking, cache_ram) instead; the port, host, model and API key are set by llmgw');
      } else if (ENDPOINT_ARGS.has(flag)) {
        add('profile', pr.name, ['extra_args', i], 'SPEC_INVALID_VALUE', `extra_args sets ${flag}, which takes away the endpoints llmgw reads of every replica (GET /slots: what it has in flight, waited on before every stop; /health)`, 'remove it: without /slots at its default path every drain waits out drain_grace and then cuts the requests in flight');
      }
    });
  }

  // models
  const profileByName = new Map(p.profiles.map((x) => [x.name, x]));
  const names = new Map<string, string>(); // name or alias → owning model
  for (const m of p.models) names.set(m.name, m.name);
  const models: ModelSpec[] = [];
  for (const m of p.models) {
    if (m.scaling === null) {
      add('model', m.name, [], 'SPEC_SCHEMA', 'set exactly one of "replicas" (always on) or "on_demand" (started by requests)', 'e.g. `replicas: 1` or `on_demand: { idle_timeout: 15m }`');
    }
    checkSchedule(m, (path, message, hint) => add('model', m.name, path, 'SPEC_INVALID_VALUE', message, hint));
    for (const r of m.ranges) {
      if (r.min > r.max) add('model', m.name, [...r.path], 'SPEC_INVALID_VALUE', `the replica range's min (${r.min}) is above its max (${r.max})`, 'set min ≤ max, e.g. replicas: { min: 1, max: 4 }');
    }
    const profile = profileByName.get(m.profile);
    if (!profile) add('model', m.name, ['profile'], 'SPEC_DANGLING_REF', `profile "${m.profile}" does not exist`, listHint('profiles', [...profileByName.keys()], 'profiles/<profile>.yaml'));
    m.aliases.forEach((alias, i) => {
      const owner = names.get(alias);
      if (owner !== undefined && owner !== m.name) {
        add('model', m.name, ['aliases', i], 'SPEC_DUPLICATE_NAME', `alias "${alias}" is already ${owner === alias ? 'the name of model' : 'an alias of model'} "${owner}"`, 'model names and aliases share one namespace; pick another alias');
      } else if (owner === m.name && alias === m.name) {
        add('model', m.name, ['aliases', i], 'SPEC_DUPLICATE_NAME', `alias "${alias}" repeats the model's own name`, 'remove the alias');
      } else names.set(alias, m.name);
    });
    const selector = Object.entries(m.nodeSelector);
    if (selector.length > 0 && !p.nodes.some((n) => selector.every(([k, v]) => n.labels[k] === v))) {
      add('model', m.name, ['node_selector'], 'SPEC_DANGLING_REF', `node_selector ${selector.map(([k, v]) => `${k}=${v}`).join(',')} matches no node`, 'label a node with these labels in nodes/<node>.yaml, or change the selector');
    }
    if (/^https?:\/\//i.test(m.source)) {
      let u: URL | null = null;
      try {
        u = new URL(m.source);
      } catch {
        /* the schema reports a malformed URL */
      }
      // never echoed: the message names the part, not its value
      if (u && (u.username !== '' || u.password !== '')) {
        add('model', m.name, ['source'], 'SPEC_INVALID_VALUE', 'the source URL carries credentials (user info before "@"), which would be shown in status, logs and the node\'s process list', 'remove them from the URL; put the credential in a file in the controller\'s secrets dir and name it with token:');
      }
      // (loopback excepted: the token does not leave the node)
      if (u && u.protocol === 'http:' && m.token !== null && !/^(localhost|127(\.\d{1,3}){3}|\[::1\])$/i.test(u.hostname)) {
        add('model', m.name, ['token'], 'SPEC_INVALID_VALUE', 'token: with an http:// source would send the bearer token in cleartext', 'use an https:// source, or remove token:');
      }
    }
    if (m.token !== null && m.source.startsWith('file://')) {
      add('model', m.name, ['token'], 'SPEC_INVALID_VALUE', 'token is sent only when a source is downloaded, and a file:// source is not', 'remove token:, or use an https:// or hf:// source');
    }
    if (m.memoryBytes !== null && (m.memoryBytes < MIN_MODEL_MEMORY || m.memoryBytes > MAX_MODEL_MEMORY)) {
      add('model', m.name, ['memory'], 'SPEC_INVALID_VALUE', `memory ${formatBytes(m.memoryBytes)} is not a plausible need for one replica`, `use a size between ${formatBytes(MIN_MODEL_MEMORY)} and ${formatBytes(MAX_MODEL_MEMORY)}, e.g. 6GiB`);
    }
    const engineVersion = profile ? engineByName.get(profile.engine)?.versions[profile.engineVersion] : undefined;
    const placement: PlacementSpec = { ...PLACEMENT_DEFAULT, ...profile?.placement, ...m.placement };
    if (engineVersion && m.placement?.spread === 'rpc' && engineVersion.rpc !== true) {
      const file = engineByName.get(engineVersion.engine)!.file;
      add('model', m.name, ['placement', 'spread'], 'SPEC_ENGINE_NO_RPC', `${noRpcMessage(engineVersion, file)} (the engine of profile "${m.profile}")`, noRpcHint(engineVersion, file));
    }
    const rollout = rollouts.byModel.get(m.name);
    if (profile && engineVersion && m.scaling && rollout !== undefined) {
      models.push({
        name: m.name,
        file: m.file,
        source: m.source,
        sha256: m.sha256,
        profile: m.profile,
        scaling: m.scaling,
        aliases: m.aliases,
        nodeSelector: m.nodeSelector,
        memoryBytes: m.memoryBytes,
        maxConcurrency: m.maxConcurrency,
        routing: m.routing,
        queue: { max: m.queue.max ?? p.settings.queue.max, timeoutMs: m.queue.timeoutMs ?? p.settings.queue.timeoutMs },
        token: m.token,
        rollout,
        scale: { ...SCALE_DEFAULTS, ...p.settings.scale, ...m.scale },
        placement,
        // not of the rollout: changing how a revision rolls out does not roll it out
        digest: definitionDigest(m.source, m.sha256, profile, engineVersion, placement.spread),
      });
    }
  }

  // access/keys.yaml
  const keyNames = new Set<string>();
  const keyHashes = new Map<string, string>();
  p.keys.forEach((k, i) => {
    if (keyNames.has(k.name)) add('keys', 'keys', ['keys', i, 'name'], 'SPEC_DUPLICATE_NAME', `key name "${k.name}" appears twice`, 'give each key its own name');
    keyNames.add(k.name);
    const other = keyHashes.get(k.sha256);
    if (other) add('keys', 'keys', ['keys', i, 'sha256'], 'SPEC_DUPLICATE_NAME', `key "${k.name}" has the same sha256 as key "${other}"`, 'each key must be distinct');
    else keyHashes.set(k.sha256, k.name);
    k.models.forEach((ref, j) => {
      if (ref !== '*' && !names.has(ref)) add('keys', 'keys', ['keys', i, 'models', j], 'SPEC_DANGLING_REF', `key "${k.name}" names model "${ref}", which does not exist`, listHint('models', p.models.map((m) => m.name), 'models/<model>.yaml'));
    });
    const seen = new Map<string, string>();
    for (const ref of Object.keys(k.modelLimits)) {
      const canonical = names.get(ref);
      if (canonical === undefined) {
        add('keys', 'keys', ['keys', i, 'model_limits', ref], 'SPEC_DANGLING_REF', `key "${k.name}" has limits for model "${ref}", which does not exist`, listHint('models', p.models.map((m) => m.name), 'models/<model>.yaml'));
      } else if (seen.has(canonical)) {
        add('keys', 'keys', ['keys', i, 'model_limits', ref], 'SPEC_DUPLICATE_NAME', `key "${k.name}" has limits for model "${canonical}" twice ("${seen.get(canonical)}" and "${ref}")`, 'keep one entry per model');
      } else seen.set(canonical, ref);
    }
  });
  const modelLimits: Record<string, KeyLimits> = {};
  for (const [ref, l] of Object.entries(p.modelLimits ?? {})) {
    const canonical = names.get(ref);
    if (canonical === undefined) add('keys', 'keys', ['models', ref], 'SPEC_DANGLING_REF', `limits for model "${ref}", which does not exist`, listHint('models', p.models.map((m) => m.name), 'models/<model>.yaml'));
    else if (Object.hasOwn(modelLimits, canonical)) add('keys', 'keys', ['models', ref], 'SPEC_DUPLICATE_NAME', `limits for model "${canonical}" appear twice (by name and alias)`, 'keep one entry per model');
    else modelLimits[canonical] = l;
  }

  const keys = p.keys.map((k) => ({
    ...k,
    models: [...new Set(k.models.map((ref) => (ref === '*' ? ref : (names.get(ref) ?? ref))))],
    modelLimits: Object.fromEntries(Object.entries(k.modelLimits).map(([ref, l]) => [names.get(ref) ?? ref, l])),
  }));
  return { problems, warnings, models, modelNames: Object.fromEntries(names), keys, modelLimits, fleetRollout: rollouts.fleetDefault };
}

const CRON_FIELD_RANGES: Readonly<Record<string, string>> = {
  second: '0-59',
  minute: '0-59',
  hour: '0-23',
  dayOfMonth: '1-31 (or L, the last day)',
  month: '1-12 or jan-dec',
  dayOfWeek: '0-7 (0 and 7 are Sunday) or sun-sat',
};

/** A schedule needs `replicas:` (its default), node-cron expressions and an IANA time zone. */
function checkSchedule(m: ModelDraft, add: (path: (string | number)[], message: string, hint: string) => void): void {
  if (m.schedule === null) {
    if (m.timezone !== null) add(['timezone'], 'timezone applies to a schedule, and this model has none', 'add schedule: [{cron: "0 8 * * 1-5", replicas: 2}, …], or remove timezone:');
    return;
  }
  if (m.scaling?.mode === 'on_demand') {
    add(['schedule'], 'schedule sets replica counts of an always-on model; this one is on_demand', 'replace on_demand: with replicas: N (the count before any entry fires), or remove schedule:');
  } else if (m.scaling === null) {
    add(['schedule'], 'schedule needs replicas: as its default (the count before any entry fires)', 'add e.g. `replicas: 0` beside schedule:');
  }
  if (m.timezone !== null && !isTimeZone(m.timezone)) {
    add(['timezone'], `timezone "${m.timezone}" is not an IANA time zone`, 'use a name from the IANA tz database, e.g. Europe/Berlin, America/New_York or UTC');
  }
  m.schedule.forEach((e, i) => {
    const bad = cronProblem(e.cron);
    if (bad) {
      const field = bad.field === 'expression' ? '' : ` (field ${bad.field}${bad.value !== null ? `: "${bad.value}"` : ''})`;
      const range = CRON_FIELD_RANGES[bad.field];
      add(['schedule', i, 'cron'], `cron "${e.cron}" is not valid${field}: ${bad.message}`, `${range ? `${bad.field} takes ${range}; ` : ''}five fields: minute hour day-of-month month day-of-week (optionally seconds first), e.g. "0 8 * * 1-5" for 08:00 Monday to Friday`);
    }
  });
}

/** "placement spread: rpc runs the model as a llama.cpp RPC group, which needs rpc-server; engine llama-cpp version b6500 (engines/llama-cpp.yaml) does not carry it" */
function noRpcMessage(v: EngineVersionSpec, file: string): string {
  return `placement spread: rpc runs the model as a llama.cpp RPC group, which needs rpc-server; engine ${v.engine} version ${v.version} (${file}) does not carry it`;
}

function noRpcHint(v: EngineVersionSpec, file: string): string {
  const how = v.install.method === 'build' ? 'add -DGGML_RPC=ON to its build cmake_flags' : 'set rpc: true on it if its install carries rpc-server';
  return `in ${file}, version ${v.version}: ${how}; or point the profile at an engine version with rpc, or use spread: none`;
}

function listHint(what: string, names: readonly string[], where: string): string {
  if (names.length === 0) return `there are no ${what}; add ${where}`;
  const shown = [...names].sort().slice(0, 12);
  return `existing ${what}: ${shown.join(', ')}${names.length > shown.length ? ', …' : ''}`;
}
