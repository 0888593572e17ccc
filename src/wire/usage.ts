/** The admin API's usage answer as JSON (GET /admin/v1/usage; `llmgw ctl usage`). */
import type { UsageRow } from '../router/usage-book.js';

export interface UsageJson {
  /** The start of the first minute counted (ISO 8601), null for everything the router kept. */
  readonly since: string | null;
  readonly rows: readonly UsageRow[];
}
