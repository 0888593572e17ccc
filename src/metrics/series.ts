import type { Gauge } from 'prom-client';

type Labels<T extends string> = Record<T, string>;

function keyOf(labels: Record<string, string>): string {
  let key = '';
  for (const k of Object.keys(labels).sort()) key += `${k}\u0000${labels[k]}\u0000`;
  return key;
}

/**
 * A labelled gauge whose set of series is replaced as a whole: `replace` sets every series given
 * (0 being a real value) and removes every series it set before that is not given now — so a
 * model that left the fleet, or a digest that changed, leaves no stale series behind.
 */
export class GaugeSeries<T extends string> {
  /** Each series this set, with the value it holds (a series whose value did not change is not set again). */
  private present = new Map<string, { readonly labels: Labels<T>; readonly value: number }>();

  constructor(readonly gauge: Gauge<T>) {}

  replace(entries: Iterable<readonly [Labels<T>, number]>): void {
    const next = new Map<string, { readonly labels: Labels<T>; readonly value: number }>();
    for (const [labels, value] of entries) {
      const key = keyOf(labels);
      const had = this.present.get(key);
      next.set(key, had && had.value === value ? had : { labels, value });
      if (had?.value !== value) this.gauge.set(labels, value);
    }
    for (const [key, { labels }] of this.present) if (!next.has(key)) this.gauge.remove(labels);
    this.present = next;
  }

  /** Sets one series and keeps it until the next `replace` (or `remove`). */
  set(labels: Labels<T>, value: number): void {
    this.present.set(keyOf(labels), { labels, value });
    this.gauge.set(labels, value);
  }

  remove(labels: Labels<T>): void {
    const key = keyOf(labels);
    if (this.present.delete(key)) this.gauge.remove(labels);
  }

  /** Label sets currently present. */
  labels(): Labels<T>[] {
    return [...this.present.values()].map((p) => p.labels);
  }
}
