/** What the router reports to metrics; implemented with prom-client in src/metrics. */
export interface RouterMetrics {
  /**
   * A finished request: its model ("" when unknown), status code, duration, and `reason`: the
   * catalogue code of the error the router answered or ended the response with (MODEL_PARKED,
   * UPSTREAM_CONNECT, …), or NO_REASON ("") when the response is the replica's own.
   */
  request(model: string, code: number, durationSeconds: number, reason: string): void;
  /** Time from the request's arrival to the first response byte from upstream. */
  timeToFirstToken(model: string, seconds: number): void;
  /** A failed attempt to talk to a replica, by the UPSTREAM_* catalogue code it maps to. */
  upstreamError(model: string, reason: string): void;
  /** In-flight requests (+1 at start, -1 at end). */
  inFlight(model: string, delta: number): void;
  /** Requests waiting in the model's queue now. */
  queueDepth(model: string, depth: number): void;
  /** How long a request waited in the queue (served, timed out or gone). */
  queueWait(model: string, seconds: number): void;
  /** A response's prompt tokens: evaluated, and reused from the prompt cache. */
  promptTokens(model: string, evaluated: number, cached: number): void;
  /** An affinity choice: the key's own replica (hit), or moved on to another by the load bound. */
  affinity(model: string, hit: boolean): void;
  /** A replica of the model left routing (its circuit breaker opened: `true`) or came back (`false`). */
  replicaEjected(model: string, ejected: boolean): void;
}

/** The `reason` of a request the router did not refuse or cut: the replica's answer, or a client that went away. */
export const NO_REASON = '';

export const noRouterMetrics: RouterMetrics = {
  request: () => undefined,
  timeToFirstToken: () => undefined,
  upstreamError: () => undefined,
  inFlight: () => undefined,
  queueDepth: () => undefined,
  queueWait: () => undefined,
  promptTokens: () => undefined,
  affinity: () => undefined,
  replicaEjected: () => undefined,
};

/** Tokens of one response, as the replica reported them: prompt (evaluated), cached (from the prompt cache), completion. */
export interface TokenUsage {
  readonly prompt: number;
  readonly cached: number;
  readonly completion: number;
}

/** One request's usage, recorded when its response closes. Nothing of the prompt or completion. */
export interface UsageRecord {
  /** Date.now() at the end. */
  readonly time: number;
  /** The key's name (never its value). */
  readonly key: string;
  /** Canonical model name; "" when the request named none that exists. */
  readonly model: string;
  /** Replica id that answered; "" when none did. */
  readonly replica: string;
  readonly status: number;
  /** The catalogue code the router answered with; "" for a replica's own answer. */
  readonly reason: string;
  readonly durationSeconds: number;
  readonly tokens: TokenUsage;
  /**
   * The request ended before its response did (the client went away, the stream was cut): `tokens`
   * are what the router saw of it (router/usage.ts earlyUsageOf), not what the replica reported.
   */
  readonly endedEarly?: boolean;
}

/** Where usage records go (metrics, the usage book behind GET /admin/v1/usage, the usage log). */
export interface UsageSink {
  record(r: UsageRecord): void;
}
