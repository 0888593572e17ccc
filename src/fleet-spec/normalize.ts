/** Schema-valid raw YAML values (defaults applied by ajv) → typed spec objects. Pure. */
import { parseDuration, parseSize } from './units.js';
import { normalizeSource } from './source.js';
import type {
  AccessKeySpec,
  EngineInstall,
  EngineSpec,
  EngineVersionSpec,
  FleetSettings,
  KeyLimits,
  ModelScaling,
  NodeSpec,
  PlacementSpec,
  ProfileSpec,
  Routing,
  ScaleSpec,
  ScheduleEntry,
  WarmupSpec,
} from './types.js';
import { SCALE_DEFAULTS } from './types.js';

type Raw = Record<string, unknown>;

const obj = (v: unknown): Raw => (v && typeof v === 'object' ? (v as Raw) : {});
const str = (v: unknown): string => (typeof v === 'string' ? v : '');
const num = (v: unknown): number | null => (typeof v === 'number' ? v : null);
const size = (v: unknown): number | null => (v === undefined ? null : parseSize(v as string | number));
const dur = (v: unknown): number => parseDuration(v as string | number) ?? 0;
const strMap = (v: unknown): Record<string, string> => Object.fromEntries(Object.entries(obj(v)).map(([k, x]) => [k, String(x)]));

export function normalizeFleet(raw: Raw): FleetSettings {
  const backoff = obj(raw.backoff);
  return {
    pollIntervalMs: dur(raw.poll_interval),
    parkAfterFailures: num(raw.park_after_failures) ?? 5,
    backoff: { initialMs: dur(backoff.initial), maxMs: dur(backoff.max) },
    readyResetMs: dur(raw.ready_reset_after),
    activationWindowMs: dur(raw.activation_window),
    drainGraceMs: dur(raw.drain_grace),
    stopGraceMs: dur(raw.stop_grace),
    statusBranch: str(raw.status_branch),
    placementReserveBytes: size(raw.placement_reserve) ?? 0,
    unplaceableLogIntervalMs: dur(raw.unplaceable_log_interval),
    queue: { max: num(obj(raw.queue).max) ?? 64, timeoutMs: raw.queue && obj(raw.queue).timeout !== undefined ? dur(obj(raw.queue).timeout) : 60_000 },
    ...(raw.metrics_per_key === true ? { metricsPerKey: true } : {}),
    scale: { ...SCALE_DEFAULTS, ...scaleFields(raw.scale) },
  };
}

/** A scale target as written: "80%" or a share (0.8); null when it is neither. */
export function parseTarget(v: unknown): number | null {
  if (typeof v === 'number') return v;
  if (typeof v !== 'string') return null;
  const m = /^\s*([0-9]+(?:\.[0-9]+)?)\s*%\s*$/.exec(v);
  return m ? Number(m[1]) / 100 : null;
}

/** The fields a `scale:` block sets (fleet.yaml's or a model's), as written. */
export function scaleFields(v: unknown): Partial<ScaleSpec> {
  if (v === undefined || v === null || typeof v !== 'object') return {};
  const o = obj(v);
  const target = parseTarget(o.target);
  return {
    ...(target !== null ? { target } : {}),
    ...(o.up_after !== undefined ? { upAfterMs: dur(o.up_after) } : {}),
    ...(o.down_after !== undefined ? { downAfterMs: dur(o.down_after) } : {}),
  };
}

export function normalizeNode(name: string, file: string, raw: Raw): NodeSpec {
  const capacity = obj(raw.capacity);
  const ports = obj(raw.ports);
  const transport = raw.transport === 'local' ? 'local' : 'ssh';
  return {
    name,
    file,
    transport,
    host: transport === 'local' ? str(raw.host) || '127.0.0.1' : str(raw.host),
    ...(typeof raw.listen_address === 'string' ? { listenAddress: raw.listen_address } : {}),
    port: num(raw.port) ?? 22,
    user: str(raw.user),
    hostKey: typeof raw.host_key === 'string' ? raw.host_key : null,
    identity: typeof raw.identity === 'string' ? raw.identity : null,
    labels: strMap(raw.labels),
    capacity: { memoryBytes: size(capacity.memory), cpus: num(capacity.cpus) },
    dataDir: str(raw.data_dir),
    ports: { from: num(ports.from) ?? 20000, to: num(ports.to) ?? 20999 },
    env: strMap(raw.env),
    deviceMemory: Object.fromEntries(Object.entries(obj(capacity.devices)).map(([k, v]) => [k, size(v) ?? 0])),
  };
}

