/**
 * The controller's V8 heap sizing, set by `llmgw serve` itself, so that it holds however node was
 * started (an installed package, the systemd unit, a container's CMD: none of them pass node flags).
 *
 * Most of an idle controller's resident memory is room V8 keeps, not what it holds (bench/RESULTS.md,
 * "Controller memory"): by default the young generation grows to two 16 MiB semi-spaces that stay
 * resident, and the old generation grows well past the live heap before a full collection. Node's
 * command line can bound both (`--max-semi-space-size=2 --heap-growing-percent=20`), but nothing
 * that starts llmgw passes them, `NODE_OPTIONS` refuses the second, and V8 reads the semi-space
 * limit only when the heap is created. Two flags V8 reads at every resize can be set at run time:
 * - `--heap-growing-percent`: how far the old generation may grow past what a full collection
 *   left, read at each collection's limit computation;
 * - `--semi-space-growth-factor`: how much the young generation grows when it grows. Set to 2 while
 *   the young generation is below half its cap and to 1 from then on, after every collection (a `gc`
 *   performance observer), it grows to the cap and no further: `--max-semi-space-size=2`'s effect.
 *
 * A flag the operator gave node (its command line or `NODE_OPTIONS`) wins: llmgw then leaves that
 * part alone.
 */
import { PerformanceObserver } from 'node:perf_hooks';
import v8 from 'node:v8';

/** The young generation's cap: two semi-spaces of 2 MiB, what `--max-semi-space-size=2` gives. */
export const YOUNG_CAP_BYTES = 4 * 2 ** 20;
/** The old generation may grow 20 % past what the last full collection left. */
export const GROWING_PERCENT = 20;

export interface HeapSizing {
  /** The young generation's cap in bytes, or null when node's flags size it. */
  readonly youngCapBytes: number | null;
  /** The old generation's growing percent, or null when node's flags set it. */
  readonly growingPercent: number | null;
}

const YOUNG_FLAGS = /--(?:max|min)[-_]semi[-_]space[-_]size\b|--semi[-_]space[-_]growth[-_]factor\b/;
const GROWING_FLAG = /--heap[-_]growing[-_]percent\b/;

/** What llmgw sizes itself, given node's own flags (`process.execArgv` and `NODE_OPTIONS`). */
export function heapSizingFor(execArgv: readonly string[], nodeOptions: string | undefined): HeapSizing {
  const given = [...execArgv, nodeOptions ?? ''].join(' ');
  return { youngCapBytes: YOUNG_FLAGS.test(given) ? null : YOUNG_CAP_BYTES, growingPercent: GROWING_FLAG.test(given) ? null : GROWING_PERCENT };
}

/** The growth factor for the young generation's next resize: it doubles only while the double fits the cap. */
export function youngGrowthFactor(youngBytes: number, capBytes: number): 1 | 2 {
  return youngBytes * 2 <= capBytes ? 2 : 1;
}

const youngBytes = (): number => v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space')?.space_size ?? 0;

let applied: HeapSizing | null = null;

/**
 * Applies the sizing to this process (once; later calls return what the first applied). Call it
 * before the controller's modules load: the young generation grows while they do.
 */
export function sizeHeap(execArgv: readonly string[] = process.execArgv, nodeOptions: string | undefined = process.env['NODE_OPTIONS']): HeapSizing {
  if (applied) return applied;
  const sizing = (applied = heapSizingFor(execArgv, nodeOptions));
  if (sizing.growingPercent !== null) v8.setFlagsFromString(`--heap-growing-percent=${sizing.growingPercent}`);
  const cap = sizing.youngCapBytes;
  if (cap !== null) {
    let factor = 0;
    const steer = (): void => {
      const next = youngGrowthFactor(youngBytes(), cap);
      if (next !== factor) v8.setFlagsFromString(`--semi-space-growth-factor=${(factor = next)}`);
    };
    steer();
    new PerformanceObserver(steer).observe({ entryTypes: ['gc'] });
  }
  return sizing;
}

/** What `sizeHeap` applied in this process (null before it ran): for the start log. */
export function heapSizing(): HeapSizing | null {
  return applied;
}
