/** The admin API's event feed as JSON (GET /admin/v1/events and its stream; `llmgw ctl events`). */
import type { FleetEvent } from '../events/ring.js';

export interface EventJson extends Omit<FleetEvent, 'at'> {
  readonly at: string;
}

export interface EventsJson {
  readonly events: readonly EventJson[];
  /** The newest event's number (0 before any): `after` for the next look. */
  readonly last: number;
  /** The oldest number the ring still holds. */
  readonly first: number;
  /** Which process numbered them (numbers start again at 1 when the controller restarts). */
  readonly boot: string;
}
