/**
 * FleetView.waitReady over a stream of snapshots: resolves with the ready replicas once the model
 * is settled (availability.ts settledOf: ready, or parked / unplaceable), or [] at the timeout or
 * when the signal aborts. Shared by the leader (its own snapshots) and a standby (the published ones).
 */
import { settledOf } from './availability.js';
import type { FleetSnapshot, ModelView, ReplicaView } from './view.js';

export function waitSettled(
  model: () => ModelView | null,
  onSnapshot: (listener: (s: FleetSnapshot) => void) => () => void,
  opts: { readonly timeoutMs: number; readonly signal?: AbortSignal },
): Promise<readonly ReplicaView[]> {
  const now = settledOf(model());
  if (now) return Promise.resolve(now);
  return new Promise((resolve) => {
    const done = (v: readonly ReplicaView[]): void => {
      clearTimeout(timer);
      off();
      opts.signal?.removeEventListener('abort', onAbort);
      resolve(v);
    };
    const onAbort = (): void => done([]);
    const timer = setTimeout(() => done([]), opts.timeoutMs);
    const off = onSnapshot(() => {
      const v = settledOf(model());
      if (v) done(v);
    });
    opts.signal?.addEventListener('abort', onAbort, { once: true });
  });
}
