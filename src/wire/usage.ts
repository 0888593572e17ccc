/** The admin API's usage answer as JSON (GET /admin/v1/usage; `llmgw ctl usage`). */

/** One key × model's usage over the period asked (the router's usage book sums its minutes into these). */
export interface UsageRow {
  readonly key: string;
  readonly model: string;
  readonly requests: number;
  readonly errors: number;
  readonly promptTokens: number;
  readonly cachedTokens: number;
  readonly completionTokens: number;
  /** Requests that ended before their response did (client gone, stream cut): their tokens are what the router saw. */
  readonly endedEarly: number;
  /** Median request duration (within 5 %), null when there were none. */
  readonly p50LatencySeconds: number | null;
}

export interface UsageJson {
  /** The start of the first minute counted (ISO 8601), null for everything the router kept. */
  readonly since: string | null;
  readonly rows: readonly UsageRow[];
}
