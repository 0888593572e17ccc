/**
 * When to log an unplaceable model's warning (pure): when its reason code changes (PLACEMENT_NO_ROOM
 * → PLACEMENT_MEMORY_UNKNOWN …), or when the last warning is older than unplaceable_log_interval —
 * never on every pass, and never because a figure in the text moved (free memory changes as
 * replicas come and go; the code does not).
 */
export interface LastWarning {
  readonly code: string;
  readonly at: number;
}

export function shouldWarn(last: LastWarning | undefined, code: string, now: number, intervalMs: number): boolean {
  return last === undefined || last.code !== code || now - last.at >= intervalMs;
}

/** Logs the unplaceable models whose warning is due, and forgets those placeable again. */
export function warnUnplaceable(unplaceable: Readonly<Record<string, { readonly code: string; readonly reason: string }>>, warned: Map<string, LastWarning>, intervalMs: number, now: number, log: { warn(fields: object, msg: string): void }): void {
  for (const [model, u] of Object.entries(unplaceable)) {
    if (!shouldWarn(warned.get(model), u.code, now, intervalMs)) continue;
    log.warn({ model, code: u.code, reason: u.reason }, 'model unplaceable');
    warned.set(model, { code: u.code, at: now });
  }
  for (const model of [...warned.keys()]) if (!unplaceable[model]) warned.delete(model);
}