function normalizeInstall(raw: Raw): EngineInstall {
  if (raw.artifact) {
    const a = obj(raw.artifact);
    return { method: 'artifact', url: str(a.url), sha256: str(a.sha256).toLowerCase(), binary: str(a.binary), fetch: a.fetch === 'controller' ? 'controller' : 'node' };
  }
  if (raw.build) {
    const b = obj(raw.build);
    return { method: 'build', git: str(b.git), ref: str(b.ref), cmakeFlags: (b.cmake_flags as string[] | undefined) ?? [], target: str(b.target) };
  }
  return { method: 'path', path: str(raw.path) };
}

/** A cmake flag list turns GGML_RPC on (-DGGML_RPC=ON, -DGGML_RPC:BOOL=1, …: cmake's true values). */
export function rpcInFlags(flags: readonly string[]): boolean {
  let on = false;
  for (const f of flags) {
    const m = /^-DGGML_RPC(?::[A-Z]+)?=(.*)$/.exec(f);
    if (m) on = /^(on|1|true|yes|y)$/i.test(m[1]!); // the last one wins, as in cmake
  }
  return on;
}

export function normalizeEngine(name: string, file: string, raw: Raw): EngineSpec {
  const versions: Record<string, EngineVersionSpec> = {};
  for (const [version, v] of Object.entries(obj(raw.versions))) {
    const install = normalizeInstall(obj(v));
    const rpc = typeof obj(v).rpc === 'boolean' ? (obj(v).rpc as boolean) : install.method === 'build' && rpcInFlags(install.cmakeFlags);
    versions[version] = { engine: name, version, install, rpc };
  }
  return { name, file, versions };
}

/** A profile's `warmup` (schema defaults applied; a hand-built raw profile gets them here too). */
export function normalizeWarmup(raw: Raw): WarmupSpec {
  return { prefixes: num(raw.prefixes) ?? 8, maxTokens: num(raw.max_tokens) ?? 16_384, timeoutMs: raw.timeout === undefined ? 10_000 : dur(raw.timeout) };
}

export function normalizeProfile(name: string, file: string, raw: Raw): ProfileSpec {
  const [engine = '', engineVersion = ''] = str(raw.engine).split('@');
  return {
    name,
    file,
    engine,
    engineVersion,
    ctxSize: num(raw.ctx_size) ?? 4096,
    threads: num(raw.threads),
    parallel: num(raw.parallel) ?? 1,
    batchSize: num(raw.batch_size),
    embeddings: raw.embeddings === true,
    reranking: raw.reranking === true,
    extraArgs: (raw.extra_args as string[] | undefined) ?? [],
    memoryOverheadBytes: size(raw.memory_overhead) ?? 0,
    cacheRamBytes: size(raw.cache_ram) ?? 0,
    startTimeoutMs: dur(raw.start_timeout),
    warmup: normalizeWarmup(obj(raw.warmup)),
    gpuLayers: raw.gpu_layers === 'all' || raw.gpu_layers === 'auto' ? raw.gpu_layers : num(raw.gpu_layers),
    devices: (raw.devices as string[] | undefined) ?? [],
    splitMode: raw.split_mode === 'none' || raw.split_mode === 'layer' || raw.split_mode === 'row' ? raw.split_mode : null,
    tensorSplit: (raw.tensor_split as number[] | undefined) ?? [],
    mainGpu: num(raw.main_gpu),
    deviceCount: Math.max(1, ((raw.tensor_split as number[] | undefined) ?? []).length),
    placement: normalizePlacement(raw.placement),
  };
}

/** The fields a `placement:` block sets (a profile's or a model's); null when absent. */
export function normalizePlacement(v: unknown): Partial<PlacementSpec> | null {
  if (v === undefined || v === null || typeof v !== 'object') return null;
  const o = obj(v);
  const maxHosts = num(o.max_hosts);
  return {
    ...(o.spread === 'rpc' || o.spread === 'none' ? { spread: o.spread } : {}),
    ...(maxHosts !== null ? { maxHosts } : {}),
  };
}

export interface ModelDraft {
  readonly name: string;
  readonly file: string;
  readonly source: string;
  readonly sha256: string;
  readonly profile: string;
  readonly scaling: ModelScaling | null;
  readonly aliases: readonly string[];
  readonly nodeSelector: Readonly<Record<string, string>>;
  readonly memoryBytes: number | null;
  readonly maxConcurrency: number | null;
  readonly routing: Routing;
  /** The model file's own queue fields (unset ones come from fleet.yaml). */
  readonly queue: { readonly max: number | null; readonly timeoutMs: number | null };
  readonly token: string | null;
  /** As written (checked in semantic.ts): the schedule's entries and its time zone. */
  readonly schedule: readonly ScheduleEntry[] | null;
  readonly timezone: string | null;
  /** The model file's own `scale:` fields (the rest come from fleet.yaml). */
  readonly scale: Partial<ScaleSpec>;
  /** Ranges as written, each with its field path (checked in semantic.ts: min ≤ max). */
  readonly ranges: readonly DraftRange[];
  /** The fields of the model file's own `placement:` (over its profile's; null: none set). */
  readonly placement?: Partial<PlacementSpec> | null;
}

