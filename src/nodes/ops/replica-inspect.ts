/**
 * Inspect one replica: its state.json, whether its process is alive, and (when dead) its log tail —
 * polled by waitReady. Also the reading of a replica's state.json and of a dead replica's log, which
 * observe shares.
 */
import type { ReplicaFailure } from '../driver.js';
import { classifyFailure } from '../failure.js';
import { shq } from '../shell.js';
import { int, PRELUDE } from './prelude.js';
import { parseSections } from './sections.js';

/** A replica's state.json as the start script wrote it. */
export interface ReplicaState {
  readonly id: string;
  readonly model: string;
  readonly digest: string;
  readonly port: number;
  readonly argv: readonly string[];
  readonly log: string;
  readonly pid: number;
  readonly procStartTime: number;
  readonly startedAt: number;
  /** engineKeyFingerprint of the key it was started with; null when not recorded. */
  readonly keyFingerprint: string | null;
  /** The node's devices it was started on ([] = none) and its -ngl there. */
  readonly devices: readonly string[];
  readonly gpuLayers: number | 'all' | null;
}

export interface Inspection {
  /** null: no such replica (or its state.json is unreadable). */
  readonly state: ReplicaState | null;
  readonly alive: boolean;
  readonly logTail: string;
}

/** One replica's state, liveness and (when dead) log tail — polled by waitReady. */
export function inspectReplicaScript(dataDir: string, id: string, nonce: string, logLines: number): string {
  const m = `@@${nonce}`;
  return `${PRELUDE}
r=${shq(`${dataDir}/replicas/${id}`)}
[ -f "$r/state.json" ] || { echo ${shq(`${m} missing`)}; exit 0; }
echo ${shq(`${m} state`)}; cat "$r/state.json"; echo
if llmgw_alive "$r"; then echo ${shq(`${m} alive`)}; else echo ${shq(`${m} dead`)}; tail -n ${int(logLines)} "$r/log" 2>/dev/null; fi
echo ${shq(`${m} end`)}
`;
}

/** What inspectReplicaScript printed. */
export function parseInspection(stdout: string, nonce: string): Inspection {
  const sections = parseSections(stdout, nonce);
  if (sections.some((s) => s.name === 'missing')) return { state: null, alive: false, logTail: '' };
  const stateText = sections.find((s) => s.name === 'state')?.lines.join('\n') ?? '';
  const dead = sections.find((s) => s.name === 'dead');
  return { state: parseState(stateText), alive: sections.some((s) => s.name === 'alive'), logTail: dead?.lines.join('\n') ?? '' };
}

/** A replica's state.json; null when it is not one (unreadable, or no integer port and pid). */
export function parseState(text: string): ReplicaState | null {
  try {
    const j = JSON.parse(text) as Record<string, unknown>;
    const num = (k: string) => (typeof j[k] === 'number' ? (j[k] as number) : NaN);
    const str = (k: string) => (typeof j[k] === 'string' ? (j[k] as string) : '');
    const st: ReplicaState = {
      id: str('id'), model: str('model'), digest: str('digest'), port: num('port'),
      argv: Array.isArray(j['argv']) ? (j['argv'] as unknown[]).map(String) : [], log: str('log'),
      pid: num('pid'), procStartTime: num('procStartTime'), startedAt: num('startedAt'),
      keyFingerprint: /^[0-9a-f]{16}$/.test(str('keyFingerprint')) ? str('keyFingerprint') : null,
      devices: Array.isArray(j['devices']) ? (j['devices'] as unknown[]).map(String).filter((d) => /^[A-Za-z][A-Za-z_-]*[0-9]+$/.test(d)) : [],
      gpuLayers: j['gpuLayers'] === 'all' ? 'all' : typeof j['gpuLayers'] === 'number' ? (j['gpuLayers'] as number) : null,
    };
    if (!Number.isInteger(st.port) || !Number.isInteger(st.pid)) return null;
    return st;
  } catch {
    return null;
  }
}

/** A dead replica's failure, from its log tail (failure.ts). */
export function failureOf(logTail: string): ReplicaFailure {
  const f = classifyFailure(logTail, 'process gone');
  return { code: f.code, message: f.message, logTail, ...(f.silent ? { silent: true } : {}) };
}
