/**
 * May a new replica restore the slot files an old one saved (#38 item 3)? Pure.
 *
 * A slot file (llama-server's `POST /slots/{id}?action=save`) is the raw KV cache of a slot: its
 * tokens and their K/V tensors, laid out as that engine build, that model file and those
 * cache-shaping flags made them. llama.cpp checks only part of that at restore (a version tag, the
 * token count against the slot's room, the tensor types) and a file from another model with the
 * same shapes restores "successfully" into a cache that answers nonsense. So llmgw restores only
 * where everything that shapes the cache matches: the same node (the files are on its disk), the
 * same engine build, the same model file, and the same context size, slots, flash-attention,
 * unified KV and K/V cache types. Anything else warms by replay (router/warmer.ts).
 *
 * The flags come from the profile: ctx_size and parallel are llmgw's own; flash-attention, kv-unified
 * and the cache types are llama-server arguments a profile passes in `extra_args` (the last one of
 * each wins, as llama-server parses them; absent: the engine's default, which the same build shares).
 */
import { createHash } from 'node:crypto';

/** What shapes a replica's slot files. */
export interface SlotIdentity {
  readonly node: string;
  /** engine@version and a digest of how it is installed (its build). */
  readonly build: string;
  /** The model file: its sha256. */
  readonly modelFile: string;
  readonly ctxSize: number;
  readonly parallel: number;
  /** -fa / --flash-attn: on, off, auto; null: the engine's default. */
  readonly flashAttn: string | null;
  /** -kvu / --kv-unified (and --no-kv-unified): on, off; null: the engine's default. */
  readonly kvUnified: string | null;
  /** -ctk / --cache-type-k; null: the engine's default (f16). */
  readonly cacheTypeK: string | null;
  /** -ctv / --cache-type-v; null: the engine's default (f16). */
  readonly cacheTypeV: string | null;
}

/** The fields in the order they are compared (the first that differs is named). */
export const SLOT_IDENTITY_FIELDS = ['node', 'build', 'modelFile', 'ctxSize', 'parallel', 'flashAttn', 'kvUnified', 'cacheTypeK', 'cacheTypeV'] as const;
export type SlotIdentityField = (typeof SLOT_IDENTITY_FIELDS)[number];

/** The decision: restore, or replay and why (the first field that differs, both values). */
export type SlotRestoreDecision =
  | { readonly restore: true }
  | { readonly restore: false; readonly field: SlotIdentityField; readonly old: string; readonly new: string; readonly why: string };

/** The value of the last of `names` in `args` that takes a value (`--x v` or `--x=v`); null when none. */
function lastValue(args: readonly string[], names: readonly string[]): string | null {
  let out: string | null = null;
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    for (const n of names) {
      if (a === n && i + 1 < args.length) out = args[i + 1]!;
      else if (a.startsWith(`${n}=`)) out = a.slice(n.length + 1);
    }
  }
  return out;
}

/** -fa takes a value in current builds (on|off|auto) and was a bare switch before: a bare one is `on`. */
function flashAttnOf(args: readonly string[]): string | null {
  let out: string | null = null;
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === '-fa' || a === '--flash-attn') {
      const v = args[i + 1];
      out = v !== undefined && /^(on|off|auto|true|false|1|0)$/i.test(v) ? normOnOff(v) : 'on';
    } else if (a.startsWith('--flash-attn=')) out = normOnOff(a.slice('--flash-attn='.length));
    else if (a === '--no-flash-attn' || a === '-no-fa') out = 'off';
  }
  return out;
}

function normOnOff(v: string): string {
  const l = v.toLowerCase();
  return l === 'true' || l === '1' ? 'on' : l === 'false' || l === '0' ? 'off' : l;
}

function kvUnifiedOf(args: readonly string[]): string | null {
  let out: string | null = null;
  for (const a of args) {
    if (a === '-kvu' || a === '--kv-unified') out = 'on';
    else if (a === '-no-kvu' || a === '--no-kv-unified') out = 'off';
  }
  return out;
}

/** The slot identity of a replica of `model` with `profile` on `engine` (a fleet spec's EngineVersionSpec, ModelSpec and ProfileSpec), on `node`. */
export function slotIdentityOf(
  node: string,
  engine: { readonly engine: string; readonly version: string; readonly install: unknown },
  model: { readonly sha256: string },
  profile: { readonly ctxSize: number; readonly parallel: number; readonly extraArgs: readonly string[] },
): SlotIdentity {
  const args = profile.extraArgs;
  const install = createHash('sha256').update(JSON.stringify(engine.install)).digest('hex').slice(0, 16);
  return {
    node,
    build: `${engine.engine}@${engine.version}#${install}`,
    modelFile: model.sha256,
    ctxSize: profile.ctxSize,
    parallel: profile.parallel,
    flashAttn: flashAttnOf(args),
    kvUnified: kvUnifiedOf(args),
    cacheTypeK: lastValue(args, ['-ctk', '--cache-type-k'])?.toLowerCase() ?? null,
    cacheTypeV: lastValue(args, ['-ctv', '--cache-type-v'])?.toLowerCase() ?? null,
  };
}

const WHAT: Record<SlotIdentityField, string> = {
  node: 'they run on different nodes (the slot files are on the old one\'s disk)',
  build: 'they run different engine builds',
  modelFile: 'they load different model files',
  ctxSize: 'their context sizes differ',
  parallel: 'their slot counts (parallel) differ',
  flashAttn: 'their flash-attention settings differ',
  kvUnified: 'their unified-KV settings differ',
  cacheTypeK: 'their K cache types differ',
  cacheTypeV: 'their V cache types differ',
};

const show = (v: string | number | null): string => (v === null ? 'default' : String(v));

/** Whether `neu` may restore slot files `old` saved: only where every field matches. */
export function mayRestoreSlots(old: SlotIdentity, neu: SlotIdentity): SlotRestoreDecision {
  for (const f of SLOT_IDENTITY_FIELDS) {
    if (old[f] === neu[f]) continue;
    const o = show(old[f]);
    const n = show(neu[f]);
    return { restore: false, field: f, old: o, new: n, why: `${WHAT[f]} (${f}: ${o} → ${n}): warmed by replay` };
  }
  return { restore: true };
}