/** A replica range as written, where it was written. */
export interface DraftRange {
  readonly path: readonly (string | number)[];
  readonly min: number;
  readonly max: number;
}

export function normalizeModel(name: string, file: string, raw: Raw): ModelDraft {
  let scaling: ModelScaling | null = null;
  const ranges: DraftRange[] = [];
  if (raw.on_demand !== undefined && raw.replicas === undefined) {
    const od = obj(raw.on_demand);
    scaling = { mode: 'on_demand', idleTimeoutMs: dur(od.idle_timeout), maxReplicas: num(od.max_replicas) ?? 1 };
  } else if (raw.replicas !== undefined && raw.on_demand === undefined) {
    const r = raw.replicas;
    if (r !== null && typeof r === 'object') {
      const min = num(obj(r).min) ?? 1;
      const max = num(obj(r).max) ?? min;
      scaling = { mode: 'replicas', replicas: min, max };
      ranges.push({ path: ['replicas'], min, max });
    } else scaling = { mode: 'replicas', replicas: num(r) ?? 0 };
  }
  // a schedule entry: a count, or a range whose unset end is the model's
  const floor = scaling?.mode === 'replicas' ? scaling.replicas : 0;
  const ceiling = scaling?.mode === 'replicas' ? (scaling.max ?? scaling.replicas) : 0;
  const schedule = Array.isArray(raw.schedule)
    ? (raw.schedule as Raw[]).map((e, i): ScheduleEntry => {
        if (e.min === undefined && e.max === undefined) return { cron: str(e.cron), replicas: num(e.replicas) ?? 0 };
        const min = num(e.min) ?? floor;
        const max = num(e.max) ?? Math.max(ceiling, min);
        ranges.push({ path: ['schedule', i, e.max !== undefined ? 'max' : 'min'], min, max });
        return { cron: str(e.cron), replicas: min, max };
      })
    : null;
  const timezone = typeof raw.timezone === 'string' ? raw.timezone : null;
  if (scaling?.mode === 'replicas' && schedule) scaling = { ...scaling, schedule: { timezone: timezone ?? 'UTC', entries: schedule } };
  return {
    name,
    file,
    source: normalizeSource(str(raw.source)),
    sha256: str(raw.sha256).toLowerCase(),
    profile: str(raw.profile),
    scaling,
    aliases: (raw.aliases as string[] | undefined) ?? [],
    nodeSelector: strMap(raw.node_selector),
    memoryBytes: size(raw.memory),
    maxConcurrency: num(raw.max_concurrency),
    routing: raw.routing === 'least_busy' ? 'least_busy' : 'affinity',
    queue: { max: num(obj(raw.queue).max), timeoutMs: obj(raw.queue).timeout === undefined ? null : dur(obj(raw.queue).timeout) },
    token: raw.token === undefined ? null : str(raw.token),
    schedule,
    timezone,
    scale: scaleFields(raw.scale),
    ranges,
    placement: normalizePlacement(raw.placement),
  };
}

export function normalizeKeys(raw: Raw): AccessKeySpec[] {
  return ((raw.keys as Raw[] | undefined) ?? []).map((k) => ({
    name: str(k.name),
    sha256: str(k.sha256).toLowerCase(),
    models: (k.models as string[] | undefined) ?? ['*'],
    limits: k.limits === undefined ? null : normalizeLimits(obj(k.limits)),
    modelLimits: Object.fromEntries(Object.entries(obj(k.model_limits)).map(([m, l]) => [m, normalizeLimits(obj(l))])),
    trusted: k.trusted === true,
    isolateCache: k.isolate_cache === true,
  }));
}

export function normalizeLimits(raw: Raw): KeyLimits {
  return { requestsPerMinute: num(raw.requests_per_minute), tokensPerMinute: num(raw.tokens_per_minute), concurrency: num(raw.concurrency) };
}

/** access/keys.yaml's top-level `models: {MODEL: {limits: …}}` (names or aliases as written). */
export function normalizeModelLimits(raw: Raw): Record<string, KeyLimits> {
  return Object.fromEntries(Object.entries(obj(raw.models)).map(([m, v]) => [m, normalizeLimits(obj(obj(v).limits))]));
}
