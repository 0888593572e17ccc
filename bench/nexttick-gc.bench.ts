/**
 * Why bench/router.bench.ts puts every Node proxy through a full GC before measuring it.
 *
 * In Node 20 (V8 11.3), process.nextTick builds each tick object with an object literal whose first
 * keys are computed (async-id symbols). That literal starts from a map V8 keeps only weakly; once no
 * tick object is alive across a few full GCs (V8 retains unused maps for 2 of them:
 * --retain-maps-for-n-gc), it is collected, the next nextTick creates a new one, and the literal's inline
 * cache, having seen two maps, goes megamorphic for good: every later nextTick defines its properties
 * in the runtime. node:http, streams and undici call nextTick several times per proxied request, so a
 * proxy measured before its first full GC looks faster than the same proxy a minute into its life.
 *
 *   node --expose-gc dist/bench/nexttick-gc.bench.js      (npm run bench:nexttick)
 *
 * Prints ns per nextTick before and after three full GCs (`gc()`) in this process.
 */
const N = 2_000_000;

function ticks(): Promise<number> {
  return new Promise((resolve) => {
    let n = 0;
    const t0 = process.hrtime.bigint();
    const next = (): void => {
      if (++n < N) process.nextTick(next);
      else resolve(Number(process.hrtime.bigint() - t0) / N);
    };
    process.nextTick(next);
  });
}

async function main(): Promise<void> {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run with --expose-gc');
  console.log(`process.nextTick before and after full GCs — node ${process.version}`);
  await ticks(); // warm-up: compiled, inline caches monomorphic
  const before = [await ticks(), await ticks()];
  await new Promise((r) => setTimeout(r, 10)); // no tick object alive
  for (let i = 0; i < 3; i++) gc();
  const after = [await ticks(), await ticks()];
  const b = Math.min(...before);
  const a = Math.min(...after);
  console.log(`  before full GCs: ${b.toFixed(0)} ns per tick`);
  console.log(`  after three:     ${a.toFixed(0)} ns per tick (${(a / b).toFixed(1)}×)`);
}

void main();
