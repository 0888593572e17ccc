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
