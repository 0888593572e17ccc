/**
 * bench:scale-on-off — issue #42's acceptance line "a load of 20 s on, 20 s off, with
 * `down_after: 60s`: no scale-in during the test, and no replica started and stopped within a
 * minute", at the issue's own periods, on the real stack: test/harness/scale-on-off.ts (a real
 * `llmgw serve`, an sshd node running real llama-server, an on-demand model with `max_replicas: 3`
 * and one-slot, `threads: 1` replicas, six `openai` clients, maxRetries 0), read through the admin
 * API, the event feed and serve's log lines. `up_after` is the documented default, 10 s. The phases
 * go on until 3 off + on cycles have run past the first scale-out; then the load stops and the run
 * waits for the one step down (after down_after) and the surplus replica's stop.
 *
 * A check that fails ends the run with its message and exit code 1; otherwise it prints the
 * figures. The suite runs the same scenario at 0.4 × the periods (test/integration/scale-on-off.test.ts):
 * this one takes about 4 minutes.
 *
 *   npm run bench:scale-on-off     (BENCH_ON_OFF_PHASE_S=20, BENCH_ON_OFF_DOWN_AFTER_S=60,
 *                                   BENCH_ON_OFF_UP_AFTER_S=10, BENCH_ON_OFF_CYCLES=3 to change them)
 */
import { cpus, loadavg } from 'node:os';
import { onOffRun } from '../test/harness/scale-on-off.js';

const num = (name: string, dflt: number): number => {
  const v = Number(process.env[name] ?? dflt);
  if (!Number.isFinite(v) || v <= 0) throw new Error(`${name}: a positive number (got ${process.env[name]})`);
  return v;
};
const phaseMs = num('BENCH_ON_OFF_PHASE_S', 20) * 1000;
const downAfterMs = num('BENCH_ON_OFF_DOWN_AFTER_S', 60) * 1000;
const upAfterMs = num('BENCH_ON_OFF_UP_AFTER_S', 10) * 1000;
const cycles = num('BENCH_ON_OFF_CYCLES', 3);

const started = new Date();
const load0 = loadavg()[0]!;
const machine = (): string => `${cpus().length} × ${cpus()[0]?.model ?? '?'}, load average ${load0.toFixed(1)} at the start, ${loadavg()[0]!.toFixed(1)} at the end`;
try {
  const f = await onOffRun({ phaseMs, upAfterMs, downAfterMs, cycles, maxOnPhases: cycles + 3 });
  const wall = (Date.now() - started.getTime()) / 1000;
  console.log(JSON.stringify({ started: started.toISOString(), wallS: wall, machine: machine(), ...f }, null, 2));
  console.log(
    [
      '',
      `${phaseMs / 1000} s on / ${phaseMs / 1000} s off, up_after ${upAfterMs / 1000} s, down_after ${downAfterMs / 1000} s: ${f.onPhases} on phases, ${f.cyclesAfterFirstUp} off + on cycles after the first scale-out (at +${(f.firstUpAtMs / 1000).toFixed(1)} s), ${(f.loadMs / 1000).toFixed(1)} s of load`,
      `requests ${f.requests}, ok ${f.ok}, failed ${f.failed}; counts seen (admin API) ${f.counts.join(' → ')}; scaled (events) ${f.scaled.join(', ')}`,
      `no scale-in and no replica stopped during the load (admin API, events, logs); step down ${(f.stepDownAfterLastSentMs / 1000).toFixed(1)} s after the last request was sent; stops: ${f.stops.join(', ')} (shortest start → stop ${(f.shortestStartToStopMs / 1000).toFixed(1)} s)`,
      `wall ${wall.toFixed(0)} s; ${machine()}`,
    ].join('\n'),
  );
  process.exit(0);
} catch (e) {
  console.error(`FAILED: ${(e as Error).message}\n${machine()}`);
  process.exit(1);
}
