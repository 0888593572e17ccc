/**
 * One replica start (I/O), run in the background: engine, model file, launch, wait for ready. It
 * ends with exactly one outcome (outcomes.ts), handed to `conclude`: ready, failed with the
 * engine's own reason, or abandoned because the controller is stopping (a replica already launched
 * is left running for the next controller to adopt; nothing is counted).
 */
import type { Logger } from 'pino';
import { isLlmgwError, reasonOf } from '../errors/catalogue.js';
import type { DownloadToken, NodeDriver, ReplicaStartSpec } from '../nodes/driver.js';
import type { EngineVersionSpec, ModelSpec, ProfileSpec } from '../fleet-spec/types.js';
import type { StartOutcome } from './outcomes.js';
import type { Action } from './planner.js';
import { groupReadiness, layersOf, startGroupWorkers, stopGroupWorkers, type DriverOf } from './group-workers.js';
import { groupLayerSplit } from './group-split.js';

export interface StartOp {
  readonly action: Extract<Action, { kind: 'start' }>;
  readonly model: ModelSpec;
  readonly profile: ProfileSpec;
  readonly engine: EngineVersionSpec;
  readonly driver: NodeDriver;
  /** The driver of another node of the spec (an RPC group's workers, #40). */
  readonly driverOf?: DriverOf;
  readonly engineApiKey: string;
  readonly downloadToken: () => Promise<DownloadToken | undefined>;
  /** Aborted when the controller stops. */
  readonly stopSignal: AbortSignal;
  readonly log: Logger;
  readonly onEngineInstall: (result: 'ok' | 'error') => void;
  /** Applies the outcome to the state record (one synchronous transition). */
  readonly conclude: (outcome: StartOutcome) => void;
  /** Writes the state record (before a failed replica, the evidence on the node, is removed). */
  readonly persist: () => Promise<void>;
  /** Primes the ready replica's prompt cache before it takes traffic, within its own bound; never throws (warm-up.ts). */
  readonly warm?: (endpoint: string) => Promise<void>;
}

export async function runStart(op: StartOp): Promise<void> {
  const { action: a, driver, stopSignal, log } = op;
  let stage: 'engine' | 'model' | 'workers' | 'start' = 'engine';
  const group = a.group;
  let workersUp = false;
  try {
    let binary: string;
    try {
      ({ binary } = await driver.ensureEngine(op.engine));
      op.onEngineInstall('ok');
    } catch (e) {
      op.onEngineInstall('error');
      throw e;
    }
    stage = 'model';
    let file = await driver.ensureModel(op.model.source, op.model.sha256, await op.downloadToken());
    if (stopSignal.aborted) {
      log.info({ stage }, 'controller stopping: replica not launched');
      return op.conclude({ kind: 'abandoned' });
    }
    // an RPC group (#40): its layers split by the hosts' shares, its workers first, the head then names them
    let rpc: ReplicaStartSpec['rpc'] | null = null;
    if (group) {
      const split = groupLayerSplit(group, await layersOf(driver, file.path, log));
      stage = 'workers';
      const endpoints = await startGroupWorkers({ model: a.model, replicaId: a.replicaId, group }, op.engine, op.profile, op.driverOf ?? (() => undefined), log);
      workersUp = true;
      rpc = { endpoints, gpuLayers: split.gpuLayers, split: split.split };
      log.info({ headLayers: split.headLayers, workerLayers: split.split, gpuLayers: split.gpuLayers }, 'rpc group: its layers split by the hosts\' shares');
    }
    stage = 'start';
    const launch = () => driver.startReplica({
      id: a.replicaId, model: a.model, digest: a.digest, modelPath: file.path, binary, profile: op.profile, apiKey: op.engineApiKey,
      ...(a.devices && a.devices.length > 0 ? { devices: a.devices, gpuLayers: a.gpuLayers ?? 'all' } : {}),
      ...(rpc ? { rpc } : {}),
    });
    const handle = await launch().catch(async (e: unknown) => {
      // the engine or the model file the driver had found was gone at the start (nothing was done):
      // both checked again with their own scripts (installed or fetched again), then one more start
      if (!isLlmgwError(e) || e.code !== 'REPLICA_INPUT_GONE') throw e;
      log.warn({ code: e.code, reason: e.message }, 'replica start: its engine or model file was gone; checking them again');
      stage = 'engine';
      ({ binary } = await driver.ensureEngine(op.engine));
      stage = 'model';
      file = await driver.ensureModel(op.model.source, op.model.sha256, await op.downloadToken());
      stage = 'start';
      return launch();
    });
    await driver.waitReady(a.replicaId, { timeoutMs: op.profile.startTimeoutMs, signal: stopSignal });
    // a group is ready when its head's log also shows every worker's model buffer
    if (rpc) await groupReadiness(driver, a.replicaId, rpc.endpoints);
    if (op.warm) await op.warm(handle.endpoint);
    op.conclude({ kind: 'ready', endpoint: handle.endpoint, startedAt: handle.startedAt });
  } catch (e) {
    if (stopSignal.aborted) {
      log.info({ stage }, 'controller stopping: replica start abandoned');
      return op.conclude({ kind: 'abandoned' });
    }
    const error = reasonOf(e);
    const logTail = isLlmgwError(e) ? (e.detail.logTail as string | undefined) : undefined;
    // the engine's log named no reason (nodes/failure.ts: llama-server can lose its last lines at exit)
    const silent = isLlmgwError(e) && e.detail.silent === true;
    log.warn({ stage, code: error.code, reason: error.message, logTail: logTail?.slice(-2000), ...(silent ? { silent } : {}) }, 'replica start failed');
    op.conclude(silent ? { kind: 'failed', error, silent } : { kind: 'failed', error });
    await op.persist();
    if (stage === 'start') await driver.stopReplica(a.replicaId, 0).catch(() => undefined);
    if (group && workersUp) await stopGroupWorkers(group, op.driverOf ?? (() => undefined), log, 0);
  }
}
