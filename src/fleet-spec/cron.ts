/**
 * Firing times of a node-cron expression in an IANA time zone (pure, no timers). node-cron parses
 * the expression (`validateDetailed`) and its own matcher decides whether an instant matches
 * (`ScheduledTask.match`, from a task that is created and destroyed at once, never started).
 * node-cron only walks forward from the real clock, so both directions are walked here: local
 * calendar days that can match (month, day of month, weekday from the parsed fields), then the
 * expression's times on each day turned into instants in the zone, each confirmed by node-cron's
 * matcher. A local time that does not exist (the hour skipped when clocks go forward) never
 * fires; one that exists twice (the hour repeated when clocks go back) fires at both instants.
 */
import { createTask, validateDetailed, type CronFieldError, type ParsedFields } from 'node-cron';

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
/** How far firings are looked for, either way. */
export const SEARCH_DAYS = 366;

export interface CronProblem {
  /** node-cron's name of the field: expression, second, minute, hour, dayOfMonth, month, dayOfWeek. */
  readonly field: string;
  readonly value: string | null;
  readonly message: string;
}

/** node-cron's verdict on an expression: null when valid. */
export function cronProblem(expression: string): CronProblem | null {
  const v = validateDetailed(expression);
  if (v.valid) return null;
  const e: CronFieldError | undefined = v.errors[0];
  return { field: e?.field ?? 'expression', value: e?.value ?? null, message: e?.message ?? 'invalid cron expression' };
}

/** Whether `tz` is an IANA time zone this runtime knows. */
export function isTimeZone(tz: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: tz });
    return true;
  } catch {
    return false;
  }
}

interface Compiled {
  readonly fields: ParsedFields;
  readonly match: (d: Date) => boolean;
  readonly hours: readonly number[];
  readonly minutes: readonly number[];
  readonly seconds: readonly number[];
}

const compiled = new Map<string, Compiled>();

function compile(expression: string, tz: string): Compiled {
  const key = `${tz}\n${expression}`;
  const hit = compiled.get(key);
  if (hit) return hit;
  const v = validateDetailed(expression);
  if (!v.valid || !v.fields) throw new Error(`invalid cron expression "${expression}": ${v.errors[0]?.message ?? ''}`);
  // A task that is never started: only its matcher is used. Destroying it takes it out of
  // node-cron's task registry (the matcher keeps working).
  const task = createTask(expression, () => undefined, { timezone: tz });
  void task.destroy();
  const asc = (xs: readonly number[]): number[] => [...new Set(xs)].sort((a, b) => a - b);
  const c: Compiled = {
    fields: v.fields,
    match: (d) => task.match(d),
    hours: asc(v.fields.hour),
    minutes: asc(v.fields.minute),
    seconds: asc(v.fields.second),
  };
  if (compiled.size > 4096) compiled.clear();
  compiled.set(key, c);
  return c;
}

const formatters = new Map<string, Intl.DateTimeFormat>();
function formatter(tz: string): Intl.DateTimeFormat {
  let f = formatters.get(tz);
  if (!f) {
    f = new Intl.DateTimeFormat('en-US', { timeZone: tz, hourCycle: 'h23', year: 'numeric', month: 'numeric', day: 'numeric', hour: 'numeric', minute: 'numeric', second: 'numeric' });
    formatters.set(tz, f);
  }
  return f;
}

/** The local wall time of an instant in tz, as if it were UTC (ms, whole seconds). */
function wallOf(tz: string, t: number): number {
  const p: Record<string, number> = {};
  for (const part of formatter(tz).formatToParts(new Date(t))) if (part.type !== 'literal') p[part.type] = Number(part.value);
  return Date.UTC(p.year!, p.month! - 1, p.day!, p.hour! % 24, p.minute!, p.second!);
}

const offsetAt = (tz: string, t: number): number => wallOf(tz, Math.floor(t / 1000) * 1000) - Math.floor(t / 1000) * 1000;

/** The instants (0, 1 or 2) whose wall time in tz is `wall`. */
function instantsOf(tz: string, wall: number): number[] {
  const offsets = new Set([offsetAt(tz, wall - 14 * HOUR), offsetAt(tz, wall + 14 * HOUR)]);
  const out: number[] = [];
  for (const off of offsets) {
    const t = wall - off;
    if (offsetAt(tz, t) === off) out.push(t);
  }
  return out.sort((a, b) => a - b);
}

/** Could the local day (UTC-encoded midnight `day`) match? Never excludes a day node-cron matches. */
function dayMayMatch(f: ParsedFields, day: number): boolean {
  const d = new Date(day);
  const month = d.getUTCMonth() + 1;
  const dom = d.getUTCDate();
  const dow = d.getUTCDay();
  if (!f.month.includes(month)) return false;
  const domOk = f.dayOfMonth.some((v) => typeof v === 'string' || v === dom);
  const dowOk = f.dayOfWeek.some((v) => typeof v === 'string' || v === dow || (dow === 0 && v === 7));
  return domOk && dowOk;
}

/**
 * The latest firing at or before `now`, looking back at most SEARCH_DAYS; null if none.
 * The earliest firing after `now`, looking ahead at most SEARCH_DAYS; null if none.
 */
export function previousFiring(expression: string, tz: string, now: number): number | null {
  return walk(expression, tz, now, -1);
}

export function nextFiring(expression: string, tz: string, now: number): number | null {
  return walk(expression, tz, now, 1);
}

function walk(expression: string, tz: string, now: number, dir: 1 | -1): number | null {
  const c = compile(expression, tz);
  const nowWall = wallOf(tz, Math.floor(now / 1000) * 1000);
  const firstDay = Math.floor(nowWall / DAY) * DAY;
  const hours = dir === 1 ? c.hours : [...c.hours].reverse();
  const minutes = dir === 1 ? c.minutes : [...c.minutes].reverse();
  const seconds = dir === 1 ? c.seconds : [...c.seconds].reverse();
  // Offsets around an instant (at most one change within a day either side): an instant of wall
  // time w near it is w - off for one of them.
  const around = (t: number): { min: number; max: number } => {
    const offs = [offsetAt(tz, t - 14 * HOUR), offsetAt(tz, t), offsetAt(tz, t + 14 * HOUR)];
    return { min: Math.min(...offs), max: Math.max(...offs) };
  };
  const nearNow = around(now);
  let best: number | null = null;
  let nearBest = nearNow;
  for (let i = 0; i <= SEARCH_DAYS + 1; i++) {
    const day = firstDay + dir * i * DAY;
    if (!dayMayMatch(c.fields, day)) continue;
    for (const h of hours) {
      for (const m of minutes) {
        for (const s of seconds) {
          const wall = day + h * HOUR + m * 60_000 + s * 1000;
          // Every instant of this wall time is on the wrong side of now: skip it.
          if (dir === -1 ? wall - nearNow.max > now : wall - nearNow.min <= now) continue;
          // Every instant of this wall time is beyond the best found, and so is all that follows.
          if (best !== null && (dir === -1 ? wall - nearBest.min < best : wall - nearBest.max > best)) return within(best, now);
          for (const t of instantsOf(tz, wall)) {
            if (dir === -1 ? t > now : t <= now) continue;
            if (best !== null && (dir === -1 ? t <= best : t >= best)) continue;
            if (!c.match(new Date(t))) continue;
            best = t;
            nearBest = around(t);
          }
        }
      }
    }
  }
  return best === null ? null : within(best, now);
}

const within = (t: number, now: number): number | null => (Math.abs(t - now) <= SEARCH_DAYS * DAY ? t : null);
