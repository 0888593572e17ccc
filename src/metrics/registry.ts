/**
 * Every llmgw metric in one prom-client Registry: fleet and control plane (applied from the
 * reconciler's snapshots), router, certificates (read at each scrape) and, optionally, the
 * standard process_* / nodejs_* metrics.
 */
import { Registry, collectDefaultMetrics } from 'prom-client';
import type { FleetSnapshot } from '../reconciler/view.js';
import type { RouterMetrics } from './ports.js';
import { registerCertificateMetrics } from './certificates.js';
import { FleetMetrics } from './fleet.js';
import { createRouterMetrics } from './router.js';
import { createKeyMetrics } from './keys.js';
import type { UsageSink } from './ports.js';
import { registerScheduleMetrics } from './schedule.js';
import { registerEventLoopDelayMetrics } from './event-loop.js';
import { registerWarmupMetrics, type WarmupMetrics } from './warmup.js';

export interface MetricsOptions {
  /** Certificate file paths (PEM or DER), asked for and read at each scrape. */
  readonly certificates?: () => readonly string[];
  /** Milliseconds since the epoch (default Date.now); used for passFinished's success time. */
  readonly clock?: () => number;
  /** Also export prom-client's default process_* and nodejs_* metrics (default true). */
  readonly defaultMetrics?: boolean;
  /** Whether llmgw_key_* series are recorded now (fleet.yaml metrics_per_key); default always. */
  readonly perKey?: () => boolean;
}

export interface LlmgwMetrics {
  readonly registry: Registry;
  /** Applies the snapshot the reconciler publishes after every pass. */
  applySnapshot(s: FleetSnapshot): void;
  readonly router: RouterMetrics;
  /** Usage per API key (llmgw_key_*); a UsageSink for the router. */
  readonly keys: UsageSink;
  /**
   * A reconcile pass finished. Optional: without calls, passes are counted from the snapshots'
   * `lastPass`; after the first call, only from here (never both).
   */
  passFinished(result: 'ok' | 'error', durationSeconds: number): void;
  /** This instance gained (true) or lost (false) leadership; snapshots' `leader` does the same. */
  leaderChanged(isLeader: boolean): void;
  /**
   * An engine install finished on a node: shows at once. The next snapshot's engines and
   * engineInstallFailures stay authoritative (counts are not doubled; pairs it no longer lists go).
   */
  engineInstall(node: string, engine: string, version: string, result: 'ok' | 'error'): void;
  /** A new replica's warm-up ended (warmup.ts). */
  readonly warmup: WarmupMetrics;
  /** The llmgw_* metric names in the registry, sorted. */
  metricNames(): string[];
  /** The scrape: exposition text and its content type. */
  scrape(): Promise<{ readonly contentType: string; readonly body: string }>;
  /**
   * The scrape as UTF-8 parts to send in turn: the per-model and fleet parts are encoded once per
   * change and shared by every scrape until the next (serveMetrics sends them in slices).
   */
  scrapeParts(): Promise<{ readonly contentType: string; readonly parts: readonly Buffer[] }>;
  /** Stops what samples in the background (the event-loop delay monitors). */
  close(): void;
}

export function createMetrics(opts: MetricsOptions = {}): LlmgwMetrics {
  // Three registries: the fleet's series change only with a snapshot or a pass, so their text is
  // rendered once per change and reused by every scrape until the next; the per-model ones among
  // them (16 series a model) only when a model's series changed, which a steady pass does not do;
  // the live ones (router, certificates and schedules read at the scrape, process, event loop) are
  // rendered at each scrape. At 1,000 models this keeps a scrape's event-loop time to the live part.
  const modelRegistry = new Registry();
  const fleetRegistry = new Registry();
  const live = new Registry();
  if (opts.defaultMetrics ?? true) collectDefaultMetrics({ register: live });
  const fleet = new FleetMetrics(fleetRegistry, opts.clock ?? Date.now, modelRegistry);
  const router = createRouterMetrics(live);
  const keys = createKeyMetrics(live, opts.perKey);
  registerCertificateMetrics(live, opts.certificates ?? (() => []));
  const schedules = registerScheduleMetrics(live, opts.clock ?? Date.now);
  const eventLoop = registerEventLoopDelayMetrics(live);
  const warmup = registerWarmupMetrics(live);
  const registry = Registry.merge([modelRegistry, fleetRegistry, live]);
  let modelText: Promise<Buffer[]> | null = null;
  let fleetText: Promise<Buffer> | null = null;
  const changed = <T>(r: T): T => {
    fleetText = null;
    return r;
  };
  const bytes = async (r: Registry): Promise<Buffer> => {
    const t = await r.metrics();
    return Buffer.from(t === '' || t.endsWith('\n') ? t : `${t}\n`);
  };
  const scrapeParts = async (): Promise<{ contentType: string; parts: Buffer[] }> => {
    modelText ??= fleet.modelText();
    fleetText ??= bytes(fleetRegistry);
    const [model, ...rest] = await Promise.all([modelText, fleetText, bytes(live)]);
    return { contentType: registry.contentType, parts: [...model, ...rest] };
  };

  return {
    registry,
    router,
    keys,
    applySnapshot: (s) => {
      if (changed(fleet.applySnapshot(s))) modelText = null;
      schedules.setModels(s.models.map((m) => m.spec));
      router.setModels(s.models.map((m) => m.name));
    },
    passFinished: (result, durationSeconds) => changed(fleet.passFinished(result, durationSeconds)),
    leaderChanged: (isLeader) => changed(fleet.leaderChanged(isLeader)),
    engineInstall: (node, engine, version, result) => changed(fleet.engineInstall(node, engine, version, result)),
    warmup,
    metricNames: () =>
      registry
        .getMetricsAsArray()
        .map((m) => m.name)
        .filter((n) => n.startsWith('llmgw_'))
        .sort(),
    scrape: async () => {
      const { contentType, parts } = await scrapeParts();
      return { contentType, body: Buffer.concat(parts).toString('utf8') };
    },
    scrapeParts,
    close: () => eventLoop.close(),
  };
}
