/**
 * When to log an unplaceable model's warning (pure): when its reason changes, or when the last
 * warning is older than the interval — never on every pass.
 */
export interface LastWarning {
  readonly reason: string;
  readonly at: number;
}

/**
 * Numbers in a reason (free memory, node counts) move as replicas come and go; a warning repeats
 * only when the kind of reason changes, not each time a figure does.
 */
export function reasonKey(reason: string): string {
  return reason.replace(/\d+(\.\d+)?/g, '#');
}

export function shouldWarn(last: LastWarning | undefined, reason: string, now: number, intervalMs: number): boolean {
  return last === undefined || reasonKey(last.reason) !== reasonKey(reason) || now - last.at >= intervalMs;
}
