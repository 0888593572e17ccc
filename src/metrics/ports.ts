/** What the router reports to metrics; implemented with prom-client in src/metrics. */
export interface RouterMetrics {
  /** A finished request: its model ("" when unknown), status code and duration. */
  request(model: string, code: number, durationSeconds: number): void;
  /** Time from the request's arrival to the first response byte from upstream. */
  timeToFirstToken(model: string, seconds: number): void;
  /** An upstream failure: connect, first_byte_timeout, stall_timeout, reset, … */
  upstreamError(model: string, reason: string): void;
  /** In-flight requests (+1 at start, -1 at end). */
  inFlight(model: string, delta: number): void;
}

export const noRouterMetrics: RouterMetrics = {
  request: () => undefined,
  timeToFirstToken: () => undefined,
  upstreamError: () => undefined,
  inFlight: () => undefined,
};
