/**
 * Scaling with demand (#42) under a load that comes and goes, on the real stack (real `llmgw serve`,
 * sshd node, real llama-server, the official `openai` client): test/harness/scale-on-off.ts. The
 * issue's 20 s on, 20 s off under down_after 60s, scaled down by the same factor (0.4): 8 s on, 8 s
 * off under down_after 24s — down_after three times the gap, as in the issue — for two off + on
 * cycles past the first scale-out. The issue's own periods run as `npm run bench:scale-on-off`
 * (about 4 minutes: too long for the suite's budget), recorded in bench/RESULTS.md.
 *
 * The count goes up and never comes down while the load comes and goes (admin API, events, logs);
 * no replica is started and stopped within down_after; no request fails. Then the load stops for
 * good and the count steps down once down_after has passed.
 */
import { describe, it } from 'node:test';
import { onOffRun } from '../harness/scale-on-off.js';

describe('a load of 8 s on, 8 s off under down_after 24s (the issue\'s 20/20/60 scaled by 0.4)', { timeout: 5 * 60_000 }, () => {
  it('scales out once, never in while the load comes and goes, starts and stops no replica within down_after, fails nothing; steps down after down_after once it stops', async () => {
    const figures = await onOffRun({ phaseMs: 8_000, upAfterMs: 2_000, downAfterMs: 24_000, cycles: 2, maxOnPhases: 5 });
    console.log(JSON.stringify(figures));
  });
});
