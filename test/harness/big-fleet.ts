/**
 * A large fleet's state record and published snapshot as plain objects (no nodes, no processes):
 * what the etcd layout tests store. Sizes are as a real fleet's: about 400 bytes of published
 * snapshot and 530 of state record per model (its entry and its replica's). Every `parkEvery`-th
 * model is parked after five failed starts; the others have one ready replica on one of 100 nodes.
 */
import type { PublishedSnapshot } from '../../src/ha/published.js';
import { emptyState, type ControllerState, type ModelRecord, type ReplicaRecord } from '../../src/reconciler/state.js';

export const modelName = (i: number): string => `team-${i % 7}/finetune-${String(i).padStart(5, '0')}-q4_k_m`.replace('/', '-');
export const nodeName = (i: number): string => `node-${String(i % 100).padStart(3, '0')}`;
const digest = (i: number): string => `sha256:${(i * 2654435761).toString(16).padStart(12, '0')}${'0'.repeat(52)}`;

export function isParked(i: number, parkEvery: number): boolean {
  return i % parkEvery === 0;
}

export function bigState(models: number, parkEvery = 5, at = 1_790_000_000_000): ControllerState {
  const entries: Record<string, ModelRecord> = {};
  const replicas: Record<string, ReplicaRecord> = {};
  for (let i = 0; i < models; i++) {
    const name = modelName(i);
    const lastError = { code: 'REPLICA_START_FAILED', message: `llama-server exited with status 1 before it was ready (model ${name})` };
    const health = isParked(i, parkEvery)
      ? { digest: digest(i), consecutiveFailures: 5, lastError, lastFailureAt: at - 60_000, nextAttemptAt: null, parked: { since: at - 60_000, lastError }, lastHandledRetry: null }
      : { digest: digest(i), consecutiveFailures: 0, lastError: null, lastFailureAt: null, nextAttemptAt: null, parked: null, lastHandledRetry: null };
    entries[name] = i % 3 === 0 ? { health, demand: at - i } : { health };
    if (!isParked(i, parkEvery)) {
      replicas[`${name}-${(i * 7919).toString(16).padStart(8, '0')}`] = { model: name, node: nodeName(i), digest: digest(i), startedAt: at - 3_600_000, phase: { kind: 'ready', since: at - 3_600_000, seen: true } };
    }
  }
  return { ...emptyState, appliedRevision: 'a'.repeat(40), models: entries, replicas, handledRetries: ['commit:abc', 'admin:1:00ff00'] };
}

export function bigPublished(models: number, parkEvery = 5, revision = 'a'.repeat(40)): PublishedSnapshot {
  const ms: Array<PublishedSnapshot['models'][number]> = [];
  for (let i = 0; i < models; i++) {
    const name = modelName(i);
    const parked = isParked(i, parkEvery);
    const lastError = parked ? { code: 'REPLICA_START_FAILED', message: `llama-server exited with status 1 before it was ready (model ${name})` } : null;
    ms.push({
      name,
      phase: parked ? 'parked' : 'ready',
      desired: 1,
      ready: parked ? 0 : 1,
      replicas: parked ? [] : [{ id: `${name}-${(i * 7919).toString(16).padStart(8, '0')}`, model: name, node: nodeName(i), endpoint: `http://10.0.${Math.floor((i % 100) / 10)}.${i % 10}:${9000 + (i % 1000)}`, phase: 'ready', digest: digest(i), startedAt: 1_790_000_000_000 }],
      consecutiveFailures: parked ? 5 : 0,
      lastError,
      parked: parked && lastError ? { since: 1_790_000_000_000, lastError } : null,
      unplaceable: null,
      nextAttemptAt: null,
      memoryBytes: 4_500_000_000,
      lastHandledRetry: null,
    });
  }
  ms.sort((a, b) => a.name.localeCompare(b.name));
  const nodes = Array.from({ length: 100 }, (_, i) => ({ name: nodeName(i), reachable: true, error: null, engines: ['llama.cpp@b4500'], engineInstallFailures: {}, replicas: Math.ceil(models / 100) }));
  return { v: 1, appliedRevision: revision, specValid: true, rejected: null, lastSyncError: null, stateError: null, models: ms, nodes };
}
