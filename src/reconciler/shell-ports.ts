/**
 * What the Reconciler (reconciler.ts, which owns the state record and runs the passes) gives the
 * parts of its shell: the stops and the starts it runs in the background (stop-runner.ts,
 * start-runner.ts) and its answers to the router and operators (reconciler-acts.ts). The record is
 * read through `record()` each time, never kept across an await: a pass or another operation may
 * have replaced it meanwhile.
 */
import type { Logger } from 'pino';
import type { FleetSpec } from '../fleet-spec/types.js';
import type { NodeFleet } from './node-fleet.js';
import type { ControllerState, Note } from './state.js';

export interface ShellPorts {
  /** The one record that outlives a pass, as it stands now. */
  record(): ControllerState;
  /** Replaces the record (with a transition of what record() returned, taken without an await in between). */
  setRecord(s: ControllerState): void;
  readonly nodes: NodeFleet;
  readonly log: Logger;
  /** The spec in force (the tracker's last valid revision), or null before the first. */
  spec(): FleetSpec | null;
  /** "Am I the leader?" — asked again before every step that acts. */
  leader(): boolean;
  /** The wall clock for a time the record keeps or compares with (a step is applied to the record first). */
  now(log?: Logger): number;
  /** Logs what a transition decided. */
  logNotes(log: Logger, notes: readonly Note[]): void;
  /** Writes the record (one write at a time; the latest record wins). */
  saveState(): Promise<void>;
  /**
   * Publishes a snapshot built at the next turn of the event loop: however many outcomes ask in one
   * turn (hundreds of starts concluding together), one snapshot is built and published for them.
   */
  publish(): void;
  requestPass(trigger: string): Promise<void>;
  /** Aborted when the controller stops (a new signal after each start()). */
  stopSignal(): AbortSignal;
}
